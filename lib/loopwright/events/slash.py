"""Slash commands that take arguments, handled at UserPromptSubmit.

Claude Code pastes ``$ARGUMENTS`` unescaped into a command file's shell lines,
so loopwright never puts user text through a shell: the UserPromptSubmit hook
receives the prompt as typed, as a JSON string, and starts, cancels or resumes
the loop from it. The command file itself only tells the agent what happened.
"""

from __future__ import annotations

import os
import re

from loopwright import modes
from loopwright.actions import cancel as cancelling
from loopwright.actions import gates
from loopwright.actions import resume as resuming
from loopwright.actions import start as starting
from loopwright.core import jsoncodec, slashargs
from loopwright.core.errors import UserError
from loopwright.state import loops
from loopwright.state.project import state_dir

# /loopwright:<command>; a mode's own command is named after the mode (/loopwright:<mode>).
COMMAND_RE = re.compile(r"^\s*/loopwright:([a-z][a-z-]*)(?=\s|$)(.*)\Z", re.DOTALL)
RESUME_OPTIONS = {
    k: v
    for k, v in starting.START_OPTIONS.items()
    if k in ("--max-iterations", "--max-minutes", "--max-tokens", "--max-dollars", "--max-prs", "--lock")
}
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
        data = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("prompt"), str):
        return None
    m = COMMAND_RE.match(data["prompt"])
    if not m:
        return None
    command, args = m.group(1), m.group(2).strip()
    run = BUILT_IN.get(command)
    own = None if run is not None else modes.part(command, "slash")
    if run is None and own is None:
        return None
    call = _Call(data, args)
    try:
        if own is not None:  # a mode's own command
            text = own.command(call.state, starting.clean_session(call.session), args, call.transcript)
        else:
            text = run(call)
    except UserError as exc:
        return _refuse(str(exc))
    except OSError as exc:
        return _refuse(
            f"{exc.strerror or exc} ({exc.filename or 'state file'}); check the project directory's "
            "permissions"
        )
    return _context(text) if text is not None else None


class _Call:
    """One slash command's input: its arguments and what the hook event says of the session."""

    def __init__(self, data: dict, args: str) -> None:
        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        self.args = args
        self.session = text("session_id")
        self.transcript = text("transcript_path")
        self.state = state_dir(text("cwd"))


def _loop(call: _Call) -> str:
    req = starting.request_from_args_text(call.args, starting.clean_session(call.session))
    req.transcript_path = call.transcript
    if not req.resume:
        _, loop = starting.start(call.state, req)
        return starting.announcement(loop)
    res = resuming.resume(
        call.state,
        req.prompt.strip() or req.name,
        call.session,
        lock_mode=req.lock_mode if "--lock" in call.args else None,
        raise_to=starting.ceilings_of(req),
        max_wait=HOOK_LOCK_WAIT_SECONDS,
        transcript_path=call.transcript,
    )
    return starting.resumed_note(res)


def _resume(call: _Call) -> str:
    text, opts = slashargs.parse(call.args, RESUME_OPTIONS)
    req = starting.request_from_args_text("--resume " + call.args, None) if opts else None
    res = resuming.resume(
        call.state,
        text.strip() or None,
        call.session,
        lock_mode=opts.get("--lock"),
        raise_to=starting.ceilings_of(req) if req else {},
        max_wait=HOOK_LOCK_WAIT_SECONDS,
        transcript_path=call.transcript,
    )
    return starting.resumed_note(res)


def _answer(call: _Call) -> str:
    words = slashargs.parse(call.args, {})[0].split()
    if len(words) not in (2, 3):
        raise loops.LoopError(
            "usage: /loopwright:answer [LOOP] <gate> <option>, "
            "e.g. /loopwright:answer budget-escalation continue"
        )
    loop_name = words[0] if len(words) == 3 else None
    recorded = gates.answer_gate(call.state, loop_name, call.session, words[-2], words[-1])
    return recorded + "\nTell the user the answer was recorded; then carry on as it says."


def _cancel(call: _Call) -> str:
    name, opts = slashargs.parse(call.args, {"--reason": True})
    reason = str(opts.get("--reason") or "cancelled by the user")
    cancelled = cancelling.cancel(call.state, name.strip() or None, call.session, reason)
    return cancelled + "\nTell the user the loop was cancelled; do not continue its work."


# The commands every loop has; a mode's own command is found through modes.part().
BUILT_IN = {"loop": _loop, "resume": _resume, "answer": _answer, "cancel": _cancel}


def main_with(raw: bytes) -> int:
    try:
        answer = handle(raw)
    except Exception as exc:  # never break the user's prompt on our account
        answer = {
            "systemMessage": f"loopwright: internal error handling the command ({type(exc).__name__}: "
            f"{exc}); run `loopwright doctor`"
        }
    if answer:
        os.write(1, jsoncodec.dumps(_safe(answer)))
    return 0


def _safe(value):
    """Every string of the answer with control characters escaped: Claude Code shows them."""
    from loopwright.core.termsafe import clean

    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    return clean(value) if isinstance(value, str) else value
