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
from pathlib import Path

DEFAULT_TIMEOUT = 300.0
MAX_TIMEOUT = 840.0  # the Stop hook's own limit in hooks.json is 900 s
OUTPUT_CAP = 1024 * 1024  # bytes kept from the command's output
TAIL_CHARS = 4000  # characters of output shown in the directive


def run(command: str, cwd: Path, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Run the check. Never raises: a command that cannot start is a failure too."""
    import signal
    import subprocess  # only when a check really runs: not on every Stop

    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            command, shell=True, cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    except OSError as exc:
        return {"command": command, "exit_code": 127, "timed_out": False, "seconds": 0.0, "output_tail": f"could not start: {exc}"}
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole process group: test runners fork
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
    text = out[-OUTPUT_CAP:].decode("utf-8", errors="replace")
    return {
        "command": command,
        "exit_code": proc.returncode if not timed_out else None,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - started, 2),
        "output_tail": text[-TAIL_CHARS:],
    }


def passed(result: dict) -> bool:
    return not result.get("timed_out") and result.get("exit_code") == 0


def directive(pending: dict) -> str:
    """The text that opens the next prompt while a failure is pending."""
    source = pending.get("source") or "verify"
    what = {"verify": "The completion check failed, so the loop did not end.",
            "post-tool": "A test run failed during the last iteration."}.get(source, "A check failed.")
    status = "timed out" if pending.get("timed_out") else f"exit {pending.get('exit_code')}"
    lines = [
        f"BACKPROP: {what} Fix this before anything else.",
        f"Command: {pending.get('command')} ({status}" + (f", {pending['seconds']} s" if pending.get("seconds") is not None else "") + ")",
        "Output (tail):",
        "```",
        (pending.get("output_tail") or "").rstrip() or "(no output)",
        "```",
        "Find the root cause, fix it, and run the command again yourself before claiming completion.",
    ]
    return "\n".join(lines)


def log_entry(pending: dict, iteration: int, at: str) -> str:
    status = "timed out" if pending.get("timed_out") else f"exit {pending.get('exit_code')}"
    tail = (pending.get("output_tail") or "").rstrip()
    short = "\n".join(tail.splitlines()[-15:])
    return (f"## {at} · iteration {iteration} · {pending.get('source', 'verify')}\n\n"
            f"`{pending.get('command')}` ({status})\n\n```\n{short}\n```\n\n")
