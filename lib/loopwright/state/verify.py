"""Verified completion and backprop: running the project's own check, and the
directive that carries a failure into the next prompt.

The check is the command the user gave with ``--verify`` when starting the loop;
it runs through the shell in the project directory with a time limit, its output
captured and capped. A failing check (or a failing test run the PostToolUse hook
noticed) leaves ``backprop-pending.json``; the next prompt starts with the
directive and the file is consumed, leaving a trace in ``backprop-log.md``.
"""

from __future__ import annotations

import os
import time

from loopwright.core.checks import directive, passed  # noqa: F401  (callers find them here too)
from loopwright.state.fspath import Path

DEFAULT_TIMEOUT = 300.0
MAX_TIMEOUT = 840.0  # the Stop hook's own limit in hooks.json is 900 s
OUTPUT_CAP = 1024 * 1024  # bytes kept from the command's output
TAIL_CHARS = 4000  # characters of output shown in the directive


def run(command: str, cwd: Path, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Run the check. Never raises: a command that cannot start is a failure too.

    The output is read as it streams and only its last OUTPUT_CAP bytes are kept, so a
    check that prints gigabytes costs a megabyte of memory. The time limit holds even
    when the command keeps printing, closes its output and keeps running, or exits while
    a child it left keeps the pipe open.
    """
    import subprocess  # only when a check really runs: not on every Stop

    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            command,
            shell=True,
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the command
        return {
            "command": command,
            "exit_code": 127,
            "timed_out": False,
            "seconds": 0.0,
            "output_tail": f"could not start: {exc}",
        }
    deadline = started + timeout
    kept = bytearray()
    try:
        timed_out = _drain(proc, kept, deadline)
        # EOF can come before the exit (the command closed its output): same deadline.
        timed_out = timed_out or not _wait(proc, deadline)
        if timed_out:
            _kill_group(proc.pid)
            # Whatever was written before the kill is still in the pipe; the group is dead,
            # so EOF comes soon, but a writer that escaped the group gets only a moment.
            _drain(proc, kept, time.monotonic() + 2.0, exit_grace=2.0)
            _wait(proc, time.monotonic() + 10.0)
    finally:
        proc.stdout.close()
        _kill_group(proc.pid)  # a grandchild still holding the pipe must not outlive the check
    text = bytes(kept[-OUTPUT_CAP:]).decode("utf-8", errors="replace")
    return {
        "command": command,
        "exit_code": proc.returncode if not timed_out else None,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - started, 2),
        "output_tail": text[-TAIL_CHARS:],
    }


def _wait(proc, deadline: float) -> bool:
    """Wait for the command's exit until the deadline; True when it exited."""
    import subprocess

    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        return True
    except subprocess.TimeoutExpired:
        return False


def _drain(proc, kept: bytearray, deadline: float, exit_grace: float = 1.0) -> bool:
    """Read the command's output into ``kept`` until EOF, the command's exit plus
    ``exit_grace`` (a grandchild may hold the pipe open forever), or the deadline.
    Only the tail is kept: memory stays under 2 × OUTPUT_CAP plus one chunk.
    Returns True when the deadline came while the command itself was still running."""
    import selectors

    fd = proc.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    exited_at = None
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if now >= deadline:
                return exited_at is None  # a command that did exit is not a timeout
            if exited_at is not None and now - exited_at > exit_grace:
                return False  # the shell is gone; whoever still holds the pipe is not waited for
            if not sel.select(min(0.2, deadline - now)):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return False
            kept += chunk
            if len(kept) > 2 * OUTPUT_CAP:
                del kept[:-OUTPUT_CAP]  # trimming in batches keeps the copying linear
    finally:
        sel.close()


def _kill_group(pid: int) -> None:
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)  # the whole process group: test runners fork
    except (ProcessLookupError, PermissionError):
        pass


def log_entry(pending: dict, iteration: int, at: str) -> str:
    status = "timed out" if pending.get("timed_out") else f"exit {pending.get('exit_code')}"
    tail = (pending.get("output_tail") or "").rstrip()
    short = "\n".join(tail.splitlines()[-15:])
    return (
        f"## {at} · iteration {iteration} · {pending.get('source', 'verify')}\n\n"
        f"`{pending.get('command')}` ({status})\n\n```\n{short}\n```\n\n"
    )
