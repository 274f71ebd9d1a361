"""One-time sign-in links to the monitor's page, made by the monitor at start or later by
`loopwright serve --login` while it runs.

`--login` and the monitor share the monitor's data directory (0700, this user's): the command
writes a file named by the SHA-256 of a fresh code into ``logins/`` there, and the monitor takes
a code only when that file is a regular file of this user's that nobody else can read or
write, younger than ``TTL``; signing in deletes it, so a code works once. Another local user
can neither write there nor read the token, so cannot make a link. Before printing a link,
`--login` checks that the port named in ``monitor.json`` is answered by a monitor holding this
user's token (an HMAC of a fresh challenge), so a link is never sent to another program that
took the port after the monitor ended."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import secrets
import stat
import time
from pathlib import Path

from loopwright.core import jsoncodec
from loopwright.core.errors import UnsafePath
from loopwright.state import store

TTL = 15 * 60  # seconds a link made by --login stays good
PROOF_DOMAIN = b"loopwright-monitor-v1\0"


class NoMonitor(Exception):
    """No monitor of this user's is running (or it does not answer as one)."""


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _logins_dir(home: Path, make: bool) -> Path | None:
    """``<home>/logins``: a real directory of this user's that only this user can open."""
    path = home / "logins"
    if make:
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return path if stat.S_ISDIR(st.st_mode) and _private(st) else None


def _name(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()  # the code never becomes a path


def mint(home: Path) -> str:
    """A new one-time code, written where the running monitor looks for it."""
    directory = _logins_dir(home, make=True)
    if directory is None:
        raise NoMonitor(f"{home / 'logins'} is not a private directory of yours; remove it and try again")
    now = time.time()
    for entry in os.scandir(directory):  # links made earlier and never used
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > TTL:
                os.unlink(entry.path)
        except OSError:
            pass
    code = secrets.token_urlsafe(24)
    fd = os.open(str(directory / _name(code)), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    return code


def check(home: Path | None, code: str, consume: bool) -> bool:
    """Whether ``code`` is a live link made by `--login`; ``consume`` uses it up (once only,
    even when two requests race: only one of them deletes the file)."""
    if home is None or not code or len(code) > 200:
        return False
    directory = _logins_dir(home, make=False)
    if directory is None:
        return False
    path = directory / _name(code)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or not _private(st) or time.time() - st.st_mtime > TTL:
        return False
    if not consume:
        return True
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def proof(token: str, challenge: str) -> str:
    """What the monitor answers to a challenge: shows it holds the token, reveals nothing of it."""
    return hmac.new(token.encode(), PROOF_DOMAIN + challenge.encode(), hashlib.sha256).hexdigest()


def record(home: Path, port: int) -> None:
    """Where this monitor listens, for `serve --login` (0600, replaced atomically)."""
    store.write_json(home / "monitor.json", {"pid": os.getpid(), "port": port}, durable=False)


def forget(home: Path) -> None:
    """At exit: the record goes, unless a newer monitor has replaced it."""
    path = home / "monitor.json"
    try:
        if jsoncodec.loads(store.read_regular(path, 4096) or b"{}").get("pid") == os.getpid():
            os.unlink(path)
    except (OSError, ValueError, AttributeError, UnsafePath, jsoncodec.DecodeError):
        pass


def read_token(home: Path) -> str:
    """The running monitor's token, read (never made: no monitor, no token)."""
    path = home / "token"
    try:
        st = os.lstat(path)
        value = (store.read_regular(path, 4096) or b"").decode().strip()
    except (OSError, ValueError, UnsafePath):
        raise NoMonitor("no monitor is running: start one with `loopwright serve`") from None
    if not stat.S_ISREG(st.st_mode) or not _private(st) or len(value) < 32:
        raise NoMonitor(f"{path} is not the monitor's token; start the monitor again")
    return value


def running_port(home: Path, token: str) -> int:
    """The port of this user's running monitor, after it proved it holds ``token``."""
    path = home / "monitor.json"
    try:
        st = os.lstat(path)
        data = jsoncodec.loads(store.read_regular(path, 4096) or b"")
    except (OSError, ValueError, UnsafePath, jsoncodec.DecodeError):
        raise NoMonitor("no monitor is running: start one with `loopwright serve`") from None
    port = data.get("port") if isinstance(data, dict) else None
    if not stat.S_ISREG(st.st_mode) or not _private(st) or not isinstance(port, int) or not 0 < port < 65536:
        raise NoMonitor(f"{path} is not a record the monitor wrote; start the monitor again")
    challenge = secrets.token_urlsafe(16)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # no proxy: loopback only
    try:
        conn.request("GET", f"/login/proof?challenge={challenge}")
        res = conn.getresponse()
        answer = res.read(200).decode("ascii", errors="replace").strip()
    except OSError:
        raise NoMonitor(
            f"no monitor answers on 127.0.0.1:{port}: start one with `loopwright serve`"
        ) from None
    finally:
        conn.close()
    if res.status != 200 or not hmac.compare_digest(answer, proof(token, challenge)):
        raise NoMonitor(f"what answers on 127.0.0.1:{port} is not your monitor; start it again")
    return port
