"""`loopwright task`: the loop's work list (the task registry)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from loopwright.actions import pick
from loopwright.cli.base import Ctx, echo, echo_json, emit, env_session
from loopwright.core.errors import UserError
from loopwright.state import loops
from loopwright.state.project import STATE_DIRNAME


def _task_file(obj: Ctx, loop_name: str | None, project_arg: str | None = None) -> Path:
    from loopwright.state import tasks as taskreg
    from loopwright.state.project import project_config

    state = obj.state if not project_arg else Path(project_arg).absolute() / STATE_DIRNAME
    project = state.parent
    config, problem = project_config(project)
    if problem:
        echo(f"loopwright: {problem}", err=True)
    loop_dir = None
    session = env_session()
    if loop_name:
        loop_dir = pick.pick_loop(state, loop_name, None, active_only=False).dir
    elif session:
        try:
            loop_dir = pick.pick_loop(state, None, session, own_only=True).dir
        except loops.LoopError:
            loop_dir = None  # this session runs no loop: the project's own registry
    loop = _loop_config(loop_dir) if loop_dir is not None else None
    try:
        if loop is None:
            return taskreg.tasks_path(project, state, loop_dir, config)
        # As the loop decided at start: its own file, or (for a work loop grinding the project's
        # backlog) the project's registry. A file loopwright did not write is only read by the loop.
        project_tasks = _project_tasks(loop)
        own, foreign = taskreg.loop_files(loop, project, state, loop_dir, project_tasks, config)
        return own if own is not None else taskreg.foreign_file(project, foreign)
    except taskreg.RegistryError as exc:
        raise loops.LoopError(str(exc)) from None


def _loop_config(loop_dir: Path) -> dict | None:
    paths = loops.LoopPaths(loop_dir.parent.parent, loop_dir.name)
    try:
        loop = loops.load_config(paths, move_corrupt=False)
        if loop is not None:
            _project_tasks(loop)  # a mode this version lacks, or a bad key of the mode's
        return loop
    except (UserError, ValueError, OSError):
        return None  # the loop's own trouble is reported where it is used


def _project_tasks(loop: dict) -> bool:
    from loopwright import modes

    return bool(modes.for_loop(loop).project_tasks)


@click.group()
def task() -> None:
    """Tasks: the loop's work list. A loop cannot finish while a task is open.

    Inside a loop the tasks belong to that loop; elsewhere to the project. The file is
    $LOOPWRIGHT_TASKS_FILE (absolute) if set; else, outside a loop, `tasks_file` in
    .loopwright.json (a loop only reads that file, as information from the project).
    """


@task.command("add")
@click.argument("text", nargs=-1, required=True)
@click.option("--depends-on", multiple=True, metavar="ID", help="A task that must be done first; repeatable.")
@click.option("--source", default="manual", show_default=True, help="Where the task came from.")
@click.option("--loop", "loop_name", help="The loop whose tasks to change (default: this session's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def task_add(obj: Ctx, text, depends_on, source, loop_name, as_json) -> None:
    """Add an open task described by TEXT; prints its id."""
    from loopwright.state import tasks as taskreg

    path = _task_file(obj, loop_name)
    own_registry = os.path.abspath(path) == os.path.abspath(obj.state / "tasks.jsonl")  # marked when made
    entry = taskreg.add(path, " ".join(text), source, list(depends_on), mark_new=own_registry)
    emit(as_json, entry, entry["id"])


@task.command("complete")
@click.argument("task_id", metavar="ID")
@click.option("--loop", "loop_name", help="The loop whose tasks to change (default: this session's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def task_complete(obj: Ctx, task_id, loop_name, as_json) -> None:
    """Mark task ID done (a task already done stays as it is)."""
    from loopwright.state import tasks as taskreg

    entry, changed = taskreg.complete(_task_file(obj, loop_name), task_id)
    emit(
        as_json,
        {"task": entry, "changed": changed},
        f"{task_id} done" if changed else f"{task_id} was already done; nothing changed",
    )


@task.command("update")
@click.argument("task_id", metavar="ID")
@click.argument("text", nargs=-1, required=True)
@click.option("--loop", "loop_name", help="The loop whose tasks to change (default: this session's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def task_update(obj: Ctx, task_id, text, loop_name, as_json) -> None:
    """Replace task ID's description with TEXT (its status is kept)."""
    from loopwright.state import tasks as taskreg

    entry = taskreg.update(_task_file(obj, loop_name), task_id, " ".join(text))
    emit(as_json, entry, f"{task_id} updated")


@task.command("remove")
@click.argument("task_id", metavar="ID")
@click.argument("reason", nargs=-1)
@click.option("--loop", "loop_name", help="The loop whose tasks to change (default: this session's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def task_remove(obj: Ctx, task_id, reason, loop_name, as_json) -> None:
    """Remove task ID for good (REASON defaults to "manual")."""
    from loopwright.state import tasks as taskreg

    entry = taskreg.remove(_task_file(obj, loop_name), task_id, " ".join(reason) or "manual")
    emit(as_json, entry, f"{task_id} removed ({entry['reason']})")


@task.command("list")
@click.argument("project_dir", required=False, type=click.Path(file_okay=False))
@click.option("--loop", "loop_name", help="The loop whose tasks to show (default: this session's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def task_list(obj: Ctx, project_dir, loop_name, as_json) -> None:
    """All tasks, grouped by status: open oldest first, done most recent first (of the project
    in PROJECT_DIR when given)."""
    from loopwright.state import tasks as taskreg

    path = _task_file(obj, loop_name, project_dir)
    reg = taskreg.load(path)
    for p in reg.problems:
        echo(f"loopwright: {p}", err=True)
    if as_json:
        echo_json({"file": str(path), "open": reg.open, "done": reg.done, "problems": reg.problems})
        return
    if not reg.total:
        echo(f"No tasks ({path}).")
        return
    echo(taskreg.render(reg, budget_chars=10**12))
    echo(taskreg.pressure_line(reg))


COMMANDS = (task,)
