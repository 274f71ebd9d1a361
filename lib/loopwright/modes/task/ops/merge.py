"""``lifecycle merge``: merge task/<name> into its base branch (or --continue / --abort a
merge in progress), optionally verified by a build/test command; on success the task is
complete and its worktree and branch are cleaned up. Attempts are bounded (mergeattempts)."""

from __future__ import annotations

from pathlib import Path

from loopwright.modes.task import gitops, lifecycle, taskdir
from loopwright.modes.task.ops.mergeattempts import (
    MAX_MERGE_ATTEMPTS,
    attempts,
    close_attempt,
    merge_state_path,
    open_attempt,
)
from loopwright.modes.task.ops.taskmodule import (
    Module,
    TaskError,
    commit,
    dependency_problems,
    index_of,
    locate,
    read_log,
    save_log,
    task_paths,
)
from loopwright.state import store
from loopwright.state.lock import now_iso


def merge(
    project: Path, name: str, *, verify: str | None = None, cont: bool = False, abort: bool = False
) -> dict:
    """Merge task/<name> into its base branch (or --continue / --abort a merge in progress)."""
    mod = locate(project, name)
    log = read_log(mod)
    if abort:
        return _merge_abort(mod, log)
    if cont:
        _merge_continue(mod, log)
    else:
        stopped = _merge_start(mod, log)
        if stopped is not None:
            return stopped
    if verify:
        failed = _merge_verify(mod, log, verify)
        if failed is not None:
            return failed
    return _merge_finish(mod, log.get("base_branch"))


def _back_to_task_branch(mod: Module) -> None:
    """An undone merge leaves the main checkout on the task branch again, where the
    module's files are, so the task can be inspected and merged again."""
    if mod.workdir == mod.project and gitops.branch_exists(mod.project, f"task/{mod.name}"):
        gitops.run(mod.project, "checkout", "-q", f"task/{mod.name}")


def _resolve_generated_conflicts(project: Path) -> list[str]:
    """Resolve the conflicts a merge has on files loopwright generates; the paths resolved.

    Why here: parallel tasks (worktree mode) branch from the same base and each commits its
    own copy of the root listing TASK/.index.md, so the second merge always conflicts on it.
    Not committing the listing on task branches would hide in-progress modules from it and
    leave a task branch's checkout dirty; instead the listing is treated as what it is, a
    view derived from the module directories: on a conflict it is written again from the
    merged tree (and it is written again on the base branch after every merge anyway).
    A .gitignore whose only change on the task side is init's own lines is resolved the same
    way: the base branch's version plus any of those lines it lacks. Every other conflict is
    left for the agent."""
    conflicted = gitops.conflicted_files(project)
    resolved = []
    if taskdir.ROOT_INDEX in conflicted:
        taskdir.update_root_index(project)
        resolved.append(taskdir.ROOT_INDEX)
    if ".gitignore" in conflicted and taskdir.gitignore_change_is_ours(
        gitops.stage_text(project, 1, ".gitignore"), gitops.stage_text(project, 3, ".gitignore")
    ):
        store.write_text(project / ".gitignore", gitops.stage_text(project, 2, ".gitignore") or "")
        taskdir.ensure_gitignore(project)
        resolved.append(".gitignore")
    if resolved:
        gitops.run(project, "add", "--", *resolved)
    return resolved


def _check_merge_start(mod: Module, log: dict) -> None:
    name = mod.name
    if gitops.merge_in_progress(mod.project):
        raise TaskError(
            f"a merge is already in progress in {mod.project}; finish it with "
            f"`loopwright lifecycle merge {name} --continue` or give it up with `--abort`"
        )
    index = index_of(mod)
    status = index.meta["status"]
    if not lifecycle.allowed(status, "merge"):
        raise TaskError(
            f"TASK/{name}: merge is not allowed while the task is {status} "
            "(it needs executing with a post-exec ACCEPT)"
        )
    last = log.get("last_check") or {}
    if (last.get("checkpoint"), last.get("result")) != ("post-exec", "ACCEPT") or log.get(
        "last_exec_seq", 0
    ) > last.get("seq", 0):
        raise TaskError(
            f"TASK/{name}: merge needs an ACCEPT from `check --checkpoint post-exec` after the last exec"
        )
    blocking = dependency_problems(mod, index)
    if blocking:
        raise TaskError(
            f"TASK/{name}: merge needs its dependencies complete first; not complete: {', '.join(blocking)}"
        )
    if not log.get("base_branch"):
        raise TaskError(f"TASK/{name}: .lifecycle.json does not name the base branch to merge into")
    if gitops.run(mod.workdir, "status", "--porcelain", check=False).stdout.strip():
        raise TaskError(
            "the task branch has uncommitted changes; commit them (`loopwright lifecycle commit`) first"
        )


def _merge_start(mod: Module, log: dict) -> dict | None:
    """Start a merge; None when it is committed, else the conflicts left for the agent."""
    _check_merge_start(mod, log)
    attempt = open_attempt(mod, log)
    base, name = log["base_branch"], mod.name
    if gitops.current_branch(mod.project) != base:
        gitops.run(mod.project, "checkout", "-q", base)
    proc = gitops.run(
        mod.project,
        "merge",
        "--no-ff",
        f"task/{name}",
        "-m",
        gitops.message(name, "merge", "merge completed task"),
        check=False,
    )
    if proc.returncode == 0:
        return None
    _resolve_generated_conflicts(mod.project)
    files = gitops.conflicted_files(mod.project)
    if files:
        return {
            "module": name,
            "result": "conflict",
            "conflicts": files,
            "attempts": attempt,
            "max_attempts": MAX_MERGE_ATTEMPTS,
            "next": f"resolve the conflicts, `git add` the files, then `loopwright lifecycle merge "
            f"{name} --continue` (attempt {attempt} of {MAX_MERGE_ATTEMPTS})",
        }
    if gitops.merge_in_progress(mod.project):  # only generated files conflicted: all resolved
        gitops.run(
            mod.project,
            "commit",
            "-q",
            "--no-verify",
            "-m",
            gitops.message(name, "merge", "merge completed task"),
        )
        return None
    _back_to_task_branch(mod)
    close_attempt(mod, log)
    raise TaskError(
        f"git merge failed: {_git_problem(proc)} (attempt {attempt} of {MAX_MERGE_ATTEMPTS} used)"
    )


def _git_problem(proc) -> str:
    """git's own error line, with the paths it lists under it, as one line."""
    lines = [ln.rstrip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
    first = next((i for i, ln in enumerate(lines) if ln.startswith(("error:", "fatal:"))), None)
    if first is None:
        return lines[-1] if lines else f"exit {proc.returncode}"
    paths = [ln.strip() for ln in lines[first + 1 :] if ln[:1].isspace()]
    return " ".join([lines[first], *paths])


def _merge_continue(mod: Module, log: dict) -> None:
    """Commit a merge whose conflicts were resolved and staged."""
    name = mod.name
    if not gitops.merge_in_progress(mod.project):
        raise TaskError(f"no merge of task/{name} is in progress; run `loopwright lifecycle merge {name}`")
    if not attempts(mod, log).get("open"):  # started by hand: it counts from here
        open_attempt(mod, log)
    _resolve_generated_conflicts(mod.project)
    left = gitops.conflicted_files(mod.project)
    if left:
        raise TaskError(f"still conflicted: {', '.join(left)}; resolve and `git add` them first")
    gitops.run(
        mod.project,
        "commit",
        "-q",
        "--no-verify",
        "-m",
        gitops.message(name, "merge", "resolve merge conflict"),
    )


def _merge_verify(mod: Module, log: dict, verify: str) -> dict | None:
    """Run the build/test command on the merged tree; on failure undo the merge."""
    from loopwright.state import verify as checks

    result = checks.run(verify, mod.project)
    if checks.passed(result):
        return None
    gitops.run(mod.project, "reset", "-q", "--hard", "HEAD~1")
    _back_to_task_branch(mod)
    used = close_attempt(mod, log)
    out = {
        "module": mod.name,
        "result": "conflict",
        "attempts": used,
        "max_attempts": MAX_MERGE_ATTEMPTS,
        "output_tail": result["output_tail"][-1500:],
    }
    if used >= MAX_MERGE_ATTEMPTS:
        out["gave_up"] = True
        out["next"] = (
            f"the merge was undone because `{verify}` failed, the last of {MAX_MERGE_ATTEMPTS} "
            "attempts; the task stays executing: resolve by hand, then a new post-exec ACCEPT "
            "allows merging again"
        )
    else:
        out["next"] = (
            f"the merge was undone because `{verify}` failed; fix it on the task branch and merge "
            f"again ({MAX_MERGE_ATTEMPTS - used} attempt(s) left)"
        )
    return out


def _merge_abort(mod: Module, log: dict) -> dict:
    """Give up a merge in progress; it stays counted as a failed attempt."""
    in_progress = gitops.merge_in_progress(mod.project)
    if in_progress:
        gitops.run(mod.project, "merge", "--abort")
    _back_to_task_branch(mod)
    state = attempts(mod, log)
    used = close_attempt(mod, log) if in_progress or state.get("open") else state["attempts"]
    return {
        "module": mod.name,
        "result": "conflict",
        "aborted": True,
        "attempts": used,
        "max_attempts": MAX_MERGE_ATTEMPTS,
    }


def _merge_finish(mod: Module, base: str | None) -> dict:
    """Merged (and verified): the task is complete on the base branch; clean up."""
    name = mod.name
    merge_state_path(mod).unlink(missing_ok=True)
    done = Module(mod.project, name, mod.main_dir, mod.main_dir, mod.project)
    if not (done.state_dir / ".index.md").exists():
        raise TaskError(f"after the merge TASK/{name}/.index.md is missing on {base}")
    index = taskdir.read_index(done.state_dir)
    change = lifecycle.transition(
        index.meta["status"], index.meta.get("phase") or "", "merge", result="success"
    )
    index.meta["status"], index.meta["phase"] = change.status, change.phase
    taskdir.write_index(done.state_dir, index)
    dlog = read_log(done)
    dlog["history"].append(
        {"at": now_iso(), "command": "merge", "result": "success", "from": "executing", "to": "complete"}
    )
    save_log(done, dlog)
    taskdir.update_root_index(done.project)  # the listing on the base branch, written from its modules
    sha = commit(done, "merge", "task completed", task_paths(done))
    cleaned = []
    if mod.workdir != mod.project:
        gitops.run(mod.project, "worktree", "remove", "--force", str(mod.workdir))
        cleaned.append(f"worktree {mod.workdir.relative_to(mod.project)}")
    if gitops.run(mod.project, "branch", "-d", f"task/{name}", check=False).returncode == 0:
        cleaned.append(f"branch task/{name}")
    return {"module": name, "result": "success", "base_branch": base, "commit": sha, "cleaned": cleaned}
