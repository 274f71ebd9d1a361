"""Steering fleet loops from the command line: a gate's answer (checked against the gate's
options as the API checks it, recorded with who gave it) and stop or cancel, of one loop or of
every loop a filter picks."""

from __future__ import annotations

import getpass
import socket

from loopwright.cli.base import echo, fail, registry
from loopwright.core import gates


def who() -> str:
    """The person at this terminal as the timeline records them: the OS user at this host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container without a passwd entry)
        import os

        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def answer_gate(url: str | None, loop: str, answer: str) -> None:
    from loopwright.core.termsafe import one_line

    reg = registry(url)
    try:
        row = reg.fleet_loop(loop) if 0 < len(loop) <= 200 else None
        if row is None:
            fail(f"no fleet loop {one_line(loop)[:80]!r}: `loopwright fleet ls` lists them")
        gate = row.get("gate") if isinstance(row.get("gate"), dict) else {}
        if row["status"] != "waiting_gate" or gate.get("answer"):
            fail(f"no gate waits in fleet loop {row['name']} (it is {row['status']})")
        problem = gates.fleet_answer_problem(gate, answer)
        if problem:
            fail(problem)
        done = reg.answer_gate(row["id"], answer, who())
    finally:
        reg.close()
    if done is None:
        fail(f"the gate of fleet loop {row['name']} no longer waits (answered or stopped meanwhile)")
    echo(f"{done['name']}: answered {answer!r} at gate {gate.get('name')}; queued again for a worker")
