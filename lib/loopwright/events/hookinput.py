"""The Stop hook's stdin: its size limit and the fields loopwright uses, validated.

Light on purpose: the launcher-level entry points read the limit before they know
whether any loop concerns them."""

from __future__ import annotations

from loopwright.core import jsoncodec

MAX_STDIN_BYTES = 16 * 1024 * 1024


class HookInput:
    """The fields of the Stop hook's stdin that loopwright uses, validated."""

    def __init__(self, data: dict):
        sid = data.get("session_id")
        if not isinstance(sid, str) or not sid.strip():
            raise ValueError("stdin has no session_id")
        self.session_id = sid
        tp = data.get("transcript_path")
        self.transcript_path = tp if isinstance(tp, str) and tp else None
        cwd = data.get("cwd")
        self.cwd = cwd if isinstance(cwd, str) and cwd else None
        self.stop_hook_active = data.get("stop_hook_active") is True
        msg = data.get("last_assistant_message")
        self.last_message = msg if isinstance(msg, str) else None
        self.raw = b""  # the event as received: a deferred final tick hands it on


def parse_stdin(raw: bytes) -> HookInput:
    if not raw.strip():
        raise ValueError("stdin is empty")
    if len(raw) > MAX_STDIN_BYTES:
        raise ValueError(f"stdin is larger than {MAX_STDIN_BYTES // (1024 * 1024)} MiB")
    try:
        data = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        raise ValueError("stdin is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("stdin is not a JSON object")
    hook = HookInput(data)
    hook.raw = raw
    return hook
