"""The recorded status changes (plan, check, exec, report, cancel): validate against the
state x command matrix (lifecycle), write ``.index.md`` and the log, make the state commit
with a description worded as in ai-cli-task's examples."""

from __future__ import annotations

from pathlib import Path

from loopwright.modes.task import lifecycle, taskdir
from loopwright.modes.task.ops.taskmodule import (
    TaskError,
    commit,
    dependency_problems,
    index_of,
    locate,
    read_log,
    save_log,
    task_paths,
)
from loopwright.state.lock import now_iso


def apply(
    project: Path,
    name: str,
    command: str,
    *,
    checkpoint: str | None = None,
    result: str | None = None,
    completed_steps: int | None = None,
    description: str | None = None,
    commit_kind: str | None = None,
) -> dict:
    """Validate and record one status change; returns what happened."""
    mod = locate(project, name)
    index = index_of(mod)
    status, phase = index.meta["status"], index.meta.get("phase") or ""
    if command == "cancel" and status == "cancelled":
        return {"module": name, "from": status, "to": status, "phase": phase, "commit": None, "noop": True}
    try:
        change = lifecycle.transition(status, phase, command, checkpoint, result)
    except lifecycle.LifecycleError as exc:
        raise TaskError(f"TASK/{name}: {exc}") from None
    if command in ("exec", "merge") and change.status != "blocked":
        blocking = dependency_problems(mod, index)
        if blocking:
            raise TaskError(
                f"TASK/{name}: {command} needs its dependencies complete first; "
                f"not complete: {', '.join(blocking)}"
            )
    index.meta["status"], index.meta["phase"] = change.status, change.phase
    if completed_steps is not None:
        if completed_steps < 0:
            raise TaskError("--completed-steps must be 0 or more")
        index.meta["completed_steps"] = completed_steps
    log = _logged(read_log(mod), command, checkpoint, result, status, change)
    taskdir.write_index(mod.state_dir, index)
    save_log(mod, log)
    taskdir.update_root_index(mod.workdir)
    kind = commit_kind or command
    description = _describe(kind, command, checkpoint, result, change, description)
    sha = commit(mod, kind, description, task_paths(mod))
    out = {"module": name, "from": status, "to": change.status, "phase": change.phase, "commit": sha}
    if command == "check":
        blocking = dependency_problems(mod, index)
        if blocking:  # check flags what exec and merge will refuse
            out["warning"] = (
                f"dependencies not complete: {', '.join(blocking)}; exec and merge will refuse until they are"
            )
    return out


def _logged(log: dict, command: str, checkpoint, result, status: str, change: lifecycle.Change) -> dict:
    """``log`` with this change appended to its history (and the last check or exec marked)."""
    entry = {
        "at": now_iso(),
        "command": lifecycle.command_key(command, checkpoint),
        "result": result,
        "from": status,
        "to": change.status,
        "phase": change.phase,
    }
    log["history"].append(entry)
    seq = len(log["history"])
    if command == "check":
        log["last_check"] = {"checkpoint": checkpoint, "result": result, "at": entry["at"], "seq": seq}
    if command == "exec":
        log["last_exec_seq"] = seq
    return log


_EXEC_DONE = {
    None: "execution started",
    "(start)": "execution started",
    "(done)": "all steps done",
    "(mid-exec)": "stopped for a mid-exec check",
    "(blocked)": "execution blocked",
}
# Commit types whose descriptions callers build from a template that may repeat the type
# ("exec step 2/5 done" would read `:exec exec step 2/5 done`; the seed has `:exec step 2/5
# done`). Not feat/fix/merge, whose seed examples repeat the word on purpose ("fix fix token
# expiration check"), nor cancel, whose description is the user's own reason.
_NO_REPEAT = ("exec",)


def _describe(
    kind: str,
    command: str,
    checkpoint: str | None,
    result: str | None,
    change: lifecycle.Change,
    given: str | None,
) -> str:
    """The description after ``-- ai-cli-task(<module>):<kind> ``, worded as in the seed's
    examples: ``check post-plan PASS → review``, ``exec step 2/5 done``."""
    text = (given or "").strip()
    if kind in _NO_REPEAT and text.startswith(kind + " "):
        text = text[len(kind) + 1 :].lstrip()
    if text:
        return text
    if command == "plan":
        return "annotations processed" if result == "(annotations)" else "generate implementation plan"
    if command == "report":
        return "generate completion report"
    if command == "cancel":
        return "user cancelled"
    if command == "check":
        text = f"{checkpoint} {result}"
    elif command == "exec":
        step = result[6:-1] if result and result.startswith("(step-") else None
        text = f"step {step} done" if step else _EXEC_DONE.get(result, str(result))
    else:
        text = str(result or command)
    # The new status after an arrow, unless the words already end with it ("execution blocked").
    if change.changed and not text.endswith(change.status):
        text += f" → {change.status}"
    return text
