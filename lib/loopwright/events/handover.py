"""Handing a Stop over to the resident Stop server: who may hand it over (this user, in the
server's own execution context) and the launcher's side of the exchange.

A Stop the resident server (events/resident.py) answers runs in a fork of that server, so it
has the server's credentials, namespaces, cgroup, resource limits, scheduling and seccomp
state, not its launcher's. A session inside bwrap, firejail, ``unshare`` or a container that
shares ``$HOME`` would have its Stop and its ``--verify`` run outside its sandbox. So a
server serves only launchers in the context it runs in itself:

- each context has a socket of its own, named for a hash of its fingerprint
  (``socket_name``): a launcher in another context finds no server there, answers in its own
  process and starts a server of its own context;
- the server compares what ``/proc/<peer>`` shows of each peer with its own fingerprint and
  refuses a mismatch (``same_context``); the hash only routes, this comparison decides.

The launcher (hooks/stop.py) checks the private cache, then runs this module's bytecode from
it as an import would, without the package around it, and calls :func:`ask`: its own source is
compiled at every Stop, this module's never. So this module uses nothing but built-in modules
(``posix``, not ``os``: importing ``os`` costs a tenth of an interpreter start), ``_socket``
and ``_signal`` where they are needed.

The exchange: the launcher connects through the cache it opened and checked (so a data
directory in a place others can write cannot be swapped under it), makes sure the server is
this user's, and sends its process id, umask, interpreter, plugin, working directory and
environment. The fork that took the connection checks the launcher's context, takes the
request and says "A" (or "N": declined, the launcher answers itself); only then does the
launcher say "G" (go), with its standard input, output and error, so a launcher that gives up
on a stalled server has left nothing of itself held in its queue. The fork answers "R" and the
exit code.
"""

# No ``from __future__ import annotations`` (nor annotations that need it): in the launcher that
# import is a module of its own to find, a quarter of a millisecond.
import errno
import posix
import sys

SO_PEERPIDFD = 77  # Linux 6.5; Python 3.11's _socket does not name it


def read_proc(proc, name):
    """The whole of file ``name`` in the /proc directory open as ``proc``."""
    fd = posix.open(name, posix.O_RDONLY | posix.O_CLOEXEC, dir_fd=proc)
    try:
        parts = [posix.read(fd, 1 << 16)]
        while parts[-1]:
            parts.append(posix.read(fd, 1 << 16))
    finally:
        posix.close(fd)
    return b"".join(parts)


def fingerprint(proc):
    """What makes the sandbox of the process whose /proc directory is open as ``proc``: its
    user and group ids, groups, capability sets, no_new_privs, seccomp mode and filter count,
    CPU and memory-node affinity (status); priority, nice level, real-time priority and
    scheduling policy (stat); every resource limit; its cgroups; every namespace; the identity
    of its root directory; its security module label. None when any of it cannot be read.
    Each can be read by any process of the same user whatever Yama's ptrace_scope (which keeps
    the personality to a process's ancestors: it is not read). Securebits are not shown in
    /proc; what they change at an exec shows in the capability sets. The umask, working
    directory and environment are handed over with each Stop instead, and the interpreter and
    plugin are compared by the server."""
    try:
        parts = [
            line
            for line in read_proc(proc, b"status").split(b"\n")
            if line.partition(b":")[0]
            in {
                b"Uid",
                b"Gid",
                b"Groups",
                b"CapInh",
                b"CapPrm",
                b"CapEff",
                b"CapBnd",
                b"CapAmb",
                b"NoNewPrivs",
                b"Seccomp",
                b"Seccomp_filters",
                b"Cpus_allowed_list",
                b"Mems_allowed_list",
            }
        ]
        stat = read_proc(proc, b"stat").rpartition(b")")[2].split()
        parts.append(b" ".join(stat[15:17] + stat[37:39]))  # priority, nice; rt priority, policy
        parts += [read_proc(proc, b"limits"), read_proc(proc, b"cgroup")]
        ns = posix.open(b"ns", posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC, dir_fd=proc)
        try:
            parts += [(n + "=" + posix.readlink(n, dir_fd=ns)).encode() for n in sorted(posix.listdir(ns))]
        finally:
            posix.close(ns)
        root = posix.stat(b"root", dir_fd=proc)
        parts.append(b"root=%d:%d" % (root.st_dev, root.st_ino))
    except (OSError, ValueError):
        return None
    if len(stat) < 39:
        return None
    try:
        parts.append(read_proc(proc, b"attr/current"))
    except OSError:
        parts.append(b"-")  # no security module labels processes
    return b"\n".join(parts)


def socket_name(mine):
    """The name of the socket of the server for the context fingerprinted ``mine``: a hash
    that only routes (a collision is refused by the server's comparison, never served)."""
    return b"stop-%016x.sock" % (int.from_bytes(mine, "little") % 0xFFFFFFFFFFFFFFC5)


def own():
    """This process's fingerprint; None when /proc is not of this process's pid namespace
    (then no peer's pid could be looked up in it either)."""
    try:
        if posix.readlink("/proc/self") != str(posix.getpid()):
            return None
        proc = posix.open("/proc/self", posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
    except OSError:
        return None
    try:
        return fingerprint(proc)
    finally:
        posix.close(proc)


def same_context(conn, mine):
    """Whether the process at the other end of ``conn`` is this user's and its /proc shows
    the context fingerprinted ``mine``. The peer's /proc directory is opened while the peer
    is known alive (its pidfd), so a pid reused meanwhile is never read as the peer."""
    import _socket

    try:
        cred = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    except OSError:
        return False
    pid, uid = (int.from_bytes(cred[i : i + 4], sys.byteorder) for i in (0, 4))
    if uid != posix.geteuid() or pid <= 0:
        return False
    try:
        pidfd = conn.getsockopt(_socket.SOL_SOCKET, getattr(_socket, "SO_PEERPIDFD", SO_PEERPIDFD))
    except OSError as exc:
        if exc.errno != errno.ENOPROTOOPT:
            return False  # the peer is gone: its pid may be another process's already
        pidfd = None  # a kernel before 6.5: the pid as the connection names it
    try:
        proc = posix.open(f"/proc/{pid}", posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
    except OSError:
        return False
    finally:
        alive = pidfd is None or _alive(pidfd)
    try:
        return alive and fingerprint(proc) == mine
    finally:
        posix.close(proc)


def _alive(pidfd):
    import _signal

    try:
        _signal.pidfd_send_signal(pidfd, 0)
        return True
    except OSError:
        return False
    finally:
        posix.close(pidfd)


# --- the launcher's side --------------------------------------------------------------------


def ask(cache, hooks):
    """Hand this Stop to the server of this context in the cache open as ``cache`` (closed
    here), for the plugin whose launchers are in ``hooks``: the exit code it answered with;
    "absent" when none such listens, "declined" when it leaves the event to this process,
    None when none is to be asked. Nothing before "go" raises or answers the event."""
    import _socket

    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(2.0)
        mine = own()
        if mine is None:
            return None
        sock.connect(b"/proc/self/fd/%d/%s" % (cache, socket_name(mine)))
        cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    except Exception:  # no such server, or it cannot be reached
        return "absent"
    finally:
        posix.close(cache)
    if int.from_bytes(cred[4:8], sys.byteorder) != posix.geteuid():
        return "absent"  # another user's socket: it is told nothing
    try:
        sock.sendall(_request(hooks))
        if sock.recv(1) != b"A":
            return "declined"
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


def _request(hooks):
    """What the server needs to be this process: who, which interpreter and plugin, the
    umask, the working directory and the environment (NUL-separated)."""
    mask = posix.umask(0o022)
    posix.umask(mask)
    env = [k + b"=" + v for k, v in posix.environ.items()]
    head = [b"LW1", b"%d" % posix.getpid(), b"%d" % mask, sys.executable.encode(), hooks.encode()]
    body = b"\0".join([*head, posix.getcwdb(), *env])
    return len(body).to_bytes(4, "little") + body
