"""The resident Stop server: an owner's Stop answered without starting the package again.

An owning session's Stop used to cost an interpreter start, the imports of the ~45 modules
of its path and the tick itself; the imports were a third of it. After the first Stop of an
active loop answered in the hook's own process, that process starts this server for its
plugin data directory and its execution context (hooks/stop_local.py's start_server). Later
Stops' launchers (hooks/stop.py) in the same context connect to its socket,
``<data>/pycache/stop-<hash of the context>.sock`` (events/handover.py), and send their
process id, umask, working directory and environment; once the fork that took the connection
has found them of its own context and taken that, their standard input, output and error go
with their "go". That child, forked ahead of time with every module of the Stop's path
imported, becomes that Stop (those descriptors, that environment and directory) and runs the
same ``events.entry.stop`` the hook would; each Stop gets a fresh fork, so nothing of one
Stop is left for the next. A continuing tick lets its launcher go once it is committed
(events/stop.py's RELEASE) and writes its effects after.

Safety:
- The socket is made in the bytecode cache, a directory only this user can enter (the
  launcher opens it without following links and checks what it opened, as state/bytecode.py
  does before it reads code, then connects through it and asks the kernel who listens).
- A fork serves only a peer of this user whose /proc shows this server's own context
  (namespaces, cgroup, limits, nice level, no_new_privs, capabilities, seccomp...): a Stop
  runs with the server's, so a sandboxed session's Stop must never run here. Without /proc
  (no context to compare) no server starts. A refused request is never read.
- The event is the server's only once the child said it took it and the launcher said go:
  whatever fails before that (no server, a server for another copy of the plugin or another
  interpreter, a deleted working directory) leaves the event to the launcher, which answers
  it itself. So no Stop is answered twice.
- The waiting child looks at the sources of the imported modules every second: one edited
  or removed makes the server leave (a Stop that comes first is answered by the code the
  server started with). A Stop of another copy of the plugin or another interpreter is
  declined and the server leaves too, so that the copy in use starts its own.
- It costs nothing once no loop needs it: it exits after ``LOOPWRIGHT_RESIDENT_IDLE``
  seconds (600) with no Stop, when its socket is removed or replaced, when its own context
  changes (reniced, say), or when its parent process is gone; ``LOOPWRIGHT_RESIDENT=0``
  keeps it from being started or asked.
"""

from __future__ import annotations

import _signal as signal  # not signal.py: it imports enum, a tenth of a Python start
import _socket
import fcntl
import os
import sys
import time

from loopwright.events import handover

LOCK = "stop.lock"
IDLE_ENV, DEFAULT_IDLE = "LOOPWRIGHT_RESIDENT_IDLE", 600.0
SLICE = 1.0  # how often a waiting child looks at the clock, its socket and its parent
MAX_REQUEST = 1 << 20
BUSY_MS = 50  # how long the next child waits for the current one to finish its Stop
# Imported before the first fork, so no Stop imports them: the Stop's path, and what a task
# registry's Stop adds (its SQLite index).
_WARM = (
    "loopwright.events.stop",
    "loopwright.core.termsafe",
    "loopwright.state.taskindex",
    "_sqlite3",
    "zlib",
)


def serve(cache: str | None, hooks: str) -> int:
    """Serve Stops for the plugin whose launchers are in ``hooks``, in this process's
    execution context, until idle; 0 when another server holds the cache for this context."""
    mine = handover.own()
    if cache is None or mine is None:
        return 0  # no context to tell apart: launchers answer in their own processes
    name = handover.socket_name(mine)
    held = _hold(os.path.join(cache, LOCK), int(name[5:21], 16) >> 1)  # its hash: an offset < 2**63
    if held is None:
        return 0
    for module in _WARM:
        __import__(module)
    from loopwright import modes

    for mode in modes.names():  # every mode: one server answers all of a user's loops
        modes.get(mode)
    server = Server(cache, os.fsdecode(name), hooks, held, mine)
    server.run()
    return 0


def _hold(path: str, slot: int) -> int | None:
    """The lock that makes one server per cache and context, held: one byte of one file per
    context (no file left behind for each context ever seen); None when another has it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
    except OSError:
        os.close(fd)
        return None
    return fd


def _idle_seconds() -> float:
    try:
        idle = float(os.environ.get(IDLE_ENV, DEFAULT_IDLE))
    except ValueError:
        return DEFAULT_IDLE
    return idle if idle > 0 else DEFAULT_IDLE


class Server:
    """The listening socket and the fork that waits on it."""

    def __init__(self, cache: str, name: str, hooks: str, held: int, mine: bytes) -> None:
        self.path, self.held, self.context = os.path.join(cache, name), held, mine
        self.hooks_given, self.hooks = os.fsencode(hooks), os.path.realpath(hooks)
        self.idle = _idle_seconds()
        self.sources = _sources()
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            os.unlink(self.path)  # a dead server's: the lock says none is alive
        except FileNotFoundError:
            pass
        os.chdir(cache)  # bound by its name here: a full path may not fit in a socket address
        old = os.umask(0o177)
        try:
            self.sock.bind(name)
        finally:
            os.umask(old)
        self.sock.listen(64)
        self.ident = _ident(self.path)
        self.parent = os.getpid()

    def run(self) -> None:
        """Keep one child waiting for a Stop; fork the next once it has one."""
        import gc
        import select

        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
        gc.freeze()  # the imported modules stay where they are: a fork copies fewer pages
        last = time.monotonic()
        try:
            while True:
                read, write = os.pipe()
                if os.fork() == 0:
                    os.close(read)
                    self._child(write, last)
                os.close(write)
                said = os.read(read, 1)
                if said == b"A":
                    # Fork the next child once this one is done (its end of the pipe closes),
                    # or after BUSY_MS when it takes long: not beside a Stop on a busy CPU.
                    waiting = select.poll()
                    waiting.register(read, select.POLLIN)
                    waiting.poll(BUSY_MS)
                os.close(read)
                if said != b"A":
                    return  # idle, replaced or stale: the child said so (or died)
                last = time.monotonic()
        finally:
            if _ident(self.path) == self.ident:
                _unlink(self.path)

    def _child(self, tell: int, last: float) -> None:
        os.close(self.held)
        code = 0
        try:
            self._wait(tell, last)
        except BaseException:
            code = 1
        os._exit(code)  # closes ``tell``: the server forks the next child

    def _wait(self, tell: int, last: float) -> None:
        self.sock.settimeout(SLICE)
        touched = False
        while True:
            if not self._worth_waiting(last):
                os.write(tell, b"Q")
                return
            if not touched:
                _touch()
                touched = True
            try:
                fd, _ = self.sock._accept()
                break
            except TimeoutError:
                continue
        os.write(tell, b"A")
        self.sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a Stop's own subprocesses are waited for
        _answer(fd, self)

    def _worth_waiting(self, last: float) -> bool:
        return (
            time.monotonic() - last < self.idle
            and os.getppid() == self.parent
            and _ident(self.path) == self.ident
            and not self.stale()
            and handover.own() == self.context  # e.g. reniced: its Stops would not be the launchers'
        )

    def stale(self) -> bool:
        """Whether a module this server imported was edited since (then it must not answer)."""
        return _sources() != self.sources

    def retire(self) -> None:
        """Stop the server for good (from a child that declined a Stop of another copy of the
        plugin or another interpreter: the next Stop of that copy starts its own server)."""
        if _ident(self.path) == self.ident:
            _unlink(self.path)
        try:
            os.kill(self.parent, signal.SIGTERM)
        except OSError:
            pass


def _touch() -> None:
    """Copy this fork's pages of Python objects now, while no Stop waits: a fork shares its
    parent's memory until written, and a Stop writes (reference counts) to pages all over it,
    a fault and a copy each (about a fifth of its time, measured). Listing every object the
    collector knows takes a reference to each."""
    import gc

    gc.unfreeze()
    everything = gc.get_objects()
    del everything
    gc.freeze()


def _sources() -> dict:
    """Each imported module of the package: its source's size and modification time."""
    seen = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.startswith("loopwright") else None
        if path:
            try:
                st = os.stat(path)
                seen[path] = (st.st_mtime_ns, st.st_size)
            except OSError:
                seen[path] = None
    return seen


def _ident(path: str):
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# --- one Stop, in the child that took it ----------------------------------------------


def _answer(fd: int, server: Server) -> None:
    """Take the launcher's event and answer it, or decline it untouched."""
    conn = _socket.socket(fileno=fd)
    conn.setblocking(True)
    conn.settimeout(2.0)  # a launcher that says nothing more is left to itself
    if not handover.same_context(conn, server.context):  # another user, or another sandbox
        conn.sendall(b"N")  # refused unread: the launcher answers in its own process
        return
    fields = _receive(conn)
    if fields is None:
        return
    if not _mine(fields, server):
        conn.sendall(b"N")
        server.retire()  # another copy of the plugin or another Python: its own server takes over
        return
    _become(fields)
    conn.sendall(b"A")
    # The launcher's standard streams come with its "go" only: a launcher that gave up on a
    # stalled server before it (2 s) has left nothing of itself held in a queued connection.
    data, ancillary, flags, _ = conn.recvmsg(1, _socket.CMSG_SPACE(3 * 4))
    fds = [
        int.from_bytes(payload[i : i + 4], sys.byteorder)
        for level, kind, payload in ancillary
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS
        for i in range(0, len(payload) - len(payload) % 4, 4)
    ]
    whole = data == b"G" and len(fds) == 3 and not flags & _socket.MSG_CTRUNC
    for target, stream in enumerate(fds if whole else ()):
        os.dup2(stream, target)
    for stream in fds:
        os.close(stream)
    if whole:  # else the launcher, which said go, reports that no answer came
        _run(int(fields[1]), conn)


def _receive(conn):
    """The request's fields, or None for anything else."""
    try:
        data = conn.recv(1 << 16)
    except OSError:
        return None
    body = _rest(conn, data)
    fields = body.split(b"\0") if body is not None else []
    if len(fields) < 6 or fields[0] != b"LW1" or not (fields[1].isdigit() and fields[2].isdigit()):
        return None
    return fields


def _rest(conn, data: bytes) -> bytes | None:
    """The request's body, whose length the first four bytes give."""
    if len(data) < 4:
        return None
    size = int.from_bytes(data[:4], "little")
    if size > MAX_REQUEST:
        return None
    parts, have = [data[4:]], len(data) - 4
    try:
        while have < size:
            more = conn.recv(min(size - have, 1 << 16))
            if not more:
                return None
            parts.append(more)
            have += len(more)
    except OSError:
        return None
    body = b"".join(parts)
    return body if len(body) == size else None


def _mine(fields: list, server: Server) -> bool:
    """Whether the launcher runs this interpreter and this copy of the plugin."""
    if fields[3] != os.fsencode(sys.executable):
        return False
    if fields[4] == server.hooks_given:
        return True
    try:
        return os.path.realpath(os.fsdecode(fields[4])) == server.hooks
    except (OSError, ValueError):
        return False


def _become(fields: list) -> None:
    """This process takes the launcher's place: its umask, working directory and environment
    (raises OSError before anything is changed for a gone directory)."""
    os.chdir(fields[5])
    os.umask(int(fields[2]) & 0o777)
    wanted = dict(item.partition(b"=")[::2] for item in fields[6:] if b"=" in item)
    env = os.environb
    for key in [k for k in env if k not in wanted]:
        del env[key]
    for key, value in wanted.items():
        if env.get(key) != value:
            env[key] = value


def _run(pid: int, conn) -> None:
    """The Stop, as hooks/stop_local.py runs it; its exit code goes to the launcher, as soon
    as the answer is out (events/stop.py's RELEASE) or when the Stop is done."""
    from loopwright.events import stop as hook
    from loopwright.events.entry import stop
    from loopwright.state import lock

    lock.HOOK_PID = pid  # the lock names the Claude Code process above the launcher, not us
    released = []

    def release(code: int = 0) -> None:
        if released:
            return
        released.append(code)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):  # Claude Code reads the answer to its end: let go of the pipes
            os.dup2(null, target)
        os.close(null)
        try:
            conn.sendall(b"R" + bytes([code & 0xFF]))
        except OSError:
            pass  # the launcher is gone (killed): the tick is committed and goes on all the same

    hook.RELEASE = release
    try:
        code = stop()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    release(code)
