"""The Stop hook answered in this process: hand the event to loopwright's router (see
lib/loopwright/events/entry.py). hooks/stop.py runs this when no resident Stop server took
the event (SERVER says why), and starts one afterwards for the next Stops; run with
``--serve``, this is that server (lib/loopwright/events/resident.py)."""

import gc

gc.disable()  # a process of a few milliseconds: collecting would only walk the modules it loads

import atexit  # noqa: E402
import marshal  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
import sys  # noqa: E402

EXIT = [1]  # what a Stop that raised exits with; the answer's code once there is one


def _leave() -> None:
    """Exit without the interpreter's teardown (~2.5 ms of freeing what the process loses
    anyway), after every other exit handler: the answer is flushed first, and state files
    are written with os.write, never through a buffer."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(EXIT[0])


# A copy of lib/loopwright/state/bytecode.py's (tests/events/test_bytecode.py keeps them equal):
# the cache is chosen before anything of the package is read, so a Stop never compiles it.
def cache_dir(environ=os.environ):
    """The bytecode cache of the plugin data directory named by the environment
    (CLAUDE_PLUGIN_DATA in hooks, LOOPWRIGHT_DATA in the agent's shell), made when
    missing; None when there is none this process may trust."""
    data = environ.get("CLAUDE_PLUGIN_DATA") or environ.get("LOOPWRIGHT_DATA")
    if not data or not os.path.isabs(data) or "\0" in data:
        return None
    data = os.path.normpath(data)
    project = environ.get("CLAUDE_PROJECT_DIR")
    if project and (data + os.sep).startswith(os.path.normpath(project) + os.sep):
        return None  # a project's files are data, never code
    me = os.geteuid()
    try:
        top = os.stat(data)
        if not stat.S_ISDIR(top.st_mode) or top.st_uid != me or top.st_mode & 0o022:
            return None
        path = os.path.join(data, "pycache")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path, 0o700)  # the first process of a data directory the bootstrap never filled
            st = os.lstat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != me or st.st_mode & 0o077:
        return None
    return path


def boot(cache, lib) -> None:
    """Hand the package's imports to the cache's code archive (lib/loopwright/state/
    codearchive.py, whose own code comes first in it), when it is one to trust."""
    try:
        fd = os.open(os.path.join(cache, "loopwright.code"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, TypeError):
        return
    try:
        st, head = os.fstat(fd), os.pread(fd, 12, 0)
        mine = stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022
        if not mine or head[:4] != sys.modules["_frozen_importlib_external"].MAGIC_NUMBER:
            raise ValueError("not an archive of this user's for this interpreter")
        size = int.from_bytes(head[4:], "little")
        archive = type(sys)("loopwright.state.codearchive")
        exec(marshal.loads(os.pread(fd, size, 12)), archive.__dict__)
    except (OSError, ValueError, EOFError, TypeError):
        os.close(fd)
        return
    archive.serve(fd, 12 + size, lib, preload=True)  # one thread here: no import locks needed


def start_server(local: str) -> None:
    """Start the resident Stop server (lib/loopwright/events/resident.py) for this cache,
    detached from this hook: its own session, its standard streams on /dev/null, so Claude
    Code never waits for it. Quietly nothing when it cannot: the next Stop is answered here."""
    if sys.pycache_prefix is None or os.environ.get("LOOPWRIGHT_RESIDENT") == "0":
        return
    argv = [sys.executable, "-I", "-S", local, "--serve"]
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, null, fd) for fd in (0, 1, 2)]
        os.posix_spawn(sys.executable, argv, os.environ, file_actions=actions, setsid=True)
    except (OSError, NotImplementedError, AttributeError, TypeError):
        pass
    finally:
        os.close(null)


# --- the launch (tests/events/test_codearchive.py runs what is above, then its own) ---
SERVING = sys.argv[1:] == ["--serve"]
HOOKS = os.path.dirname(os.path.abspath(__file__))
if SERVING:
    os.closerange(3, 1 << 16)  # nothing the starting hook held open stays open for good
else:
    atexit.register(_leave)
sys.pycache_prefix = cache_dir()  # None: bytecode beside the sources, as Python does by default
LIB = os.path.join(os.path.dirname(HOOKS), "lib")
boot(sys.pycache_prefix, LIB)  # a module the archive does not hold is found on the path
sys.path.insert(0, LIB)
from loopwright.events.entry import stop  # noqa: E402

if SERVING:
    from loopwright.events import resident

    sys.exit(resident.serve(sys.pycache_prefix, HOOKS))
EXIT[0] = stop()
ticked = getattr(sys.modules.get("loopwright.events.stop"), "OWNER_SEEN", False)
if ticked and sys.pycache_prefix is not None:  # the next launchers run its bytecode from the cache
    from loopwright.events import handover  # noqa: F401
if ticked and globals().get("SERVER") in ("absent", "declined"):  # the next Stops, answered warm
    start_server(os.path.join(HOOKS, "stop_local.py"))
sys.exit(EXIT[0])
