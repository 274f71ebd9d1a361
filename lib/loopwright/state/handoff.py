"""The handoff a wrap-up turn leaves (core/wrapup.py): ``handoff.md`` in the loop's directory.

The agent writes it, so it is read as data: only a regular file of this user's, not a
link, and only its first ``LIMIT`` characters (a resume prompt must stay a prompt)."""

from __future__ import annotations

import os
import stat

from loopwright.state import loops, store

LIMIT = 20_000


def present(paths: loops.LoopPaths) -> bool:
    """Whether the loop has a handoff worth linking: a non-empty regular file, no link."""
    try:
        st = os.lstat(paths.handoff)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size > 0 and store.others_can_change(st) is None


def read(paths: loops.LoopPaths, limit: int = LIMIT) -> str | None:
    """The handoff's text (cut at ``limit`` characters, with a note), or None when there is none."""
    try:
        fd = os.open(str(paths.handoff), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or store.others_can_change(st) is not None:
            return None
        data = f.read(limit * 4 + 1)
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    if len(text) > limit:
        text = text[:limit] + f"\n\n[… the handoff goes on; read all of it in {paths.handoff}]"
    return text
