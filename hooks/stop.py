"""Stop hook: ask the resident Stop server, else answer here (hooks/stop_local.py).

The server (lib/loopwright/events/resident.py) has the package imported already, so an
owner's Stop it answers costs an interpreter start and one round trip. It is asked only
through a socket in this user's private bytecode cache, the one named for this process's
execution context (a sandbox has a server of its own), and only when the server is this
user's; whatever goes wrong before it has taken the event (none running, one for another
plugin copy, another context, edited code) leaves the event to this process, untouched.
This file is parsed at every Stop: it stays small and imports nothing but built-in modules
until it knows it must answer itself.
"""

import gc

gc.disable()  # a process of a few milliseconds: collecting would only walk the modules it loads

import posix  # noqa: E402  (not os: importing os costs a tenth of an interpreter start)
import sys  # noqa: E402

HOOKS = __file__.rpartition("/")[0] or "."
if not HOOKS.startswith("/"):
    HOOKS = posix.getcwd() + "/" + HOOKS


_DIR = posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC


def _private(fd: int, mask: int) -> bool:
    """Whether the open ``fd`` is a directory of this user's with none of ``mask``'s mode
    bits: the checks state/bytecode.py's cache_dir makes, asked again here because the socket
    is believed only where the bytecode would be."""
    st = posix.fstat(fd)
    return st.st_mode & 0o170000 == 0o040000 and st.st_uid == posix.geteuid() and not st.st_mode & mask


def _cache():
    """The private bytecode cache where the server's socket would be, open: the data
    directory and its cache are opened without following a link and checked through what
    was opened, and the socket is reached through it, so a data directory in a place others
    can write cannot be swapped between the checks and the connect."""
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
    try:
        top = posix.open(data, _DIR)
    except (OSError, ValueError):
        return None
    cache = None
    try:
        if _private(top, 0o022):
            cache = posix.open(b"pycache", _DIR, dir_fd=top)
            if not _private(cache, 0o077):
                posix.close(cache)
                cache = None
    except OSError:
        pass
    posix.close(top)
    return cache


def _request() -> bytes:
    """What the server needs to be this process: who, which interpreter and plugin, the
    umask, the working directory and the environment (NUL-separated)."""
    mask = posix.umask(0o022)
    posix.umask(mask)
    env = [k + b"=" + v for k, v in posix.environ.items()]
    head = [b"LW1", b"%d" % posix.getpid(), b"%d" % mask, sys.executable.encode(), HOOKS.encode()]
    body = b"\0".join([*head, posix.getcwdb(), *env])
    return len(body).to_bytes(4, "little") + body


def _address(cache: int):
    """Where the server for this process's context would listen: its socket, named for
    this context (a sandbox has its own server), in the cache open as ``cache``; None when
    /proc cannot tell the context. events/context.py says how, its bytecode read from the
    cache as an import would (it imports nothing but built-in modules)."""
    import _frozen_importlib_external as files  # importlib's own, loaded before any line runs

    sys.pycache_prefix = f"/proc/self/fd/{cache}"  # the cache checked: no swapping it
    path = HOOKS.rpartition("/")[0] + "/lib/loopwright/events/context.py"
    context = {"__name__": "loopwright.events.context", "__file__": path}
    try:
        exec(files.SourceFileLoader(context["__name__"], path).get_code(context["__name__"]), context)
        mine = context["own"]()
        return None if mine is None else b"/proc/self/fd/%d/%s" % (cache, context["socket_name"](mine))
    except Exception:  # whatever goes wrong, no server is asked
        return None
    finally:
        sys.pycache_prefix = None  # the descriptor is closed after the connect


def _connect(sock, cache: int):
    """Connect to this context's server and make sure it is this user's; "absent" when there
    is none such, None when none is to be asked."""
    import _socket

    try:
        address = _address(cache)
        if address is None:
            return None
        sock.connect(address)
        cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    except OSError:
        return "absent"
    finally:
        posix.close(cache)
    if int.from_bytes(cred[4:8], sys.byteorder) != posix.geteuid():
        return "absent"  # another user's socket: it is told nothing
    return "connected"


def ask_server():
    """The exit code the server answered with; "absent" when none listens, "declined" when
    the one listening leaves this event to us, None when it is not to be asked."""
    cache = _cache()
    if cache is None:
        return None
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(2.0)
    connected = _connect(sock, cache)
    if connected != "connected":
        return connected
    try:
        sock.sendall(_request())
        if sock.recv(1) != b"A":  # a fork of the server took it, and us as of its own context
            return "declined"
        # Go, with the standard streams: only once the fork is ready for them, so a launcher
        # that gives up on a stalled server (the timeout above) leaves nothing of itself held
        # in its queue. From here the event is the server's: never answered twice.
        fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
        sock.sendmsg([b"G"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
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
