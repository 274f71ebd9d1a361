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
a string 4096 characters at a time (see ``redaction.match_spans``). Every pattern searches
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
            from loopwright.state import redaction  # only a project with patterns loads RE2

            engine = redaction.load_re2()
            if engine is None:
                rules.problems.append(
                    f"{name}:{n}: redaction patterns need the google-re2 package, which cannot be imported; "
                    "the Loop Logging patterns are skipped (start a new session to install it)"
                )
                return
            options = engine.Options()
            options.never_capture, options.log_errors, options.max_mem = True, False, redaction.RE2_MAX_MEM
        redaction.compile_into(engine, options, pattern, f"{name}:{n}", rules)


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
        from loopwright.state.redaction import redact_text  # loaded with the patterns' engine

        return redact_text(value, patterns)
    if isinstance(value, dict):
        return {k: redact(v, patterns) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, patterns) for v in value]
    return value
