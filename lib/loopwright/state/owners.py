"""The owner index, ``.loopwright/owners/<name>=<session>``: which session owns each active loop,
so the Stop launcher can pass another session's Stop through without starting Python.

hooks/stop passes a Stop through without starting Python when, for every marker in
active/, owners/ holds exactly one entry ``<name>=<owner>`` (a regular file; the owner
empty or an id that is_owner_id accepts) and no such owner is the event's session_id. Anything
else (no entry, several, a symlink, an odd name) makes it run Python, which decides as
it always did. So the index may lag, but it must never show a single entry naming a
different owner than the loop.json of an active loop: save_config removes the entries
before loop.json changes and writes the new one after. The index is only a hint for
skipping work: what is acted on is still decided from the signed loop.json.
"""

from __future__ import annotations

import os
import stat

from loopwright.state.fspath import Path
from loopwright.state.project import is_id

ACTIVE = "active"  # loop.json's status of a running loop (loops.ACTIVE)

OWNERS_DIRNAME = "owners"
# The session ids the launcher can compare without Python (it extracts the same pattern).
OWNER_ID_LONGEST = 128


def is_owner_id(owner: object) -> bool:
    """A session id the launcher can compare: what its awk extracts, and no more."""
    return is_id(owner, OWNER_ID_LONGEST)


def owner_entry(name: str, cfg: dict | None) -> str | None:
    """The index entry loop ``name`` should have: ``<name>=<session>``, ``<name>=`` while no
    session owns it, or None (no entry: the launcher asks Python) when the loop is not
    active or its owner is not an id the launcher can compare."""
    if not cfg or cfg.get("status") != ACTIVE:
        return None
    owner = cfg.get("owner_session")
    if owner is None:
        return f"{name}="
    if is_owner_id(owner):
        return f"{name}={owner}"
    return None


def _owners_dir(state: Path, create: bool) -> Path | None:
    """``owners/`` when it is a real directory (made when ``create``), else None: a symlink
    or a file there is left alone, and the launcher, seeing it, always asks Python."""
    path = Path(state) / OWNERS_DIRNAME
    for attempt in (0, 1):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create or attempt:
                return None
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                pass
            except OSError:
                return None
            continue
        except OSError:
            return None
        return path if stat.S_ISDIR(st.st_mode) else None
    return None


def owner_entries(state: Path, name: str) -> list[str]:
    """The index entries for loop ``name`` (normally one)."""
    owners = _owners_dir(state, create=False)
    if owners is None:
        return []
    prefix = name + "="
    try:
        return sorted(e for e in os.listdir(owners) if e.startswith(prefix))
    except OSError:
        return []


def set_owner_index(paths, entry: str | None) -> None:  # paths: loops.LoopPaths (no typing import here)
    """Make ``entry`` the only index entry of this loop (no entry when None). Best effort:
    whatever cannot be removed or created leaves the launcher in doubt, never wrong."""
    owners = _owners_dir(paths.state, create=entry is not None)
    if owners is None:
        return
    if entry is not None:
        target = owners / entry
        for attempt in (0, 1):
            try:
                fd = os.open(
                    str(target),
                    os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                    0o600,
                )
            except OSError:
                if attempt:
                    break
                try:
                    os.unlink(target)  # a symlink or special file in its place
                except OSError:
                    pass
                continue
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    break
            finally:
                os.close(fd)
            break
    for other in owner_entries(paths.state, paths.name):
        if other != entry:
            try:  # a directory planted there stays: doubt, not harm
                os.unlink(owners / other)
            except OSError:
                pass
