"""The ai-cli-task sub-commands' deterministic parts: init, the recorded status
changes of plan/check/exec, merge, report, cancel, annotations, status.

Each operation validates the module (taskdir), checks the state × command matrix
(lifecycle), writes ``.index.md`` atomically, keeps a small system log in
``.lifecycle.json``, and makes its state commit with the ai-cli-task convention
(gitops). Errors are TaskError with one line for the user.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from loopwright.core.errors import UserError
from loopwright.modes.task import gitops, lifecycle, signals, taskdir
from loopwright.state import store
from loopwright.state.lock import now_iso

MAX_MERGE_ATTEMPTS = 3


class TaskError(UserError):
    """A one-line, user-facing refusal; nothing was changed."""


@dataclass
class Module:
    """Where a module lives: its main-worktree directory (signals), the directory
    holding its state (the task worktree's copy in worktree mode), and the git
    working tree its commits go to."""

    project: Path
    name: str
    main_dir: Path
    state_dir: Path
    workdir: Path

    @property
    def worktree(self) -> Path:
        return self.project / ".worktrees" / f"task-{self.name}"


def locate(project: Path, name: str, *, must_exist: bool = True) -> Module:
    project = Path(project).absolute()
    try:
        main = taskdir.module_dir(project, name, must_exist=False)
    except taskdir.TaskDirError as exc:
        raise TaskError(str(exc)) from None
    wt = project / ".worktrees" / f"task-{name}"
    wt_state = wt / taskdir.TASK_ROOT / name
    if (wt_state / ".index.md").exists():
        expected = os.path.join(
            os.path.realpath(project), ".worktrees", f"task-{name}", taskdir.TASK_ROOT, name
        )
        if os.path.realpath(wt_state) != expected:
            raise TaskError(
                f"{wt_state} goes through a symlink; task modules and their worktrees must be real "
                "directories inside the project"
            )
        return Module(project, name, main, wt_state, wt)
    if must_exist and not (main / ".index.md").exists():
        if main.is_dir():
            raise TaskError(f"TASK/{name} has no .index.md; it is not a task module")
        raise TaskError(f"no task module TASK/{name}; create it with `/loopwright:task init {name}`")
    return Module(project, name, main, main, project)


def _log(mod: Module) -> dict:
    path = mod.state_dir / ".lifecycle.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("history", [])
    return data


def _save_log(mod: Module, data: dict) -> None:
    store.write_json(mod.state_dir / ".lifecycle.json", data)


def _read(mod: Module) -> taskdir.Index:
    try:
        return taskdir.read_index(mod.state_dir)
    except taskdir.TaskDirError as exc:
        raise TaskError(str(exc)) from None


def _dependency_problems(mod: Module, index: taskdir.Index) -> list[str]:
    problems = []
    for dep in index.meta.get("depends_on") or []:
        try:
            dmod = locate(mod.project, str(dep))
            status = taskdir.read_index(dmod.state_dir).meta.get("status")
        except (TaskError, taskdir.TaskDirError):
            status = "missing"
        if status != "complete":
            problems.append(f"{dep} ({status})")
    return problems


def _commit(mod: Module, kind: str, description: str, paths: list[Path] | None = None) -> str | None:
    if not gitops.is_repo(mod.workdir):
        return None
    rel = None if paths is None else [str(p.relative_to(mod.workdir)) for p in paths]
    return gitops.commit_paths(mod.workdir, mod.name, kind, description, rel)


def _task_paths(mod: Module) -> list[Path]:
    root = mod.workdir / taskdir.TASK_ROOT
    out = [mod.state_dir, root / ".index.md"]
    gi = mod.workdir / ".gitignore"
    if gi.exists():
        out.append(gi)
    return out


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
    index = _read(mod)
    status, phase = index.meta["status"], index.meta.get("phase") or ""
    if command == "cancel" and status == "cancelled":
        return {"module": name, "from": status, "to": status, "phase": phase, "commit": None, "noop": True}
    try:
        change = lifecycle.transition(status, phase, command, checkpoint, result)
    except lifecycle.LifecycleError as exc:
        raise TaskError(f"TASK/{name}: {exc}") from None
    if command in ("exec", "merge") and change.status != "blocked":
        blocking = _dependency_problems(mod, index)
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
    log = _logged(_log(mod), command, checkpoint, result, status, change)
    taskdir.write_index(mod.state_dir, index)
    _save_log(mod, log)
    taskdir.update_root_index(mod.workdir)
    kind = commit_kind or command
    description = _describe(kind, command, checkpoint, result, change, description)
    sha = _commit(mod, kind, description, _task_paths(mod))
    out = {"module": name, "from": status, "to": change.status, "phase": change.phase, "commit": sha}
    if command == "check":
        blocking = _dependency_problems(mod, index)
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


# --- init -------------------------------------------------------------------------------------


def init(
    project: Path, name: str, title: str = "", tags: list[str] | None = None, worktree: bool = False
) -> dict:
    """Create TASK/<name> (draft), its branch task/<name> (checked out here, or in the
    worktree .worktrees/task-<name>), and the init commit. All or nothing: when any step
    fails, everything init made is taken back and the error says what to fix."""
    project = Path(project).absolute()
    main, base = _init_preflight(project, name)
    undo = _Undo()
    try:
        workdir = _init_branch(project, name, base, worktree, undo)
        mdir, sha = _init_module(project, name, main, workdir, title, tags or [], worktree, base, undo)
        if worktree:
            undo.keep_file(_exclude_path(project))
            _exclude_locally(project)
    except Exception as exc:  # any failure: undo, then one line for the user
        leftovers = undo.run()
        raise TaskError(_init_failure(name, exc, leftovers)) from None
    return {
        "module": name,
        "branch": f"task/{name}",
        "base_branch": base,
        "worktree": str(workdir) if worktree else "",
        "dir": str(mdir),
        "commit": sha,
    }


def _init_preflight(project: Path, name: str) -> tuple[Path, str]:
    """The module's main-checkout directory and the base branch, or a refusal."""
    try:
        main = taskdir.module_dir(project, name, must_exist=False)
    except taskdir.TaskDirError as exc:
        raise TaskError(str(exc)) from None
    if main.exists() or (project / ".worktrees" / f"task-{name}" / taskdir.TASK_ROOT / name).exists():
        raise TaskError(f"TASK/{name} already exists; pick another name or cancel the old module")
    if not gitops.is_repo(project):
        raise TaskError(
            "task modules need git: this project is not a git repository (run `git init` and commit once)"
        )
    if not gitops.has_commits(project):
        raise TaskError(
            "the repository has no commit yet; commit once so the task branch has a base to start from"
        )
    base = gitops.current_branch(project)
    if not base or base == "HEAD":
        raise TaskError("HEAD is detached; check out the branch the task should start from")
    branch = f"task/{name}"
    if gitops.branch_exists(project, branch):
        raise TaskError(f"branch {branch} already exists; delete it or pick another module name")
    return main, base


class _Undo:
    """What a half-done init has to take back. Each step is registered before the
    change it undoes is made (guarded, so it is harmless if that change never
    happened) and the steps run newest first."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Callable[[], object]]] = []

    def add(self, what: str, step: Callable[[], object]) -> None:
        self.steps.append((what, step))

    def keep_file(self, path: Path) -> None:
        """Put ``path`` back as it is now, or remove it if it does not exist yet."""
        data = path.read_bytes() if path.is_file() else None

        def restore() -> None:
            if data is None:
                path.unlink(missing_ok=True)
            else:
                store.write_bytes_atomic(path, data)

        self.add(f"restore {path}", restore)

    def make_dir(self, path: Path) -> None:
        """Create ``path`` with its missing parents; undoing removes the topmost one made."""
        top = path
        while not top.parent.exists():
            top = top.parent
        if not top.exists():
            self.add(f"remove {top}", lambda: shutil.rmtree(top) if top.exists() else None)
        path.mkdir(parents=True, exist_ok=True)

    def run(self) -> list[str]:
        """Undo every step; what could not be undone, one phrase each."""
        failed = []
        for what, step in reversed(self.steps):
            try:
                step()
            except Exception as exc:  # keep undoing the rest
                failed.append(f"{what} ({exc})")
        self.steps.clear()
        return failed


def _init_branch(project: Path, name: str, base: str, worktree: bool, undo: _Undo) -> Path:
    """Create task/<name>, checked out in a new worktree or in this checkout; its working tree."""
    branch = f"task/{name}"

    def delete_branch() -> None:
        if gitops.branch_exists(project, branch):
            gitops.run(project, "branch", "-D", branch)

    def back_to_base() -> None:
        # Before the init commit task/<name> is the same commit as the base: switching
        # back changes no file and keeps the user's uncommitted changes.
        if gitops.current_branch(project) == branch:
            gitops.run(project, "checkout", "-q", base)

    undo.add(f"branch {branch}", delete_branch)
    if not worktree:
        undo.add(f"checkout of {base}", back_to_base)
        gitops.run(project, "checkout", "-q", "-b", branch)
        return project
    wt = project / ".worktrees" / f"task-{name}"
    undo.make_dir(wt.parent)

    def remove_worktree() -> None:
        if wt.exists():
            gitops.run(project, "worktree", "remove", "--force", str(wt))
        gitops.run(project, "worktree", "prune")

    undo.add(f"worktree {wt}", remove_worktree)
    gitops.run(project, "worktree", "add", "-q", str(wt), "-b", branch)
    return wt


def _init_module(
    project: Path,
    name: str,
    main: Path,
    workdir: Path,
    title: str,
    tags: list[str],
    worktree: bool,
    base: str,
    undo: _Undo,
) -> tuple[Path, str | None]:
    """Write the module's files into ``workdir`` and make the init commit.

    In worktree mode nothing is written to the main checkout: its ``TASK/<name>/`` appears
    only when a signal or stop file is written there, and the root listing skips it."""
    root = workdir / taskdir.TASK_ROOT
    mdir = root / name
    undo.keep_file(workdir / ".gitignore")
    undo.keep_file(root / ".index.md")
    undo.make_dir(mdir)
    for sub in taskdir.SUBDIRS:
        (mdir / sub).mkdir(exist_ok=True)
        (mdir / sub / ".gitkeep").touch()
    index = taskdir.new_index(name, title, tags, worktree)
    store.write_text(mdir / ".index.md", taskdir.render_index(index))
    store.write_text(mdir / ".target.md", taskdir.TARGET_TEMPLATE.format(title=title or name))
    mod = Module(project, name, main, mdir, workdir)
    _save_log(
        mod,
        {
            "base_branch": base,
            "created": now_iso(),
            "history": [{"at": now_iso(), "command": "init", "to": "draft"}],
        },
    )
    taskdir.ensure_gitignore(workdir)
    taskdir.update_root_index(workdir)
    paths = _task_paths(mod)
    rel = [str(p.relative_to(workdir)) for p in paths]
    undo.add("the staged files", lambda: gitops.run(workdir, "reset", "-q", "--", *rel))
    return mdir, _commit(mod, "init", "initialize task module", paths)


def _init_failure(name: str, exc: Exception, leftovers: list[str]) -> str:
    """One line: what failed, how to fix it, and whether init left anything behind."""
    if isinstance(exc, gitops.GitError) and gitops.identity_missing(exc):
        line = (
            f"init TASK/{name} failed: git does not know who you are, so it cannot commit; set "
            '`git config user.name "Your Name"` and `git config user.email you@example.com` '
            "(add --global for every repository), then run init again"
        )
    else:
        line = f"init TASK/{name} failed: {exc}; fix that, then run init again"
    if leftovers:
        return line + f"; could not undo: {'; '.join(leftovers)}"
    return line + " (nothing was left behind)"


def _exclude_path(project: Path) -> Path:
    git_dir = Path(gitops.run(project, "rev-parse", "--git-common-dir").stdout.strip())
    return (git_dir if git_dir.is_absolute() else project / git_dir) / "info" / "exclude"


def _exclude_locally(project: Path) -> None:
    """The main checkout stays on its branch in worktree mode: keep the worktrees and
    the transient signal files out of its status through .git/info/exclude, not a commit."""
    exclude = _exclude_path(project)
    exclude.parent.mkdir(parents=True, exist_ok=True)
    existing = exclude.read_text(encoding="utf-8").splitlines() if exclude.exists() else []
    missing = [ln for ln in taskdir.GITIGNORE_LINES if ln not in existing]
    if missing:
        store.write_text(exclude, "\n".join(existing + missing) + "\n")


# --- exec commits --------------------------------------------------------------------------------


def commit_work(project: Path, name: str, kind: str, description: str) -> str | None:
    if kind not in ("feat", "fix", "refactor"):
        raise TaskError(
            "--type must be feat, fix or refactor (state commits are made by the lifecycle commands)"
        )
    if not description.strip():
        raise TaskError("--message must say what changed")
    mod = locate(project, name)
    if _read(mod).meta["status"] != "executing":
        raise TaskError(f"TASK/{name} is not executing; code commits belong to the exec phase")
    return _commit(mod, kind, description.strip())


# --- merge -----------------------------------------------------------------------------------------
#
# The merge attempt bound (the seed: "up to 3 conflict resolution retries with build/test
# verification"). Every merge `lifecycle merge` starts counts as an attempt the moment it
# starts, before git runs, so an attempt that ends in any way but success stays counted:
# a conflict left unresolved, an --abort, a failed --verify, a git error, a crash. A merge
# somebody started by hand counts when --continue or --abort first touches it. The count
# belongs to the post-exec ACCEPT that allowed the merge: only a successful merge or a new
# post-exec ACCEPT resets it. After MAX_MERGE_ATTEMPTS, merge refuses to start another.


def _merge_state_path(mod: Module) -> Path:
    git_dir = gitops.run(mod.project, "rev-parse", "--absolute-git-dir").stdout.strip()
    return Path(git_dir) / f"loopwright-merge-{mod.name}.json"


def _back_to_task_branch(mod: Module) -> None:
    """An undone merge leaves the main checkout on the task branch again, where the
    module's files are, so the task can be inspected and merged again."""
    if mod.workdir == mod.project and gitops.branch_exists(mod.project, f"task/{mod.name}"):
        gitops.run(mod.project, "checkout", "-q", f"task/{mod.name}")


def _accept_key(log: dict) -> str:
    last = log.get("last_check") or {}
    return f"{last.get('seq')}@{last.get('at')}"


def _attempts(mod: Module, log: dict) -> dict:
    """The merge attempts counted against the current post-exec ACCEPT ("open": one is under way)."""
    try:
        state = json.loads(_merge_state_path(mod).read_text())
    except (OSError, ValueError):
        state = None
    key = _accept_key(log)
    if (
        not isinstance(state, dict)
        or state.get("accept") != key
        or not isinstance(state.get("attempts"), int)
    ):
        return {"accept": key, "attempts": 0, "open": False}
    return state


def _save_attempts(mod: Module, state: dict) -> None:
    store.write_json(_merge_state_path(mod), state)


def _exhausted(mod: Module) -> TaskError:
    return TaskError(
        f"TASK/{mod.name}: {MAX_MERGE_ATTEMPTS} merge attempts since the last post-exec ACCEPT failed; "
        f"the task stays executing. Resolve the cause by hand on task/{mod.name}, then record a new "
        f"`loopwright lifecycle check {mod.name} --checkpoint post-exec --result ACCEPT` to allow "
        f"{MAX_MERGE_ATTEMPTS} more"
    )


def _open_attempt(mod: Module, log: dict) -> int:
    """Count a new attempt (refused when none is left); its number."""
    state = _attempts(mod, log)
    if state["attempts"] >= MAX_MERGE_ATTEMPTS:
        raise _exhausted(mod)
    state["attempts"] += 1
    state["open"] = True
    _save_attempts(mod, state)
    return state["attempts"]


def _close_attempt(mod: Module, log: dict) -> int:
    """The attempt under way failed (it stays counted); the number of attempts used."""
    state = _attempts(mod, log)
    if not state.get("open"):  # a merge started by hand: it counts now
        state["attempts"] += 1
    state["open"] = False
    _save_attempts(mod, state)
    return state["attempts"]


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


def merge(
    project: Path, name: str, *, verify: str | None = None, cont: bool = False, abort: bool = False
) -> dict:
    """Merge task/<name> into its base branch (or --continue / --abort a merge in progress)."""
    mod = locate(project, name)
    log = _log(mod)
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


def _check_merge_start(mod: Module, log: dict) -> None:
    name = mod.name
    if gitops.merge_in_progress(mod.project):
        raise TaskError(
            f"a merge is already in progress in {mod.project}; finish it with "
            f"`loopwright lifecycle merge {name} --continue` or give it up with `--abort`"
        )
    index = _read(mod)
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
    blocking = _dependency_problems(mod, index)
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
    attempt = _open_attempt(mod, log)
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
    _close_attempt(mod, log)
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
    if not _attempts(mod, log).get("open"):  # started by hand: it counts from here
        _open_attempt(mod, log)
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
    used = _close_attempt(mod, log)
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
    state = _attempts(mod, log)
    used = _close_attempt(mod, log) if in_progress or state.get("open") else state["attempts"]
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
    _merge_state_path(mod).unlink(missing_ok=True)
    done = Module(mod.project, name, mod.main_dir, mod.main_dir, mod.project)
    if not (done.state_dir / ".index.md").exists():
        raise TaskError(f"after the merge TASK/{name}/.index.md is missing on {base}")
    index = taskdir.read_index(done.state_dir)
    change = lifecycle.transition(
        index.meta["status"], index.meta.get("phase") or "", "merge", result="success"
    )
    index.meta["status"], index.meta["phase"] = change.status, change.phase
    taskdir.write_index(done.state_dir, index)
    dlog = _log(done)
    dlog["history"].append(
        {"at": now_iso(), "command": "merge", "result": "success", "from": "executing", "to": "complete"}
    )
    _save_log(done, dlog)
    taskdir.update_root_index(done.project)  # the listing on the base branch, written from its modules
    sha = _commit(done, "merge", "task completed", _task_paths(done))
    cleaned = []
    if mod.workdir != mod.project:
        gitops.run(mod.project, "worktree", "remove", "--force", str(mod.workdir))
        cleaned.append(f"worktree {mod.workdir.relative_to(mod.project)}")
    if gitops.run(mod.project, "branch", "-d", f"task/{name}", check=False).returncode == 0:
        cleaned.append(f"branch task/{name}")
    return {"module": name, "result": "success", "base_branch": base, "commit": sha, "cleaned": cleaned}


# --- report -----------------------------------------------------------------------------------------


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*") if p.is_file() and p.name != ".gitkeep") if d.is_dir() else []


def _excerpt(path: Path, lines: int = 12) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return "\n".join(text[:lines]) + ("\n…" if len(text) > lines else "")


def report(project: Path, name: str, fmt: str = "full") -> dict:
    if fmt not in ("full", "summary"):
        raise TaskError("--format must be full or summary")
    mod = locate(project, name)
    meta = _read(mod).meta
    d = mod.state_dir
    commits = gitops.history(mod.project, name) if gitops.is_repo(mod.project) else []
    summary = d / ".summary.md"
    lines = [
        f"# Task Report: {meta.get('title') or name}",
        "",
        f"**Status**: {meta['status']} | **Phase**: {meta.get('phase') or '-'}"
        f" | **Completed steps**: {meta.get('completed_steps', 0)} | **Branch**: {meta.get('branch')}"
        f" | **Created**: {meta.get('created')} | **Updated**: {meta.get('updated')}",
        "",
        "## Summary",
        "",
        _excerpt(summary, 40) if summary.exists() else f"The task is {meta['status']}.",
        "",
    ]
    if fmt == "full":
        lines += _plan_sections(d)
    lines += _changes_section(commits)
    if fmt == "full":
        lines += _outcome_sections(mod, meta)
    lines.append("")
    store.write_text(d / ".report.md", "\n".join(lines))
    result = apply(project, name, "report")
    return {
        "module": name,
        "report": str(d / ".report.md"),
        "commits": len(commits),
        "commit": result["commit"],
    }


def _first_heading(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return next((ln.lstrip("# ").strip() for ln in lines if ln.strip()), "")


def _plan_sections(d: Path) -> list[str]:
    target = d / ".target.md"
    plans = [p for p in _files(d) if not p.name.startswith(".") and p.suffix == ".md"]
    return (
        ["## Objective", "", _excerpt(target, 40) if target.exists() else "(no .target.md)", ""]
        + ["## Plan", ""]
        + ([f"- `{p.name}`: {_first_heading(p)}" for p in plans] or ["(no plan files)"])
        + [""]
    )


def _changes_section(commits: list[dict]) -> list[str]:
    if not commits:
        return ["## Changes", "", "(no ai-cli-task commits found)", ""]
    rows = [f"| {c['short']} | {c['date'][:10]} | {c['type']} | {c['description']} |" for c in commits]
    return ["## Changes", "", "| commit | date | type | description |", "|---|---|---|---|", *rows, ""]


def _outcome_sections(mod: Module, meta: dict) -> list[str]:
    """Verification, issues, dependencies and lessons, from the module's state folders."""
    d = mod.state_dir
    lines = ["## Verification", ""]
    lines += [f"- `.test/{p.name}`" for p in _files(d / ".test")] or ["(no test records)"]
    lines += [f"- `.analysis/{p.name}`" for p in _files(d / ".analysis")]
    lines += ["", "## Issues", ""]
    lines += [f"- `.bugfix/{p.name}`: " + _excerpt(p, 1) for p in _files(d / ".bugfix")] or [
        "(none recorded)"
    ]
    deps = meta.get("depends_on") or []
    lines += ["", "## Dependencies", ""]
    for dep in deps:
        try:
            st = taskdir.read_index(locate(mod.project, str(dep)).state_dir).meta.get("status")
        except (TaskError, taskdir.TaskDirError):
            st = "missing"
        lines.append(f"- {dep}: {st}")
    if not deps:
        lines.append("(none)")
    notes = [p for p in _files(d / ".notes") if p.stem.endswith("-exec")]
    lines += ["", "## Lessons", ""] + ([f"- `.notes/{p.name}`" for p in notes] or ["(see .summary.md)"])
    return lines


# --- cancel ------------------------------------------------------------------------------------------


def cancel(project: Path, name: str, reason: str = "user cancelled", cleanup: bool = False) -> dict:
    mod = locate(project, name)
    index = _read(mod)
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
        base = _log(mod).get("base_branch")
        if mod.workdir != mod.project:
            gitops.run(mod.project, "worktree", "remove", "--force", str(mod.workdir))
            cleaned.append("worktree")
        elif base and gitops.current_branch(mod.project) == f"task/{name}":
            gitops.run(mod.project, "checkout", "-q", base)
        if gitops.run(mod.project, "branch", "-D", f"task/{name}", check=False).returncode == 0:
            cleaned.append(f"branch task/{name}")
        _merge_state_path(mod).unlink(missing_ok=True)
    return {**res, "snapshot": snapshot, "cleaned": cleaned}


# --- status ------------------------------------------------------------------------------------------


def status(project: Path, name: str) -> dict:
    mod = locate(project, name)
    index = _read(mod)
    meta = index.meta
    allowed = [c for c in lifecycle.COMMANDS if lifecycle.allowed(meta["status"], c)]
    signal = None
    sig_path = mod.main_dir / ".auto-signal"
    if sig_path.exists():
        try:
            signal = json.loads(sig_path.read_text())
        except ValueError:
            signal = {"invalid": True}
    return {
        "module": name,
        "title": meta.get("title"),
        "status": meta["status"],
        "phase": meta.get("phase") or "",
        "completed_steps": meta.get("completed_steps", 0),
        "branch": meta.get("branch"),
        "worktree": meta.get("worktree"),
        "depends_on": meta.get("depends_on") or [],
        "blocking_dependencies": _dependency_problems(mod, index),
        "allowed_commands": allowed,
        "last_check": _log(mod).get("last_check"),
        "auto_signal": signal,
        "auto_stop": (mod.main_dir / ".auto-stop").exists(),
        "dir": str(mod.state_dir),
    }


# --- annotations ----------------------------------------------------------------------------------------

ANNOTATION_KINDS = {
    "Insert Annotations": 3,
    "Delete Annotations": 3,
    "Replace Annotations": 4,
    "Comment Annotations": 4,
}
_LINE = re.compile(r"^Line(\d+):(?:\.\.\.)?(.*)$", re.DOTALL)


def _context(text: str) -> str:
    return text.replace("↵", "\n")


def load_annotations(path: Path) -> list[tuple[str, list[str]]]:
    """The annotations in file order per kind, validated against the four-array schema."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskError(f"{path.name} not found; the annotation panel writes it") from None
    except ValueError as exc:
        raise TaskError(f"{path.name} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TaskError(f"{path.name} must hold an object with the four annotation arrays")
    out = []
    for key, value in data.items():
        if key not in ANNOTATION_KINDS:
            raise TaskError(f"{path.name}: unknown key {key!r}; expected {', '.join(ANNOTATION_KINDS)}")
        if not isinstance(value, list):
            raise TaskError(f"{path.name}: {key} must be a list of string arrays")
        for i, item in enumerate(value):
            if (
                not isinstance(item, list)
                or len(item) != ANNOTATION_KINDS[key]
                or not all(isinstance(x, str) for x in item)
            ):
                raise TaskError(f"{path.name}: {key}[{i}] must be {ANNOTATION_KINDS[key]} strings")
            if not _LINE.match(item[0]):
                raise TaskError(f"{path.name}: {key}[{i}] context must start with 'Line<N>:'")
            out.append((key, item))
    return out


def _locate(text: str, line_no: int, before: str, selected: str) -> int:
    """Offset in ``text`` where ``selected`` begins (or where an insertion goes)."""
    lines = text.split("\n")
    start_line = max(0, min(line_no - 1, len(lines) - 1))
    line_offset = sum(len(ln) + 1 for ln in lines[:start_line])
    before = before.rstrip(".") if before.endswith("...") else before
    candidates = []
    probe = before + selected
    idx = text.find(probe, max(0, line_offset - len(before) - 200))
    if probe and idx >= 0:
        candidates.append(idx + len(before))
    if selected:
        pos = text.find(selected, line_offset)
        if pos >= 0:
            candidates.append(pos)
    elif before:
        pos = text.find(before, max(0, line_offset - len(before)))
        if pos >= 0:
            candidates.append(pos + len(before))
    if not candidates:
        raise TaskError(f"could not find the annotated text near line {line_no}: {selected[:40]!r}")
    return min(candidates, key=lambda c: abs(c - line_offset))


def annotate(project: Path, name: str, plan_file: str) -> dict:
    mod = locate(project, name)
    if _read(mod).meta["status"] in lifecycle.TERMINAL:
        raise TaskError(f"TASK/{name} is {_read(mod).meta['status']}; annotations are rejected")
    target = (mod.state_dir / plan_file).resolve()
    if target.parent != mod.state_dir.resolve() or target.name.startswith(".") or target.suffix != ".md":
        raise TaskError("the plan file must be a non-dot .md file directly in the module directory")
    if not target.exists():
        raise TaskError(f"no plan file {plan_file} in TASK/{name}")
    ann_path = mod.state_dir / ".tmp-annotations.json"
    items = load_annotations(ann_path)
    text = target.read_text(encoding="utf-8")
    edits = []
    for kind, item in items:
        m = _LINE.match(item[0])
        line_no, before = int(m.group(1)), _context(m.group(2))
        if kind == "Insert Annotations":
            pos = _locate(text, line_no, before, "")
            edits.append((pos, pos, _context(item[1]), kind, line_no))
        elif kind == "Delete Annotations":
            sel = _context(item[1])
            pos = _locate(text, line_no, before, sel)
            edits.append((pos, pos + len(sel), "", kind, line_no))
        elif kind == "Replace Annotations":
            sel = _context(item[1])
            pos = _locate(text, line_no, before, sel)
            edits.append((pos, pos + len(sel), _context(item[2]), kind, line_no))
        else:
            sel = _context(item[1])
            pos = _locate(text, line_no, before, sel)
            eol = text.find("\n", pos + len(sel))
            eol = len(text) if eol < 0 else eol
            edits.append((eol, eol, f"\n> 💬 {item[2].strip()}", kind, line_no))
    # Apply from the end so earlier offsets stay valid.
    for start, end, new, _, _ in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:start] + new + text[end:]
    store.write_text(target, text)
    ann_path.unlink()
    return {
        "module": name,
        "file": plan_file,
        "applied": [{"kind": k.split()[0].lower(), "line": ln} for _, _, _, k, ln in edits],
    }
