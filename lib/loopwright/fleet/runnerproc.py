"""Ending a fleet loop's runner with everything it started."""

from __future__ import annotations

import os
import signal
import subprocess


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the runner and every process under it, then reap it. The runner starts its
    client in a session of its own, so the runner's group is not enough: every process under
    the runner is found first, then each one's group and itself are killed (a client left alive
    would go on spending)."""
    if proc.poll() is not None:
        return
    import psutil

    try:
        below = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        below = []
    for pid in [proc.pid, *(p.pid for p in below)]:
        for kill in (
            lambda p=pid: os.killpg(os.getpgid(p), signal.SIGKILL),
            lambda p=pid: os.kill(p, signal.SIGKILL),
        ):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
    proc.wait()
