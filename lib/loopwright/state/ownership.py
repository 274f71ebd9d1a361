"""Whether a directory is one only this user can change, asked as ssh asks of its files.

State kept where another local user can write is state that user can edit: an owner
index that silences a loop, a FIFO that hangs the hook, an old copy of a loop put back.
Standard library only: the Stop hook asks it of every directory it reads.
"""

from __future__ import annotations

import os
import stat


def problem(path: object, st: os.stat_result) -> str | None:
    """Why the directory ``path`` (whose lstat is ``st``) may not hold loopwright's state, or None."""
    if st.st_uid != os.geteuid():
        return (
            f"{path} belongs to another user (uid {st.st_uid}) and loopwright keeps state only in "
            f"directories you own; move it away (mv '{path}' '{path}.untrusted') and start again"
        )
    if st.st_mode & 0o022:
        return (
            f"{path} can be written by other users (mode {stat.S_IMODE(st.st_mode):o}); "
            f"fix it with: chmod go-w '{path}'"
        )
    return None
