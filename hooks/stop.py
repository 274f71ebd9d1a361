"""Stop hook: ask the resident Stop server, else answer here (hooks/stop_local.py).

The server (lib/loopwright/events/resident.py) has the package imported already, so an
owner's Stop it answers costs an interpreter start and one round trip. It is asked only
through a socket in this user's private bytecode cache, the one named for this process's
execution context (a sandbox has a server of its own), and only when the server is this
user's (lib/loopwright/events/handover.py); whatever goes wrong before it has taken the event
(none running, one for another plugin copy, another context, edited code) leaves the event
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


def ask_server():
    """The exit code the resident server answered with; "absent" when none listens,
    "declined" when the one listening leaves this event to us, None when it is not to be
    asked. The exchange is events/handover.py's, whose bytecode is read from the cache just
    checked (pinned by its descriptor), as an import would, rather than compiled here."""
    cache = _cache()
    if cache is None:
        return None
    import _frozen_importlib_external as files  # importlib's own, loaded before any line runs

    sys.pycache_prefix = f"/proc/self/fd/{cache}"
    path = HOOKS.rpartition("/")[0] + "/lib/loopwright/events/handover.py"
    handover = {"__name__": "loopwright.events.handover", "__file__": path}
    try:
        exec(files.SourceFileLoader(handover["__name__"], path).get_code(handover["__name__"]), handover)
    except Exception:  # whatever goes wrong, no server is asked
        posix.close(cache)
        return None
    finally:
        sys.pycache_prefix = None
    return handover["ask"](cache, HOOKS)


SERVER = ask_server()
if isinstance(SERVER, int):
    sys.stdout.flush()
    posix._exit(SERVER)
LOCAL = HOOKS + "/stop_local.py"
with open(LOCAL, "rb") as _fh:
    exec(compile(_fh.read(), LOCAL, "exec"), {"__name__": "__main__", "__file__": LOCAL, "SERVER": SERVER})
