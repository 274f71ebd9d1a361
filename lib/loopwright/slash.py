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
from .project import state_dir

COMMAND_RE = re.compile(r"^\s*/loopwright:(loop|cancel|resume|answer)(?=\s|$)(.*)\Z", re.DOTALL)
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
    except (loops.LoopError, slashargs.ArgError, store.CorruptFile) as exc:
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
