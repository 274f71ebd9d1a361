"""The loop lock: which Claude Code process runs a loop, and whether it still does.

The lock names the Claude Code process (the hook's or command's ancestor) with
its create time, so a reused PID is never mistaken for the old owner. A lock is
stale when that process is gone on this host; when the process cannot be checked
(another host, no pid) it is stale once its heartbeat is older than
``stale_after``. Anything ambiguous counts as alive. psutil is imported only
here, and only when a process really has to be looked at.
"""

from __future__ import annotations

import os

from loopwright.core.clock import now_iso, parse_iso  # noqa: F401  (the lock's timestamps; callers use them here)

STALE_AFTER_SECONDS = 300.0
# The hook process whose ancestors hold the Claude Code process: this one, unless the
# resident Stop server (events/resident.py) answers for a launcher, which names itself here.
HOOK_PID: int | None = None

ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"


def owner_tag(session_id: str | None) -> str:
    return f"session:{session_id or 'unknown'}"


def hostname() -> str:
    import socket  # needed only when a lock is written or compared

    return socket.gethostname()


def _psutil():
    """psutil, imported only when a lock's process must be looked at. The Stop hook runs
    Python without ``site`` (python -S: ~1.5 ms less per Stop, and its common path needs
    only the standard library); the first time a package is wanted, site's paths (the
    plugin's virtual environment) are added."""
    try:
        import psutil
    except ImportError:
        import sys

        if not sys.flags.no_site:
            raise
        import site

        site.main()
        import psutil
    return psutil


def process_state(pid: object, create_time: object) -> str:
    """ALIVE, GONE or UNKNOWN for a pid on this host (PID reuse counts as GONE)."""
    if not isinstance(pid, int) or pid <= 0:
        return UNKNOWN
    psutil = _psutil()
    try:
        proc = psutil.Process(pid)
        started = proc.create_time()
    except psutil.NoSuchProcess:
        return GONE
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return ALIVE  # ambiguous means alive
    except Exception:
        return ALIVE
    if isinstance(create_time, (int, float)) and abs(started - create_time) > 1.0:
        return GONE  # the pid now belongs to another process
    return ALIVE


def is_stale(
    lock: dict | None,
    now: float,
    *,
    host: str | None = None,
    stale_after: float = STALE_AFTER_SECONDS,
    probe=process_state,  # (pid, create_time) -> ALIVE, GONE or UNKNOWN
) -> bool:
    if not lock:
        return True
    same_host = lock.get("host") == (host or hostname())
    if same_host:
        state = probe(lock.get("pid"), lock.get("pid_create_time"))
        if state == GONE:
            return True
        if state == ALIVE:
            return False
    beat = parse_iso(lock.get("heartbeat_at"))
    if beat is None:
        return False  # cannot tell: ambiguous means alive
    if beat - now > stale_after:
        return True  # a heartbeat from the future (a wrong clock, a forged file) proves nothing
    return now - beat > stale_after


def claude_process() -> tuple[int | None, float | None]:
    """The Claude Code process above us: the nearest ancestor that looks like
    the CLI, else the grandparent (hooks and commands run under a shell)."""
    try:
        psutil = _psutil()
    except ImportError:
        return None, None
    override = os.environ.get("LOOPWRIGHT_OWNER_PID")  # tests and headless runners name it
    if override and override.isdigit():
        try:
            proc = psutil.Process(int(override))
            return proc.pid, proc.create_time()
        except Exception:
            return int(override), None
    try:
        me = psutil.Process(HOOK_PID or os.getpid())
        chain = me.parents()
    except Exception:
        return None, None
    for proc in chain:
        try:
            name = (proc.name() or "").lower()
            cmd = " ".join(proc.cmdline()[:2]).lower()
        except Exception:
            continue
        if "claude" in name or "claude" in cmd:
            try:
                return proc.pid, proc.create_time()
            except Exception:
                return proc.pid, None
    if len(chain) >= 2:
        proc = chain[1]
        try:
            return proc.pid, proc.create_time()
        except Exception:
            return proc.pid, None
    return None, None


def new_lock(session_id: str | None, iteration: int, now: float) -> dict:
    """A lock held by ``session_id`` through the Claude Code process above us."""
    pid, create_time = claude_process()
    stamp = now_iso(now)
    return {
        "owner": owner_tag(session_id),
        "pid": pid,
        "pid_create_time": create_time,
        "host": hostname(),
        "acquired_at": stamp,
        "heartbeat_at": stamp,
        "iteration": iteration,
    }


def describe(lock: dict) -> str:
    where = f"pid {lock.get('pid')} on {lock.get('host')}, heartbeat {lock.get('heartbeat_at')}"
    return f"{lock.get('owner')} ({where})"
