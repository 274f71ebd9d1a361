"""The project's debug log (`.loopwright/debug.log`), written only with LOOPWRIGHT_DEBUG=1."""

from __future__ import annotations

import os

from loopwright.core.errors import UnsafePath
from loopwright.state import lock as locks
from loopwright.state import loops, store
from loopwright.state.fspath import Path


def debug(state: Path | None, message: str) -> None:
    if os.environ.get("LOOPWRIGHT_DEBUG") != "1" or state is None:
        return
    try:
        loops.ensure_ignored(state)
        store.append_text(state / "debug.log", f"{locks.now_iso()} pid={os.getpid()} {message}\n")
    except (OSError, UnsafePath):
        pass
