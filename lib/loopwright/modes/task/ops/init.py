"""``lifecycle init``: create TASK/<name> (draft), its branch task/<name> (in this checkout
or a worktree) and the init commit, all or nothing."""

from __future__ import annotations

from pathlib import Path

from loopwright.modes.task import gitops, taskdir
from loopwright.modes.task.ops.taskmodule import Module, TaskError, commit, save_log, task_paths
from loopwright.modes.task.ops.undo import Undo
from loopwright.state import store
from loopwright.state.lock import now_iso


def init(
    project: Path, name: str, title: str = "", tags: list[str] | None = None, worktree: bool = False
) -> dict:
    """Create TASK/<name> (draft), its branch task/<name> (checked out here, or in the
    worktree .worktrees/task-<name>), and the init commit. All or nothing: when any step
    fails, everything init made is taken back and the error says what to fix."""
    project = Path(project).absolute()
    main, base = _init_preflight(project, name)
    undo = Undo()
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


def _init_branch(project: Path, name: str, base: str, worktree: bool, undo: Undo) -> Path:
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
    undo: Undo,
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
    save_log(
        mod,
        {
            "base_branch": base,
            "created": now_iso(),
            "history": [{"at": now_iso(), "command": "init", "to": "draft"}],
        },
    )
    taskdir.ensure_gitignore(workdir)
    taskdir.update_root_index(workdir)
    paths = task_paths(mod)
    rel = [str(p.relative_to(workdir)) for p in paths]
    undo.add("the staged files", lambda: gitops.run(workdir, "reset", "-q", "--", *rel))
    return mdir, commit(mod, "init", "initialize task module", paths)


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
