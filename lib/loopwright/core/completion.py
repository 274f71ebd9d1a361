"""The completion sentinel: ``<promise>TEXT</promise>`` on a line of its own.

Rules (SPEC §4.6): only the agent's final assistant message counts; the
sentinel must stand alone on its line (surrounding whitespace ignored, inner runs
of whitespace folded); a sentinel inside a fenced code block never counts.
"""

from __future__ import annotations

import re

DEFAULT_PROMISE = "LOOP COMPLETE"

_LINE = re.compile(r"^\s*<promise>(.*?)</promise>\s*$", re.DOTALL)
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def normalise(text: str) -> str:
    return " ".join(text.split())


def sentinel(promise: str) -> str:
    return f"<promise>{promise}</promise>"


def has_sentinel(message: str | None, promise: str) -> bool:
    if not message:
        return False
    want = normalise(promise)
    fence: str | None = None  # the opening fence run while inside a fenced block
    for line in message.splitlines():
        m = _FENCE.match(line)
        if m:
            run = m.group(1)
            if fence is None:
                fence = run
                continue
            # A fence closes only with the same character, at least as long.
            if run[0] == fence[0] and len(run) >= len(fence) and not line.strip()[len(run) :].strip():
                fence = None
            continue
        if fence is not None:
            continue
        hit = _LINE.match(line)
        if hit and normalise(hit.group(1)) == want:
            return True
    return False
