"""Blocks a project declares in its CLAUDE.md for loopwright.

``### Loop Cost Rates`` overrides the built-in price table, a Markdown table of
US dollars per million tokens (columns in this order; a header row and a
separator row are expected)::

    ### Loop Cost Rates
    | model | input | output | cache_write | cache_read |
    |---|---|---|---|---|
    | claude-sonnet-4-5 | 3.00 | 15.00 | 3.75 | 0.30 |

``### Loop Logging`` lists redaction patterns (RE2 regular expressions, one per
list item, in backticks); every match is replaced by ``[REDACTED]`` in history,
journal, backprop and report text before it is written::

    ### Loop Logging
    - redact: `sk-ant-[A-Za-z0-9_-]+`
    - redact: `(?i)password=\\S+`

A block ends at the next heading. Lines that do not fit are reported with their
line number and skipped; the rest of the block still applies.

A committed CLAUDE.md is untrusted input, so its patterns never run on Python's
backtracking ``re`` (``(\\S+)+QQQ`` would hang every Stop). They run on Google's
RE2 (``google-re2``), whose time is linear in the text, imported only when a project
has patterns; a pattern RE2 rejects (backreferences, lookarounds, ...) is skipped
with a note, and so is every pattern when RE2 cannot be imported. At most
MAX_PATTERNS patterns of MAX_PATTERN_CHARS characters are taken, and each one sees
a string WINDOW characters at a time (see ``match_spans``). Every pattern searches
the text as written, and what the patterns match becomes one mark per stretch.

Rates must lie between 0 and MAX_RATE dollars per million tokens (``nan``,
``inf``, ``1e308`` and negative values are refused with a note); whether a project
rate below the built-in one counts is decided in ``core/rates.py``.
"""

from __future__ import annotations

from loopwright.core.rates import FIELDS, MAX_RATE
from loopwright.core.record import Record
from loopwright.state.fspath import Path

# The two line shapes are read with string tests, not regular expressions: CLAUDE.md is
# read at every Stop and importing re would cost it more. re2 is imported only to compile
# a project's own redaction patterns (tests/core/test_textforms.py holds both readers to
# the regular expressions they replace).

MAX_PATTERNS = 20  # redaction patterns taken from one CLAUDE.md
MAX_PATTERN_CHARS = 1000
MAX_RATE_ROWS = 200
MAX_MODEL_CHARS = 200
WINDOW = 4096  # characters of a string one pattern searches at a time
OVERLAP = 1024  # consecutive windows share this many: a match this long is never cut
RE2_MAX_MEM = 2 << 20  # bytes RE2 may use for one pattern (a larger one fails to compile)
MARK = "[REDACTED]"


def heading_title(line: str) -> str | None:
    """The title of a Markdown ATX heading (``## Title ##``), or None for any other line."""
    i = 0
    while i < 3 and i < len(line) and line[i].isspace():
        i += 1
    j = i
    while j < len(line) and line[j] == "#":
        j += 1
    if not 1 <= j - i <= 6 or j == len(line) or not line[j].isspace():
        return None
    return line[j:].strip().rstrip("#").rstrip()


def redact_pattern(line: str) -> str | None:
    """PATTERN of a ``- redact: `PATTERN` `` line, or None."""
    body = line.strip()
    if not body or body[0] not in "-*":
        return None
    body = body[1:].lstrip()
    if not body.startswith("redact:"):
        return None
    body = body[len("redact:") :].lstrip()
    if len(body) < 3 or body[0] != "`" or body[-1] != "`":
        return None
    return body[1:-1]


class ProjectRules(Record):
    FIELDS = (
        ("rates", {}),
        ("redactions", []),
        ("problems", []),
        ("path", None),
    )

    rates: dict[str, dict[str, float]]
    redactions: list  # compiled RE2 patterns
    problems: list[str]
    path: Path | None


def claude_md_path(project: Path) -> Path | None:
    for candidate in (project / "CLAUDE.md", project / ".claude" / "CLAUDE.md"):
        if candidate.is_file():
            return candidate
    return None


def _blocks(text: str) -> dict[str, list[tuple[int, str]]]:
    """Lines under each heading title (lower case), with their line numbers."""
    out: dict[str, list[tuple[int, str]]] = {}
    current: list[tuple[int, str]] | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        title = heading_title(line)
        if title is not None:
            title = title.strip().lower()
            current = out.setdefault(title, []) if title in ("loop cost rates", "loop logging") else None
            continue
        if current is not None:
            current.append((lineno, line))
    return out


def _parse_rates(lines: list[tuple[int, str]], name: str, rules: ProjectRules) -> None:
    rows = [(n, ln) for n, ln in lines if ln.strip().startswith("|")]
    for n, ln in rows:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if not cells or set("".join(cells)) <= set("-: "):
            continue  # separator row
        if cells[0].lower() in ("model", "models"):
            continue  # header row
        problem = _rate_row_problem(cells, rules)
        if problem:
            rules.problems.append(f"{name}:{n}: {problem}; skipped")
            continue
        rules.rates[cells[0]] = dict(zip(FIELDS, (float(c.lstrip("$")) for c in cells[1:])))


def _rate_row_problem(cells: list[str], rules: ProjectRules) -> str | None:
    """Why a Loop Cost Rates row cannot be used, or None. A rate must be a finite number
    from 0 to MAX_RATE: nan, inf or 1e308 would make every Stop's dollar sum fail."""
    if len(cells) != 1 + len(FIELDS):
        return f"a Loop Cost Rates row needs {1 + len(FIELDS)} cells (model, {', '.join(FIELDS)})"
    if not cells[0] or len(cells[0]) > MAX_MODEL_CHARS:
        return f"a Loop Cost Rates row needs a model name of 1 to {MAX_MODEL_CHARS} characters"
    if len(rules.rates) >= MAX_RATE_ROWS:
        return f"more than {MAX_RATE_ROWS} Loop Cost Rates rows"
    try:
        values = [float(c.lstrip("$")) for c in cells[1:]]
    except ValueError:
        return "rates must be numbers (dollars per million tokens)"
    if not all(0.0 <= v <= MAX_RATE for v in values):  # nan fails every comparison
        return f"rates must be numbers from 0 to {MAX_RATE:g} (dollars per million tokens)"
    return None


def _re2():
    """google-re2, or None when it cannot be imported. The Stop hook runs Python without
    ``site`` (python -S); the first time a package is wanted, site's paths (the plugin's
    virtual environment) are added, as for psutil in state/lock.py."""
    try:
        import re2
    except ImportError:
        import sys

        if not sys.flags.no_site:
            return None
        import site

        site.main()
        try:
            import re2
        except ImportError:
            return None
    return re2


def _parse_logging(lines: list[tuple[int, str]], name: str, rules: ProjectRules) -> None:
    engine, options, taken = None, None, 0
    for n, ln in lines:
        if not ln.strip():
            continue
        pattern = redact_pattern(ln)
        if pattern is None:
            if "redact" in ln.lower():
                rules.problems.append(
                    f"{name}:{n}: write redaction patterns as '- redact: `PATTERN`'; skipped"
                )
            continue
        if taken == MAX_PATTERNS:
            rules.problems.append(
                f"{name}:{n}: more than {MAX_PATTERNS} redaction patterns; the rest are skipped"
            )
            return
        taken += 1
        if len(pattern) > MAX_PATTERN_CHARS:
            rules.problems.append(
                f"{name}:{n}: redaction pattern longer than {MAX_PATTERN_CHARS} characters; skipped"
            )
            continue
        if engine is None:
            engine = _re2()
            if engine is None:
                rules.problems.append(
                    f"{name}:{n}: redaction patterns need the google-re2 package, which cannot be imported; "
                    "the Loop Logging patterns are skipped (start a new session to install it)"
                )
                return
            options = engine.Options()
            options.never_capture, options.log_errors, options.max_mem = True, False, RE2_MAX_MEM
        _compile(engine, options, pattern, f"{name}:{n}", rules)


def _compile(engine, options, pattern: str, where: str, rules: ProjectRules) -> None:
    try:
        rules.redactions.append(engine.compile(pattern, options))
    except (engine.error, ValueError, TypeError) as exc:  # TypeError: a pattern RE2's binding refuses
        why = exc.args[0] if exc.args else "invalid"
        why = (why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why))[:200]
        rules.problems.append(
            f"{where}: redaction pattern skipped: RE2 cannot run it ({why}); RE2 has no backreferences or "
            "lookarounds"
        )


MAX_BYTES = 1024 * 1024


def _read_bounded(path: Path, project: Path) -> str | None:
    """CLAUDE.md's text: a regular file inside the project (a symlink to AGENTS.md is
    fine, one that leads outside the project or to a device is not), at most 1 MiB."""
    import os
    import stat

    real = os.path.realpath(path)
    root = os.path.realpath(project)
    if not real.startswith(root + os.sep):
        return None
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def load(project: Path) -> ProjectRules:
    path = claude_md_path(project)
    rules = ProjectRules(path=path)
    if path is None:
        return rules
    text = _read_bounded(path, Path(project))
    if text is None:
        return rules
    blocks = _blocks(text)
    if "loop cost rates" in blocks:
        _parse_rates(blocks["loop cost rates"], path.name, rules)
    if "loop logging" in blocks:
        _parse_logging(blocks["loop logging"], path.name, rules)
    rules.problems.sort(key=lambda p: int(p[len(path.name) + 1 :].partition(":")[0]))  # in file order
    return rules


def lowered_rates(rules: ProjectRules, accepted: dict | None) -> list[dict]:
    """The project's rows priced below the built-in ones, and whether each counts toward
    the dollar ceiling (only a row the user confirmed at start, as it is now)."""
    from loopwright.core import rates

    return [
        {
            "model": key,
            "built_in": low["built_in"],
            "fields": low["fields"],
            "rates": rules.rates[key],
            "counted": rates.confirmed(key, rules.rates[key], accepted),
        }
        for key, low in rates.lowered(rules.rates).items()
    ]


def lowered_lines(lowered: list[dict], name: str = "CLAUDE.md") -> list[str]:
    """One line for the lowered rows that count, one for those that do not."""

    def names(counted: bool) -> str:
        models = [r["model"] for r in lowered if r["counted"] is counted]
        return ", ".join(models[:8]) + (f" and {len(models) - 8} more" if len(models) > 8 else "")

    lines = []
    if any(not r["counted"] for r in lowered):
        lines.append(
            f"{name} prices {names(False)} below the built-in rates; they do not count: the dollar "
            "ceiling counts the built-in rates (start the loop with --accept-project-rates to count them)"
        )
    if any(r["counted"] for r in lowered):
        lines.append(
            f"{name} prices {names(True)} below the built-in rates; they count toward the dollar "
            "ceiling (confirmed with --accept-project-rates)"
        )
    return lines


def redact(value: object, patterns: list) -> object:
    """``value`` with every string inside it redacted (dicts and lists walked)."""
    if not patterns:
        return value
    if isinstance(value, str):
        return redact_text(value, patterns)
    if isinstance(value, dict):
        return {k: redact(v, patterns) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, patterns) for v in value]
    return value


def redact_text(text: str, patterns: list) -> str:
    """``text`` with what any pattern matches replaced by MARK. Every pattern searches the
    original text (never another one's marks), and matches that overlap or touch become one
    mark: the result is never much longer than the text, whatever the patterns."""
    merged: list[list[int]] = []
    for a, b in sorted(s for p in patterns for s in match_spans(p, text)):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, cut = [], 0
    for a, b in merged:
        out.extend((text[cut:a], MARK))
        cut = b
    out.append(text[cut:])
    return "".join(out)


def match_spans(pattern, text: str, window: int = WINDOW, overlap: int = OVERLAP) -> list[tuple[int, int]]:
    """The non-empty matches of ``pattern`` in ``text``, searched ``window`` characters at
    a time: RE2 takes linear time per search, but a pattern that matches many times may scan
    the rest of its text again for each match, so one pattern's work on a string is bounded
    by searching bounded pieces. The rule:

    - a window's matches that start before its last ``overlap`` characters count;
    - a match that reaches the window's end, where more text could extend it, is searched
      again in a window that starts with it (once: that window does not hand one on);
    - otherwise the next window starts after the last match, or ``window - overlap``
      characters on, whichever is later.

    So a match of up to ``overlap`` characters is found whole wherever it lies, and so is
    one of up to ``window`` characters whose first part already matches; a longer one is
    found in its first ``window`` characters and the search goes on from there. A string
    of n characters takes at most 2n / (window - overlap) + 2 windows."""
    if not 0 <= overlap < window:
        raise ValueError("need 0 <= overlap < window")
    found: list[tuple[int, int]] = []
    pos, n, may_defer = 0, len(text), True
    while pos < n:
        part = text[pos : pos + window]
        final = pos + len(part) == n
        limit = len(part) if final else window - overlap
        cut, defer = 0, None
        for a, b in _spans(pattern, part):
            if a >= limit:
                break  # the next window starts at or before it
            if b == len(part) and not final and a > 0 and may_defer:
                defer = a  # it may go on past the window
                break
            if a < b:
                found.append((pos + a, pos + b))
                cut = b
        pos += defer if defer is not None else max(limit, cut)
        may_defer = defer is None
    return found


def _spans(pattern, part: str):
    """Match spans of ``pattern`` in ``part``. RE2 takes UTF-8: a lone surrogate (valid in
    a Python string, not in UTF-8) is searched as "?", which keeps every index."""
    if not part.isascii():
        part = part.encode("utf-8", "replace").decode("utf-8")
    for m in pattern.finditer(part):
        yield m.span()
