"""A task module located: where it lives (main checkout, state directory, working tree),
its ``.index.md`` and ``.lifecycle.json`` log, its dependencies and its state commits.
Every task verb (init, transition, merge, report, …) starts from here."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from loopwright.core.errors import UserError
from loopwright.modes.task import gitops, taskdir
from loopwright.state import store


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


def read_log(mod: Module) -> dict:
    path = mod.state_dir / ".lifecycle.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("history", [])
    return data


def save_log(mod: Module, data: dict) -> None:
    store.write_json(mod.state_dir / ".lifecycle.json", data)


def index_of(mod: Module) -> taskdir.Index:
    try:
        return taskdir.read_index(mod.state_dir)
    except taskdir.TaskDirError as exc:
        raise TaskError(str(exc)) from None


def dependency_problems(mod: Module, index: taskdir.Index) -> list[str]:
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


def commit(mod: Module, kind: str, description: str, paths: list[Path] | None = None) -> str | None:
    if not gitops.is_repo(mod.workdir):
        return None
    rel = None if paths is None else [str(p.relative_to(mod.workdir)) for p in paths]
    return gitops.commit_paths(mod.workdir, mod.name, kind, description, rel)


def task_paths(mod: Module) -> list[Path]:
    root = mod.workdir / taskdir.TASK_ROOT
    out = [mod.state_dir, root / ".index.md"]
    gi = mod.workdir / ".gitignore"
    if gi.exists():
        out.append(gi)
    return out
