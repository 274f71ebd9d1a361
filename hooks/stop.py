"""Stop hook: ask the resident Stop server, else answer here (hooks/stop_local.py).

The server (lib/loopwright/events/resident.py) has the package imported already, so an
owner's Stop it answers costs an interpreter start and one round trip. It is asked only
through a socket in this user's private bytecode cache; whatever goes wrong before it has
taken the event (none running, one for another plugin copy, edited code) leaves the event
to this process, untouched. This file is parsed at every Stop: it stays small and imports
nothing but built-in modules until it knows it must answer itself.
"""

import gc

gc.disable()  # a process of a few milliseconds: collecting would only walk the modules it loads

import posix  # noqa: E402  (not os: importing os costs a tenth of an interpreter start)
import sys  # noqa: E402

HOOKS = __file__.rpartition("/")[0] or "."
if not HOOKS.startswith("/"):
    HOOKS = posix.getcwd() + "/" + HOOKS


def _private_dir(path: bytes, mask: int) -> bool:
    """Whether ``path`` is a directory (not a link) of this user's with none of ``mask``'s
    mode bits: the checks state/bytecode.py's cache_dir makes, asked again here because
    the socket is believed only where the bytecode would be."""
    try:
        st = posix.lstat(path)
    except (OSError, ValueError):
        return False
    return st.st_mode & 0o170000 == 0o040000 and st.st_uid == posix.geteuid() and not st.st_mode & mask


def _cache() -> bytes | None:
    """The private bytecode cache where the server's socket would be."""
    env = posix.environ
    if env.get(b"LOOPWRIGHT_RESIDENT") == b"0":
        return None
    data = env.get(b"CLAUDE_PLUGIN_DATA") or env.get(b"LOOPWRIGHT_DATA")
    if not data or not data.startswith(b"/") or data.endswith(b"/") or b"//" in data:
        return None  # only a plain absolute path (cache_dir would normalise the rest)
    if b"/./" in data + b"/" or b"/../" in data + b"/":
        return None
    project = env.get(b"CLAUDE_PROJECT_DIR")
    if project and (data + b"/").startswith(project.rstrip(b"/") + b"/"):
        return None  # a project's files are data, never code
    if not (_private_dir(data, 0o022) and _private_dir(data + b"/pycache", 0o077)):
        return None
    return data + b"/pycache"


def _connect(sock, cache: bytes) -> None:
    """Connect to the server's socket in ``cache``; from within it when its full path would
    not fit in a socket address (104 to 108 bytes)."""
    if len(cache) < 90:
        sock.connect(cache + b"/stop.sock")
        return
    here = posix.open(".", posix.O_RDONLY)
    try:
        posix.chdir(cache)
        sock.connect(b"stop.sock")
    finally:
        posix.fchdir(here)
        posix.close(here)


def _request() -> bytes:
    """What the server needs to be this process: who, which interpreter and plugin, the
    umask, the working directory and the environment (NUL-separated)."""
    mask = posix.umask(0o022)
    posix.umask(mask)
    env = [k + b"=" + v for k, v in posix.environ.items()]
    head = [b"LW1", b"%d" % posix.getpid(), b"%d" % mask, sys.executable.encode(), HOOKS.encode()]
    body = b"\0".join([*head, posix.getcwdb(), *env])
    return len(body).to_bytes(4, "little") + body


def ask_server():
    """The exit code the server answered with; "absent" when none listens, "declined" when
    the one listening leaves this event to us, None when it is not to be asked."""
    cache = _cache()
    if cache is None:
        return None
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(2.0)
    try:
        _connect(sock, cache)
    except OSError:
        return "absent"
    try:
        fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
        sock.sendmsg([_request()], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        if sock.recv(1) != b"A":
            return "declined"
        sock.sendall(b"G")  # from here the event is the server's: never answered twice
    except Exception:  # anything before "go" leaves the event to this process
        return "declined"
    sock.settimeout(None)  # a Stop may wait seconds for a late transcript write
    try:
        done = sock.recv(2)
    except OSError:
        done = b""
    if len(done) == 2 and done[:1] == b"R":
        return done[1]
    sys.stderr.write("loopwright: the resident Stop server ended without an answer; the session may stop.\n")
    return 1


SERVER = ask_server()
if isinstance(SERVER, int):
    sys.stdout.flush()
    posix._exit(SERVER)
LOCAL = HOOKS + "/stop_local.py"
with open(LOCAL, "rb") as _fh:
    exec(compile(_fh.read(), LOCAL, "exec"), {"__name__": "__main__", "__file__": LOCAL, "SERVER": SERVER})
