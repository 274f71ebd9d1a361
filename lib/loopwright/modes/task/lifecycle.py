"""The ai-cli-task status machine: the complete state × command matrix, as data.

Every status or phase change of a TASK/ module goes through ``transition``,
which either returns the new (status, phase) or raises LifecycleError naming the
status and the command (the matrix's ``⊘`` cells). Pure: no files here.
"""

from __future__ import annotations

from dataclasses import dataclass

from loopwright.core.errors import UserError

STATUSES = ("draft", "planning", "review", "executing", "re-planning", "complete", "blocked", "cancelled")
TERMINAL = ("complete", "cancelled")
COMMANDS = (
    "plan",
    "check post-plan",
    "check mid-exec",
    "check post-exec",
    "exec",
    "merge",
    "report",
    "cancel",
)
CHECKPOINTS = ("post-plan", "mid-exec", "post-exec")


SAME = "="  # the status stays as it is
REJECT = None  # ⊘


class LifecycleError(UserError):
    """A rejected (status, command) combination or a bad result; one line for the user."""


# The matrix: (status, command) -> {result: new status or SAME}; REJECT for ⊘.
# Commands without results (plan, report, cancel) use the key "".
def _build() -> dict[tuple[str, str], dict[str, str] | None]:
    m: dict[tuple[str, str], dict[str, str] | None] = {}
    for s in STATUSES:
        for c in COMMANDS:
            m[(s, c)] = REJECT
    # plan
    m[("draft", "plan")] = {"": "planning"}
    m[("planning", "plan")] = {"": SAME}
    m[("review", "plan")] = {"": "re-planning"}
    m[("executing", "plan")] = {"": "re-planning"}
    m[("re-planning", "plan")] = {"": SAME}
    m[("blocked", "plan")] = {"": "planning"}
    # check post-plan
    for s in ("planning", "re-planning"):
        m[(s, "check post-plan")] = {"PASS": "review", "NEEDS_REVISION": SAME, "BLOCKED": "blocked"}
    # check mid-exec / post-exec
    m[("executing", "check mid-exec")] = {
        "CONTINUE": SAME,
        "NEEDS_FIX": SAME,
        "REPLAN": "re-planning",
        "BLOCKED": "blocked",
    }
    m[("executing", "check post-exec")] = {"ACCEPT": SAME, "NEEDS_FIX": SAME, "REPLAN": "re-planning"}
    # exec: starting from review; continuing (NEEDS_FIX fixes, further steps) while executing
    m[("review", "exec")] = {
        "(start)": "executing",
        "(done)": "executing",
        "(mid-exec)": "executing",
        "(step)": "executing",
        "(blocked)": "blocked",
    }
    m[("executing", "exec")] = {
        "(start)": SAME,
        "(done)": SAME,
        "(mid-exec)": SAME,
        "(step)": SAME,
        "(blocked)": "blocked",
    }
    # merge
    m[("executing", "merge")] = {"success": "complete", "conflict": SAME}
    # report: informational everywhere
    for s in STATUSES:
        m[(s, "report")] = {"": SAME}
    # cancel: always available; a no-op on cancelled
    for s in STATUSES:
        m[(s, "cancel")] = {"": "cancelled" if s != "cancelled" else SAME}
    return m


MATRIX = _build()


def command_key(command: str, checkpoint: str | None = None) -> str:
    if command == "check":
        if checkpoint not in CHECKPOINTS:
            raise LifecycleError(f"check needs --checkpoint {'|'.join(CHECKPOINTS)}")
        return f"check {checkpoint}"
    if command not in ("plan", "exec", "merge", "report", "cancel"):
        raise LifecycleError(
            f"unknown command {command!r}; commands: plan, check, exec, merge, report, cancel"
        )
    return command


def _result_key(key: str, result: str | None) -> str:
    if key in ("plan", "report", "cancel"):
        return ""
    if key == "exec":
        r = result or "(start)"
        if r.startswith("(step-") and r.endswith(")") and r[6:-1].isdigit():
            return "(step)"
        return r
    return result or ""


@dataclass(frozen=True)
class Change:
    status: str
    phase: str
    changed: bool  # whether the status moved


def transition(
    status: str, phase: str, command: str, checkpoint: str | None = None, result: str | None = None
) -> Change:
    """The (status, phase) after ``command`` with ``result`` from ``status``."""
    if status not in STATUSES:
        raise LifecycleError(f"unknown status {status!r} in .index.md; statuses: {', '.join(STATUSES)}")
    key = command_key(command, checkpoint)
    cell = MATRIX[(status, key)]
    if cell is REJECT:
        raise LifecycleError(f"{key} is not allowed while the task is {status}" + _hint(status, key))
    rkey = _result_key(key, result)
    if rkey not in cell:
        allowed = ", ".join(k for k in cell if k) or "(none)"
        raise LifecycleError(f"{key} on a {status} task cannot give result {result!r}; results: {allowed}")
    target = cell[rkey]
    new_status = status if target == SAME else target
    # Phase rules: check REPLAN asks for a plan; plan on re-planning asks for a check;
    # every other transition clears the phase. Report changes nothing at all.
    if key == "report" or (key == "cancel" and status == "cancelled"):
        new_phase = phase
    elif key.startswith("check") and result == "REPLAN":
        new_phase = "needs-plan"
    elif key == "plan" and new_status == "re-planning":
        new_phase = "needs-check"
    else:
        new_phase = ""
    return Change(new_status, new_phase, new_status != status)


def _hint(status: str, key: str) -> str:
    if key == "exec" and status in ("draft", "planning", "re-planning"):
        return " (exec needs the review gate: run check --checkpoint post-plan first)"
    if key == "merge":
        return " (merge needs an executing task whose check --checkpoint post-exec gave ACCEPT)"
    if status in TERMINAL:
        return f" ({status} is final)"
    return ""


def allowed(status: str, key: str) -> bool:
    return MATRIX[(status, key)] is not REJECT
