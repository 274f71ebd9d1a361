"""Which directory git opens for a local repository path, with every symlink resolved.

git does not open a local path as written: it tries ``path/.git``, ``path``, ``path.git/.git``
and ``path.git`` in turn (enter_repo in path.c), follows symlinks on the way, and follows a
``.git`` file's ``gitdir:`` line. So ``<allowed dir>/link.git`` can name a repository outside
the allowed directory. The fleet matches the directory this module finds, and hands git that
directory itself, one that git can only read as itself.
"""

from __future__ import annotations

import os
import stat

from loopwright.fleet.repourl import Refused

# The order git tries them in (path.c, enter_repo).
SUFFIXES = ("/.git", "", ".git/.git", ".git")
GITFILE_MAX = 4096


def _is_git_dir(path: str) -> bool:
    # git's test (setup.c, is_git_directory): objects/ and refs/ and a HEAD.
    return all(os.path.exists(os.path.join(path, p)) for p in ("objects", "refs", "HEAD"))


def _gitfile(path: str) -> str:
    """The directory a ``gitdir: <path>`` file names (relative to the file's directory)."""
    try:
        with open(path, "rb") as f:
            text = f.read(GITFILE_MAX + 1)
    except OSError as e:
        raise Refused(f"cannot read {path}: {e.strerror}") from None
    line = text.decode("utf-8", "replace").split("\n", 1)[0].rstrip("\r")
    if len(text) > GITFILE_MAX or not line.startswith("gitdir: "):
        raise Refused(f"{path} is a file but not a .git file naming a repository")
    return os.path.join(os.path.dirname(path), line[len("gitdir: ") :])


def _picked(path: str) -> str | None:
    """The candidate git would open for ``path`` (a gitfile followed), else None."""
    for suffix in SUFFIXES:
        candidate = path + suffix
        try:
            st = os.stat(candidate)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(st.st_mode):
            return _gitfile(candidate)
        if stat.S_ISDIR(st.st_mode) and _is_git_dir(candidate):
            return candidate
    return None


def real_git_dir(path: str) -> str:
    """The real path (no symlink in it) of the repository git opens for the local ``path``;
    Refused when there is none, or when git could open another directory given that one."""
    picked = _picked(path)
    if picked is None:
        raise Refused(f"no git repository at {path} on this worker")
    try:
        real = os.path.realpath(picked)
    except (OSError, ValueError):
        real = ""
    if not real or not os.path.exists(real):
        raise Refused(f"the repository at {path} cannot be resolved on this worker")
    # Given `real`, git tries real/.git first and real.git after it: none of them may exist,
    # so that git opens `real` or nothing.
    if not os.path.isdir(real) or not _is_git_dir(real):
        raise Refused(f"{path} leads to {real}, which is not a git repository")
    if any(os.path.lexists(real + s) for s in SUFFIXES if s):
        raise Refused(
            f"{real} (where {path} leads) holds a .git of its own: git could open another directory"
        )
    return real
