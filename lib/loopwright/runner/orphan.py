"""A runner a fleet worker started ends with its worker, and takes its client along.

A worker killed outright (SIGKILL, the OOM killer) cannot stop its runners; each would go on
driving its Claude Code client in the worker's clone, unsupervised, while the loop fails over
to another worker: two agents on one loop, the orphan's spend counted nowhere. So a runner
started by a worker (``LOOPWRIGHT_RUNNER_PARENT`` names the worker's process) asks the kernel
for SIGHUP when its parent dies (Linux's PR_SET_PDEATHSIG), and looks at its parent at each
poll besides (anywhere else); either way it raises :class:`Orphaned`, and the runner stops its
client and leaves. A runner started by a person has no such variable and is not affected."""

from __future__ import annotations

import ctypes
import os
import signal

ENV = "LOOPWRIGHT_RUNNER_PARENT"
PR_SET_PDEATHSIG = 1
EXIT_CODE = 70  # EX_SOFTWARE: nobody reads it, the worker that would is gone


class Orphaned(BaseException):
    """The worker that started this runner is gone (not an Exception: nothing may swallow it)."""


_parent: list[int] = []


def watch() -> None:
    """From the runner's start: when a worker started it, be told of the worker's death. The
    variable is taken out of the environment, so the client and what it runs do not inherit it."""
    pid = os.environ.pop(ENV, "")
    if not pid.isdigit():
        return
    _parent[:] = [int(pid)]
    signal.signal(signal.SIGHUP, _gone)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl here: the polls find out
        pass
    check()  # it may have died before the request was made


def check() -> None:
    """Orphaned when a worker started this runner and is no longer its parent."""
    if _parent and os.getppid() != _parent[0]:
        raise Orphaned


def _gone(signum, frame) -> None:
    # Once: another SIGHUP may follow (its group's other members going), and one raised while
    # the runner stops its client would cut that short.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    raise Orphaned
