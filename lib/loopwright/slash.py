"""Slash commands that take arguments, handled at UserPromptSubmit.

Claude Code pastes ``$ARGUMENTS`` unescaped into a command file's shell lines,
so loopwright never puts user text through a shell: the UserPromptSubmit hook
receives the prompt as typed, as a JSON string, and starts, cancels or resumes
the loop from it. The command file itself only tells the agent what happened.
"""

from __future__ import annotations

import os
import re

import orjson

from . import control, loops, slashargs, store
from . import start as starting
from .errors import UserError
from .project import state_dir

COMMAND_RE = re.compile(r"^\s*/loopwright:(loop|cancel|resume|answer|task)(?=\s|$)(.*)\Z", re.DOTALL)
TASK_SUBCOMMANDS = ("init", "plan", "check", "exec", "merge", "report", "cancel", "auto")
AUTO_OPTIONS = {"--start": False, "--stop": False, "--status": False, "--max-iterations": True, "--max-minutes": True,
                "--max-dollars": True, "--max-tokens": True, "--gates": True}
RESUME_OPTIONS = {k: v for k, v in starting.START_OPTIONS.items() if k in (
    "--max-iterations", "--max-minutes", "--max-tokens", "--max-dollars", "--max-prs", "--lock")}
# A hook may not wait long: --lock wait from a slash command waits this long, then says so.
HOOK_LOCK_WAIT_SECONDS = 40.0


def _context(text: str) -> dict:
    return {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": text}}


def _refuse(message: str) -> dict:
    # Blocking erases the prompt and shows the reason: no model turn is spent on a
    # command that could not run.
    return {"decision": "block", "reason": f"loopwright: error: {message}"}


def handle(raw: bytes) -> dict | None:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("prompt"), str):
        return None
    m = COMMAND_RE.match(data["prompt"])
    if not m:
        return None
    command, args = m.group(1), m.group(2)
    session = data.get("session_id") if isinstance(data.get("session_id"), str) else None
    cwd = data.get("cwd") if isinstance(data.get("cwd"), str) else None
    state = state_dir(cwd)
    try:
        if command == "loop":
            req = starting.request_from_args_text(args.strip(), starting.clean_session(session))
            if req.resume:
                res = control.resume(state, req.prompt.strip() or req.name, session, lock_mode=req.lock_mode if "--lock" in args else None,
                                     raise_to=starting.ceilings_of(req), max_wait=HOOK_LOCK_WAIT_SECONDS)
                return _context(starting.resumed_note(res))
            _, loop = starting.start(state, req)
            return _context(starting.announcement(loop))
        if command == "resume":
            text, opts = slashargs.parse(args.strip(), RESUME_OPTIONS)
            req = starting.request_from_args_text("--resume " + args.strip(), None) if opts else None
            res = control.resume(state, text.strip() or None, session, lock_mode=opts.get("--lock"),
                                 raise_to=starting.ceilings_of(req) if req else {}, max_wait=HOOK_LOCK_WAIT_SECONDS)
            return _context(starting.resumed_note(res))
        if command == "task":
            return _task_command(state, session, args.strip())
        if command == "answer":
            words = slashargs.parse(args.strip(), {})[0].split()
            if len(words) not in (2, 3):
                raise loops.LoopError("usage: /loopwright:answer [LOOP] <gate> <option>, e.g. /loopwright:answer budget-escalation continue")
            loop_name = words[0] if len(words) == 3 else None
            return _context(control.answer_gate(state, loop_name, session, words[-2], words[-1])
                            + "\nTell the user the answer was recorded; then carry on as it says.")
        name, opts = slashargs.parse(args.strip(), {"--reason": True})
        reason = str(opts.get("--reason") or "cancelled by the user")
        return _context(control.cancel(state, name.strip() or None, session, reason)
                        + "\nTell the user the loop was cancelled; do not continue its work.")
    except UserError as exc:
        return _refuse(str(exc))
    except OSError as exc:
        return _refuse(f"{exc.strerror or exc} ({exc.filename or 'state file'}); check the project directory's permissions")


def main_with(raw: bytes) -> int:
    try:
        answer = handle(raw)
    except Exception as exc:  # never break the user's prompt on our account
        answer = {"systemMessage": f"loopwright: internal error handling the command ({type(exc).__name__}: {exc}); run `loopwright doctor`"}
    if answer:
        os.write(1, orjson.dumps(answer))
    return 0


def _task_command(state, session: str | None, args: str) -> dict | None:
    """/loopwright:task <sub> <module> …: validate the module up front; `auto` starts,
    stops or shows the Stop-hook-driven loop. Other sub-commands run in the agent's
    turn, guided by their skills."""
    from . import automode, signals, taskdir, taskops

    words = args.split(None, 1)
    if not words or words[0] not in TASK_SUBCOMMANDS:
        raise loops.LoopError(f"usage: /loopwright:task <{'|'.join(TASK_SUBCOMMANDS)}> <module> [options]")
    sub, rest = words[0], (words[1] if len(words) > 1 else "")
    project = state.parent
    if sub != "auto":
        first = rest.split(None, 1)[0] if rest.strip() else ""
        if sub == "plan" and first.endswith(".md") and "/" in first:
            first = first.split("/")[-2] if first.count("/") >= 1 else first  # annotation mode passes a file path
            first = first if taskdir.valid_name(first) else ""
        if not first:
            raise loops.LoopError(f"usage: /loopwright:task {sub} <module> …")
        mod = taskops.locate(project, first, must_exist=(sub != "init"))
        if sub == "init":
            return None
        st = taskops.status(project, first)
        return _context(f"loopwright: TASK/{first} is {st['status']}" + (f" (phase {st['phase']})" if st["phase"] else "")
                        + f"; the matrix allows now: {', '.join(st['allowed_commands'])}. State files: {mod.state_dir}.")
    text, opts = slashargs.parse(rest, AUTO_OPTIONS)
    module = text.strip()
    if not module:
        raise loops.LoopError("usage: /loopwright:task auto <module> [--start|--stop|--status] [--max-iterations N] [--max-minutes N]")
    mod = taskops.locate(project, module)
    if opts.get("--stop"):
        mod.main_dir.mkdir(parents=True, exist_ok=True)
        signals.write_stop(mod.main_dir, "user_stop")
        return _context(f"loopwright: stop requested for the auto loop of TASK/{module}; it ends after the current step. "
                        "Tell the user, and do not start another step.")
    running = _task_loop(state, module)
    if opts.get("--status"):
        st = taskops.status(project, module)
        where = f"running as loop {running['name']} (owner {running.get('owner_session')})" if running else "not running"
        return _context(f"loopwright: auto for TASK/{module} is {where}; task status {st['status']}, last signal {st['auto_signal']}. "
                        "Report this to the user.")
    if running:
        raise loops.LoopError(f"TASK/{module} already runs in auto loop {running['name']} (session {running.get('owner_session')}); "
                              f"stop it with /loopwright:task auto {module} --stop")
    index = taskdir.read_index(mod.state_dir)
    first = automode.first_step(index.meta["status"], index.meta.get("phase") or "", taskdir.target_has_content(mod.state_dir))
    if isinstance(first, str):
        raise loops.LoopError(f"TASK/{module}: {first}")
    step, checkpoint = first
    for stale in (".auto-stop", ".auto-signal"):
        (mod.main_dir / stale).unlink(missing_ok=True)
    req = starting.StartRequest(prompt=f"Drive TASK/{module} through its lifecycle with the ai-cli-task auto contract.",
                                mode="task", session=starting.clean_session(session), name="task",
                                task_module=module, task_state={"module": module, "step": step, "checkpoint": checkpoint})
    for opt, attr, kind in (("--max-iterations", "max_iterations", int), ("--max-minutes", "max_minutes", float),
                            ("--max-dollars", "max_dollars", float), ("--max-tokens", "max_tokens", int)):
        if opt in opts:
            setattr(req, attr, starting._number(opt, opts[opt], kind))
    if "--gates" in opts:
        req.gate_policy = str(opts["--gates"])
    _, loop = starting.start(state, req)
    body = automode.step_prompt(module, step, checkpoint, 1)
    return _context(
        f"loopwright: auto loop \"{loop['name']}\" started for TASK/{module} (status {index.meta['status']}): up to "
        f"{loop['max_iterations']} iteration{'s' if loop['max_iterations'] != 1 else ''} and {loop['max_minutes']:g} minutes. Each turn performs one step; the Stop hook "
        "reads .auto-signal and hands over the next step. `.auto-stop` ends the loop between steps.\n\n" + body
    )


def _task_loop(state, module: str) -> dict | None:
    for name in loops.active_names(state):
        try:
            cfg = loops.load_config(loops.LoopPaths(state, name))
        except store.CorruptFile:
            continue
        if cfg and cfg.get("status") == loops.ACTIVE and cfg.get("mode") == "task" and cfg.get("task_module") == module:
            return cfg
    return None
