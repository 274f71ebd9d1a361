"""``lifecycle commit``: the exec phase's code commits (feat, fix, refactor) with the
ai-cli-task convention; state commits are made by the other verbs."""

from __future__ import annotations

from pathlib import Path

from loopwright.modes.task.ops.taskmodule import TaskError, commit, index_of, locate


def commit_work(project: Path, name: str, kind: str, description: str) -> str | None:
    if kind not in ("feat", "fix", "refactor"):
        raise TaskError(
            "--type must be feat, fix or refactor (state commits are made by the lifecycle commands)"
        )
    if not description.strip():
        raise TaskError("--message must say what changed")
    mod = locate(project, name)
    if index_of(mod).meta["status"] != "executing":
        raise TaskError(f"TASK/{name} is not executing; code commits belong to the exec phase")
    return commit(mod, kind, description.strip())
