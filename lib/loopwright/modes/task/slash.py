"""/loopwright:task <sub> <module> …, handled at UserPromptSubmit: the module is checked up
front; `auto` starts, stops or shows the loop the Stop hook drives. Other sub-commands
run in the agent's turn, guided by their skills."""

from __future__ import annotations

from pathlib import Path

from loopwright.actions import start as starting
from loopwright.core import slashargs
from loopwright.modes.task import automode, signals, taskdir
from loopwright.modes.task.ops.status import status as module_status
from loopwright.modes.task.ops.taskmodule import locate
from loopwright.state import loops

MODE_NAME = "task"
TASK_SUBCOMMANDS = ("init", "plan", "check", "exec", "merge", "report", "cancel", "auto")
AUTO_OPTIONS = {
    "--start": False,
    "--stop": False,
    "--status": False,
    "--max-iterations": True,
    "--max-minutes": True,
    "--max-dollars": True,
    "--max-tokens": True,
    "--gates": True,
    "--accept-project-rates": False,
    "--wrap-up": False,
    "--no-wrap-up": False,
    "--wrap-up-floor": True,
}


def command(state: Path, session: str | None, args: str, tpath: str | None = None) -> str | None:
    """/loopwright:task <sub> <module> …: validate the module up front; `auto` starts,
    stops or shows the Stop-hook-driven loop. Other sub-commands run in the agent's
    turn, guided by their skills."""
    words = args.split(None, 1)
    if not words or words[0] not in TASK_SUBCOMMANDS:
        raise loops.LoopError(f"usage: /loopwright:task <{'|'.join(TASK_SUBCOMMANDS)}> <module> [options]")
    sub, rest = words[0], (words[1] if len(words) > 1 else "")
    if sub == "auto":
        return _auto(state, session, rest, tpath)
    return _step(state.parent, sub, rest)


def _step(project: Path, sub: str, rest: str) -> str | None:
    """A sub-command the agent performs in its turn: check the module, say what the matrix allows."""
    first = rest.split(None, 1)[0] if rest.strip() else ""
    if sub == "plan" and first.endswith(".md") and "/" in first:
        first = first.split("/")[-2] if first.count("/") >= 1 else first  # annotation mode passes a file path
        first = first if taskdir.valid_name(first) else ""
    if not first:
        raise loops.LoopError(f"usage: /loopwright:task {sub} <module> …")
    mod = locate(project, first, must_exist=(sub != "init"))
    if sub == "init":
        return None
    st = module_status(project, first)
    return (
        f"loopwright: TASK/{first} is {st['status']}"
        + (f" (phase {st['phase']})" if st["phase"] else "")
        + f"; the matrix allows now: {', '.join(st['allowed_commands'])}. State files: {mod.state_dir}."
    )


def _auto(state: Path, session: str | None, rest: str, tpath: str | None) -> str:
    """auto: start, stop or show the loop the Stop hook drives."""
    text, opts = slashargs.parse(rest, AUTO_OPTIONS)
    module = text.strip()
    if not module:
        raise loops.LoopError(
            "usage: /loopwright:task auto <module> [--start|--stop|--status]"
            " [--max-iterations N] [--max-minutes N]"
        )
    mod = locate(state.parent, module)
    if opts.get("--stop"):
        mod.main_dir.mkdir(parents=True, exist_ok=True)
        signals.write_stop(mod.main_dir, "user_stop")
        return (
            f"loopwright: stop requested for the auto loop of TASK/{module}; it ends after the current step. "
            "Tell the user, and do not start another step."
        )
    running = _task_loop(state, module)
    if opts.get("--status"):
        return _auto_status(state.parent, module, running)
    if running:
        raise loops.LoopError(
            f"TASK/{module} already runs in auto loop {running['name']} "
            f"(session {running.get('owner_session')}); "
            f"stop it with /loopwright:task auto {module} --stop"
        )
    return _auto_start(state, session, mod, module, opts, tpath)


def _auto_status(project: Path, module: str, running: dict | None) -> str:
    st = module_status(project, module)
    where = (
        f"running as loop {running['name']} (owner {running.get('owner_session')})"
        if running
        else "not running"
    )
    return (
        f"loopwright: auto for TASK/{module} is {where}; task status {st['status']}, "
        f"last signal {st['auto_signal']}. Report this to the user."
    )


def _auto_start(state: Path, session: str | None, mod, module: str, opts: dict, tpath: str | None) -> str:
    """Start the auto loop at the step the module's status and phase call for."""
    index = taskdir.read_index(mod.state_dir)
    first = automode.first_step(
        index.meta["status"], index.meta.get("phase") or "", taskdir.target_has_content(mod.state_dir)
    )
    if isinstance(first, str):
        raise loops.LoopError(f"TASK/{module}: {first}")
    step, checkpoint = first
    for stale in (".auto-stop", ".auto-signal"):
        (mod.main_dir / stale).unlink(missing_ok=True)
    req = starting.StartRequest(
        prompt=f"Drive TASK/{module} through its lifecycle with the ai-cli-task auto contract.",
        mode=MODE_NAME,
        session=session,
        name="task",
        mode_config={"task_module": module},
        mode_state={"module": module, "step": step, "checkpoint": checkpoint},
        transcript_path=tpath,
    )
    starting.apply_limits(req, opts)
    _, loop = starting.start(state, req)
    n = loop["max_iterations"]
    return (
        f'loopwright: auto loop "{loop["name"]}" started for TASK/{module} (status {index.meta["status"]}):'
        f" up to {n} iteration{'s' if n != 1 else ''} and {loop['max_minutes']:g} minutes."
        " Each turn performs one step; the Stop hook reads .auto-signal and hands over the next step."
        " `.auto-stop` ends the loop between steps.\n\n" + automode.step_prompt(module, step, checkpoint, 1)
    )


def _task_loop(state, module: str) -> dict | None:
    for found in loops.scan_active(state, move_corrupt=False):
        cfg = found.config
        if cfg is not None and cfg.get("mode") == MODE_NAME and cfg.get("task_module") == module:
            return cfg
    return None
