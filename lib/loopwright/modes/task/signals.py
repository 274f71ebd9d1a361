"""``.auto-signal`` and ``.auto-stop``: the ai-cli-task progress report and stop
request, their whitelists, and the routing tables auto mode follows. Pure, but
for the two small write helpers at the end.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from loopwright.core.errors import UserError
from loopwright.state import store
from loopwright.state.lock import now_iso

STEPS = ("plan", "check", "exec", "merge", "report")
NEXT = STEPS + ("(stop)",)
RESULTS = (
    "PASS",
    "NEEDS_REVISION",
    "ACCEPT",
    "NEEDS_FIX",
    "REPLAN",
    "BLOCKED",
    "CONTINUE",
    "(generated)",
    "(annotations)",
    "(done)",
    "(mid-exec)",
    "(blocked)",
    "success",
    "conflict",
)
CHECKPOINTS = ("", "post-plan", "mid-exec", "post-exec")
STOP_REASONS = ("timeout", "max_iterations", "user_stop", "stall_limit")
_STEP_N = re.compile(r"^\(step-(\d+)\)$")


class SignalError(UserError, ValueError):
    """A signal that does not fit the whitelist; the message names the field."""


def valid_result(result: str) -> bool:
    return result in RESULTS or bool(_STEP_N.match(result))


def valid_timestamp(value: str) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value or " " in value


def validate(signal: dict) -> dict:
    """The signal, or SignalError naming the first bad field."""
    if not isinstance(signal, dict):
        raise SignalError("the signal must be a JSON object")
    step, result, nxt = signal.get("step"), signal.get("result"), signal.get("next")
    if step not in STEPS:
        raise SignalError(f"step {step!r} is not one of {', '.join(STEPS)}")
    if not isinstance(result, str) or not valid_result(result):
        raise SignalError(f"result {result!r} is not one of {', '.join(RESULTS)} or (step-N)")
    if nxt not in NEXT:
        raise SignalError(f"next {nxt!r} is not one of {', '.join(NEXT)}")
    checkpoint = signal.get("checkpoint", "")
    if checkpoint is None:
        checkpoint = ""
    if checkpoint not in CHECKPOINTS:
        raise SignalError(
            f"checkpoint {checkpoint!r} is not one of post-plan, mid-exec, post-exec (or empty)"
        )
    if "iteration" in signal:
        it = signal["iteration"]
        if not isinstance(it, int) or isinstance(it, bool) or it < 0:
            raise SignalError(f"iteration must be a whole number of 0 or more, got {it!r}")
    if not valid_timestamp(signal.get("timestamp")):
        raise SignalError(f"timestamp {signal.get('timestamp')!r} is not an ISO 8601 date-time")
    return signal


# --- routing (the two tables of the auto seed) -----------------------------------------------------

# First step by status. ``None`` means stop at once; draft needs .target.md content.
ENTRY = {
    "draft": ("plan", ""),
    "planning": ("check", "post-plan"),
    "review": ("exec", ""),
    "executing": ("check", "post-exec"),
    "complete": ("report", ""),
    "blocked": None,
    "cancelled": None,
}
STOP = ("(stop)", "")


def entry_step(status: str, phase: str) -> tuple[str, str] | None:
    if status == "re-planning":
        return ("check", "post-plan") if phase == "needs-check" else ("plan", "")
    return ENTRY.get(status)


def route(step: str, result: str, checkpoint: str = "") -> tuple[str, str]:
    """(next step, its checkpoint) after ``step`` gave ``result``."""
    if step == "plan":
        return "check", "post-plan"
    if step == "check":
        table = {
            "PASS": ("exec", ""),
            "NEEDS_REVISION": ("plan", ""),
            "ACCEPT": ("merge", ""),
            "CONTINUE": ("exec", ""),
            "REPLAN": ("plan", ""),
            "BLOCKED": STOP,
        }
        if result == "NEEDS_FIX":
            # Fix first, then come back to the checkpoint that found the problem.
            return "exec", checkpoint if checkpoint in ("mid-exec", "post-exec") else "mid-exec"
        return table.get(result, STOP)
    if step == "exec":
        if result == "(done)":
            return "check", "post-exec"
        if result == "(mid-exec)" or _STEP_N.match(result):
            return "check", "mid-exec"
        return STOP  # (blocked) or anything unexpected
    if step == "merge":
        return ("report", "") if result == "success" else STOP
    return STOP  # report: the loop is complete


# --- files ---------------------------------------------------------------------------------------


def write_signal(
    mdir: Path,
    step: str,
    result: str,
    nxt: str,
    checkpoint: str = "",
    iteration: int | None = None,
    timestamp: str | None = None,
) -> dict:
    signal = {
        "step": step,
        "result": result,
        "next": nxt,
        "checkpoint": checkpoint or "",
        "timestamp": timestamp or now_iso(),
    }
    if iteration is not None:
        signal["iteration"] = iteration
    validate(signal)
    store.write_json(Path(mdir) / ".auto-signal", signal)
    return signal


def write_stop(mdir: Path, reason: str) -> dict:
    if reason not in STOP_REASONS:
        raise SignalError(f"stop reason {reason!r} is not one of {', '.join(STOP_REASONS)}")
    stop = {"reason": reason, "timestamp": now_iso()}
    store.write_json(Path(mdir) / ".auto-stop", stop)
    return stop
