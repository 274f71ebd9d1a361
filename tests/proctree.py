"""A process and everything under it, as the fleet's tests and demo stop or kill a worker (a
machine that stops or dies): its runner, the Claude Code client (in a session of its own) and
whatever they started. Linux only (/proc)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``, children before theirs."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        kids.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def signal_each(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def freeze(pid: int) -> list[int]:
    """SIGSTOP ``pid``, then whatever is under it, until nothing new appears (a machine that
    stopped); the processes under it."""
    os.kill(pid, signal.SIGSTOP)
    stopped: list[int] = []
    while fresh := [p for p in descendants(pid) if p not in stopped]:
        signal_each(fresh, signal.SIGSTOP)
        stopped += fresh
    return stopped


def kill_all(pids) -> None:
    """SIGKILL ``pids`` and their process groups (a client runs in a session of its own)."""
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    signal_each(pids, signal.SIGKILL)
    for group in groups - {os.getpgrp()}:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_tree(pid: int) -> None:
    """A machine that died: ``pid`` and everything under it, frozen first so that nothing of it
    gets to say goodbye, then killed with their process groups."""
    kill_all([pid, *freeze(pid)])


# A prefix for a command a test interrupts with SIGINT: Ctrl-C's default meaning restored. A
# suite started in the background of a non-interactive shell has SIGINT ignored, every process
# it starts inherits that, and Python installs no KeyboardInterrupt for an ignored SIGINT.
SIGINT_DEFAULT = ("env", "--default-signal=INT")


def homed_under(root) -> list[int]:
    """This user's processes whose HOME is ``root`` or below (what a demo or a test started with
    a HOME of its own and may have left: a client in a session of its own, a resident server)."""
    mark, found = f"HOME={root}".encode(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # another user's, or gone
        if any(v == mark or v.startswith(mark + b"/") for v in env):
            found.append(int(entry.name))
    return found
