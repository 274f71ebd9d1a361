"""The completion sentinel: ``<promise>TEXT</promise>`` on a line of its own.

Rules (SPEC §4.6): only the agent's final assistant message counts; the
sentinel must stand alone on its line (surrounding whitespace ignored, inner runs
of whitespace folded); a sentinel inside a fenced code block never counts.
"""

from __future__ import annotations

DEFAULT_PROMISE = "LOOP COMPLETE"
OPEN, CLOSE = "<promise>", "</promise>"
# Plain string tests rather than regular expressions: this runs on every Stop, and
# importing re costs it more than everything here (tests/core/test_completion.py holds
# both to the regular expressions they replace).


def fence_run(line: str) -> str | None:
    """The fence that opens or closes a code block on ``line`` (three or more backticks or
    tildes after at most three spaces), or None."""
    i = 0
    while i < 3 and i < len(line) and line[i].isspace():
        i += 1
    if i == len(line) or line[i] not in "`~":
        return None
    ch, j = line[i], i
    while j < len(line) and line[j] == ch:
        j += 1
    return line[i:j] if j - i >= 3 else None


def sentinel_text(line: str) -> str | None:
    """The TEXT of a line that is ``<promise>TEXT</promise>`` and nothing else (surrounding
    whitespace allowed), or None."""
    body = line.strip()
    if not (body.startswith(OPEN) and body.endswith(CLOSE)) or len(body) < len(OPEN) + len(CLOSE):
        return None
    return body[len(OPEN) : -len(CLOSE)]


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
        run = fence_run(line)
        if run:
            if fence is None:
                fence = run
                continue
            # A fence closes only with the same character, at least as long.
            if run[0] == fence[0] and len(run) >= len(fence) and not line.strip()[len(run) :].strip():
                fence = None
            continue
        if fence is not None:
            continue
        text = sentinel_text(line)
        if text is not None and normalise(text) == want:
            return True
    return False


def completion_claimed(snap) -> tuple[bool, str]:
    """Whether the final assistant message carries the sentinel, and where it was seen."""
    promise = snap.loop["completion_promise"]
    if snap.last_message is not None:
        if has_sentinel(snap.last_message, promise):
            return True, "last_assistant_message"
        # last_assistant_message holds only the final text block; the transcript has
        # the whole message. Trust it only when it has caught up with that block.
        blocks = snap.turn.final_blocks
        caught_up = len(blocks) > 1 and blocks[-1].strip() == snap.last_message.strip()
        if caught_up and has_sentinel(snap.turn.final_text, promise):
            return True, "transcript (final message)"
        return False, ""
    if has_sentinel(snap.turn.final_text, promise):
        return True, "transcript (final message)"
    return False, ""
