"""``lifecycle cancel``: cancel a task in any status, snapshotting uncommitted work first
and asking a running auto loop to stop; ``--cleanup`` removes its worktree and branch."""

from __future__ import annotations

from pathlib import Path

from loopwright.modes.task import gitops, signals
from loopwright.modes.task.ops.mergeattempts import merge_state_path
from loopwright.modes.task.ops.taskmodule import index_of, locate, read_log
from loopwright.modes.task.ops.transition import apply


def cancel(project: Path, name: str, reason: str = "user cancelled", cleanup: bool = False) -> dict:
    mod = locate(project, name)
    index = index_of(mod)
    if index.meta["status"] == "cancelled":
        return {"module": name, "noop": True, "message": f"TASK/{name} is already cancelled; nothing changed"}
    snapshot = None
    if (
        gitops.is_repo(mod.workdir)
        and gitops.run(mod.workdir, "status", "--porcelain", check=False).stdout.strip()
    ):
        snapshot = gitops.commit_paths(mod.workdir, name, "cancel", "snapshot uncommitted changes")
    # An auto loop on this module stops between steps. In worktree mode the main checkout's
    # directory may not exist yet: stop files always go there (as signals do).
    mod.main_dir.mkdir(parents=True, exist_ok=True)
    signals.write_stop(mod.main_dir, "user_stop")
    res = apply(project, name, "cancel", description=reason or "user cancelled")
    cleaned = []
    if cleanup and gitops.is_repo(mod.project):
        base = read_log(mod).get("base_branch")
        if mod.workdir != mod.project:
            gitops.run(mod.project, "worktree", "remove", "--force", str(mod.workdir))
            cleaned.append("worktree")
        elif base and gitops.current_branch(mod.project) == f"task/{name}":
            gitops.run(mod.project, "checkout", "-q", base)
        if gitops.run(mod.project, "branch", "-D", f"task/{name}", check=False).returncode == 0:
            cleaned.append(f"branch task/{name}")
        merge_state_path(mod).unlink(missing_ok=True)
    return {**res, "snapshot": snapshot, "cleaned": cleaned}
