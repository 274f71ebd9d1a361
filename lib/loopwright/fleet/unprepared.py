"""What a slot knows of a loop it could not start: an id it will not use in a path, and what the
runner said when it exited without running an iteration (its help, an error), for the reason
a loop that cannot be prepared is retried later and then ended with (registry/faults.py).

The runner's stderr goes to ``--data/logs/<loop>-<generation>.log``; a log that stayed empty is
removed when the slot is done, so that retries leave no pile of empty files.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from loopwright.core.termsafe import one_line

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
BAD_ID = "its id is not 1-64 letters, digits, '-' or '_' (a worker names files under --data by it)"
TAIL = 4096  # bytes of the runner's log read for its last line
JOIN_SECONDS = 5.0  # for the reader of the runner's output to reach its end


def plain_id(loop_id) -> bool:
    return isinstance(loop_id, str) and bool(_ID.match(loop_id))


def _shown(text: str) -> str:
    return one_line(text.strip())[:300]


def tail_line(path: Path | None) -> str:
    """The last line with text in the file's last few kilobytes; "" when none or unreadable."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - TAIL))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return _shown(lines[-1]) if lines else ""


class Said:
    """The runner's log file and the first line it printed that was not an event."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.first = ""
        self.reader: threading.Thread | None = None

    def open(self, path: Path):
        self.path = path
        return open(path, "ab")  # noqa: SIM115 - the child's stderr

    def read(self, target, name: str) -> None:
        """Reads the runner's output (``target``) in a thread of its own."""
        self.reader = threading.Thread(target=target, name=name, daemon=True)
        self.reader.start()

    def line(self, raw) -> None:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        if not self.first and text.strip():
            self.first = _shown(text)

    def exit(self, code) -> str:
        """The reason for a runner that exited without running an iteration."""
        if self.reader is not None:
            self.reader.join(JOIN_SECONDS)  # its output read to the end: the same words each time
        what = tail_line(self.path) or self.first
        return f"the runner exited (code {code}) without running an iteration" + (f": {what}" if what else "")

    def drop_empty_log(self) -> None:
        try:
            if self.path is not None and self.path.stat().st_size == 0:
                self.path.unlink()
        except OSError:
            pass
