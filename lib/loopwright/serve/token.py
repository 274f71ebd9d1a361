"""The monitor's bearer token and data directory: made on first start, 0600 in a 0700
directory under the user's data directory, never inside a project."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    path = Path(base) / "loopwright" / "serve"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def token(directory: Path) -> str:
    """The token, made once. A file others can read is replaced, not trusted."""
    path = directory / "token"
    try:
        st = os.lstat(path)
        if st.st_mode & 0o077 or not os.path.isfile(path) or os.path.islink(path):
            os.unlink(path)
        else:
            value = path.read_text().strip()
            if len(value) >= 32:
                return value
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(32)
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value
