"""The mark that tells the project's own task registry from a shipped one: an HMAC under
the user's key of the file's real path and first line, in ``<file>.mark``. Read only when a
loop starts or shows where its tasks come from (state/tasks.py start_source)."""

from __future__ import annotations

import os

from loopwright.state import store
from loopwright.state.fspath import Path

MARK_DOMAIN = b"loopwright-tasks-v1\0"


def _mark_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".mark")


def _mark_message(path: Path) -> bytes:
    """What the mark binds: the file's real path and its first line (the entry loopwright wrote
    when it started the file; the file is only appended to, so it never changes)."""
    import stat

    fd = os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        head = os.pread(fd, 1 << 20, 0)
    finally:
        os.close(fd)
    real = os.path.realpath(path).encode("utf-8", "surrogateescape")
    return MARK_DOMAIN + real + b"\0" + head.split(b"\n", 1)[0]


def mark_made(path: Path) -> None:
    """Record that this user's loopwright started ``path``: an HMAC under the user's key of
    the file's real path and first line, in ``<file>.mark``. A repository cannot ship one that
    verifies; a copy elsewhere, a move or a replaced file no longer does."""
    from loopwright.state import trust

    try:
        digest = trust.hmac_sha256(trust.ensure_key(), _mark_message(path))
        store.write_bytes_atomic(_mark_path(path), digest.encode() + b"\n")
    except (OSError, trust.KeyProblem):
        pass  # unmarked, the file is shown to loops as data: the safe way round


def made_here(path: Path) -> bool:
    """True when ``path`` is missing or empty, or carries this user's loopwright's mark."""
    from loopwright.core.errors import UserError
    from loopwright.state import trust

    try:
        if _empty(path):
            return True
        key = trust.load_key()
        mark = store.read_regular(_mark_path(path), 256)
        want = trust.hmac_sha256(key, _mark_message(path)) if key else None
    except (OSError, ValueError, UserError, trust.KeyProblem):
        return False
    return bool(want and mark) and trust.compare_digest(mark.strip(), want.encode())


def _empty(path: Path) -> bool:
    """A registry not started yet (missing, or nothing written): nothing to vouch for."""
    try:
        return os.lstat(path).st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False
