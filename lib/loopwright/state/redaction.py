"""Running a project's redaction patterns (``### Loop Logging`` in CLAUDE.md): on RE2, in
bounded windows, each pattern over the original text. Loaded only when a project has
patterns, so a Stop without them carries none of this (see state/claudemd.py for the rule).
"""

from __future__ import annotations

WINDOW = 4096  # characters of a string one pattern searches at a time
OVERLAP = 1024  # consecutive windows share this many: a match this long is never cut
RE2_MAX_MEM = 2 << 20  # bytes RE2 may use for one pattern (a larger one fails to compile)
MARK = "[REDACTED]"


def load_re2():
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


def compile_into(engine, options, pattern: str, where: str, rules) -> None:
    """Compile ``pattern`` into ``rules.redactions``, or say in ``rules.problems`` why not."""
    try:
        rules.redactions.append(engine.compile(pattern, options))
    except (engine.error, ValueError, TypeError) as exc:  # TypeError: a pattern RE2's binding refuses
        why = exc.args[0] if exc.args else "invalid"
        why = (why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why))[:200]
        rules.problems.append(
            f"{where}: redaction pattern skipped: RE2 cannot run it ({why}); RE2 has no backreferences or "
            "lookarounds"
        )


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
