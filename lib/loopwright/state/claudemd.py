"""Blocks a project declares in its CLAUDE.md for loopwright.

``### Loop Cost Rates`` overrides the built-in price table, a Markdown table of
US dollars per million tokens (columns in this order; a header row and a
separator row are expected)::

    ### Loop Cost Rates
    | model | input | output | cache_write | cache_read |
    |---|---|---|---|---|
    | claude-sonnet-4-5 | 3.00 | 15.00 | 3.75 | 0.30 |

``### Loop Logging`` lists redaction patterns (Python regular expressions, one
per list item, in backticks); every match is replaced by ``[REDACTED]`` in
history, journal and report text before it is written::

    ### Loop Logging
    - redact: `sk-ant-[A-Za-z0-9_-]+`
    - redact: `(?i)password=\\S+`

A block ends at the next heading. Lines that do not fit are reported with their
line number and skipped; the rest of the block still applies.
"""

from __future__ import annotations

from loopwright.core.rates import FIELDS
from loopwright.core.record import Record
from loopwright.state.fspath import Path

# The two line shapes are read with string tests, not regular expressions: CLAUDE.md is
# read at every Stop and importing re would cost it more. re is imported only to compile
# a project's own redaction patterns (tests/state/test_claudemd.py holds both readers to
# the regular expressions they replace).


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
    redactions: list  # compiled re patterns
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
        if len(cells) != 1 + len(FIELDS):
            rules.problems.append(
                f"{name}:{n}: a Loop Cost Rates row needs {1 + len(FIELDS)} cells (model, "
                f"{', '.join(FIELDS)}); skipped"
            )
            continue
        try:
            values = [float(c.lstrip("$")) for c in cells[1:]]
        except ValueError:
            rules.problems.append(f"{name}:{n}: rates must be numbers (dollars per million tokens); skipped")
            continue
        if any(v < 0 for v in values):
            rules.problems.append(f"{name}:{n}: rates must not be negative; skipped")
            continue
        rules.rates[cells[0]] = dict(zip(FIELDS, values))


def _parse_logging(lines: list[tuple[int, str]], name: str, rules: ProjectRules) -> None:
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
        import re

        try:
            rules.redactions.append(re.compile(pattern))
        except re.error as exc:
            rules.problems.append(f"{name}:{n}: bad redaction pattern ({exc}); skipped")


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
    return rules


def redact(value: object, patterns: list) -> object:
    """``value`` with every string inside it redacted (dicts and lists walked)."""
    if not patterns:
        return value
    if isinstance(value, str):
        for p in patterns:
            value = p.sub("[REDACTED]", value)
        return value
    if isinstance(value, dict):
        return {k: redact(v, patterns) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, patterns) for v in value]
    return value
