"""Starting a loop: validate the request, then create its files in an order that
is safe at every instant (active marker, lock, budget, then loop.json)."""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from . import lock as locks
from . import gates, loops, router, slashargs, store, verify
from .completion import DEFAULT_PROMISE, sentinel

MAX_PROMPT_CHARS = 100_000


@dataclass
class StartRequest:
    prompt: str
    mode: str = "prompt"
    name: str | None = None
    session: str | None = None
    max_iterations: int | None = None
    max_minutes: float | None = None
    max_tokens: int | None = None
    max_dollars: float | None = None
    max_prs: int | None = None
    completion_promise: str = DEFAULT_PROMISE
    lock_mode: str = "skip"
    gate_policy: str = "ask"
    budget_file: str | None = None
    verify: str | None = None
    verify_timeout: float | None = None
    resume: bool = False
    task_module: str | None = None  # task mode: the TASK/ module
    task_state: dict | None = None  # task mode: the first step handed over


def clean_session(value: str | None) -> str | None:
    """A session id as handed over by a slash command; None when Claude Code
    did not substitute it (the text still holds ``${``) or it is blank."""
    if not value:
        return None
    value = value.strip()
    if not value or "${" in value or "$" in value:
        return None
    return value


def validate(req: StartRequest) -> StartRequest:
    if not req.prompt.strip():
        raise loops.LoopError('no goal given: write it after the command, e.g. /loopwright:loop "make the tests pass"')
    if len(req.prompt) > MAX_PROMPT_CHARS:
        raise loops.LoopError(f"the goal is {len(req.prompt)} characters; the limit is {MAX_PROMPT_CHARS}. Put the details in a file and point to it")
    if req.mode not in loops.MODE_DEFAULTS:
        raise loops.LoopError(f"unknown mode {req.mode!r}; modes: {', '.join(loops.MODE_DEFAULTS)}")
    iters, minutes = loops.MODE_DEFAULTS[req.mode]
    if req.max_iterations is None:
        req.max_iterations = iters
    if req.max_minutes is None:
        req.max_minutes = minutes
    if req.max_dollars is None:
        req.max_dollars = loops.DEFAULT_MAX_DOLLARS
    if req.max_iterations < 1:
        raise loops.LoopError(f"--max-iterations must be 1 or more (got {req.max_iterations})")
    if req.max_minutes <= 0:
        raise loops.LoopError(f"--max-minutes must be more than 0 (got {req.max_minutes:g})")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise loops.LoopError(f"--max-tokens must be 1 or more (got {req.max_tokens})")
    if req.max_dollars < 0:
        raise loops.LoopError(f"--max-dollars must be 0 (no limit) or more (got {req.max_dollars:g})")
    if req.max_prs is None and req.mode == "work":
        req.max_prs = loops.DEFAULT_MAX_PRS
    if req.max_prs is not None and req.max_prs < 1:
        raise loops.LoopError(f"--max-prs must be 1 or more (got {req.max_prs})")
    if req.lock_mode not in ("skip", "wait", "force"):
        raise loops.LoopError(f"--lock must be skip, wait or force (got {req.lock_mode!r})")
    if req.gate_policy not in gates.POLICIES:
        raise loops.LoopError(f"--gates must be ask, continue or stop (got {req.gate_policy!r})")
    if req.verify is not None:
        req.verify = req.verify.strip()
        if not req.verify:
            raise loops.LoopError("--verify needs a command, e.g. --verify \"pytest -q\"")
    if req.verify_timeout is not None and not (0 < req.verify_timeout <= verify.MAX_TIMEOUT):
        raise loops.LoopError(f"--verify-timeout must be between 0 and {verify.MAX_TIMEOUT:g} seconds")
    if req.budget_file is not None:
        bf = Path(req.budget_file).expanduser()
        if not bf.parent.is_dir():
            raise loops.LoopError(f"--budget-file {req.budget_file}: its directory does not exist")
        if bf.exists():
            raise loops.LoopError(f"--budget-file {req.budget_file} already exists; budgets reset only with a fresh file (delete it, or use --resume)")
        req.budget_file = str(bf.absolute())
    promise = " ".join(req.completion_promise.split())
    if not promise:
        raise loops.LoopError("--completion-promise must not be empty")
    if "<" in promise or ">" in promise:
        raise loops.LoopError("--completion-promise must not contain < or >; give just the text, e.g. DONE")
    req.completion_promise = promise
    if req.name is not None:
        loops.validate_name(req.name)
    return req


def owned_active_loop(state: Path, session: str) -> str | None:
    for name in loops.active_names(state):
        try:
            cfg = loops.load_config(loops.LoopPaths(state, name))
        except store.CorruptFile:
            continue
        if cfg and cfg.get("status") == loops.ACTIVE and cfg.get("owner_session") == session:
            return name
    return None


def start(state: Path, req: StartRequest, now: float | None = None) -> tuple[loops.LoopPaths, dict]:
    req = validate(req)
    now = time.time() if now is None else now
    loops.ensure_state_dir(state)
    with loops.state_mutex(state):
        if req.session:
            held = owned_active_loop(state, req.session)
            if held:
                raise loops.LoopError(
                    f"this session already runs loop {held}; finish it, or cancel it with /loopwright:cancel, before starting another"
                )
        name = loops.allocate_name(state, req.name or req.mode)
        paths = loops.LoopPaths(state, name)
        paths.dir.mkdir(parents=True)
        stamp = locks.now_iso(now)
        loop = {
            "version": 1,
            "id": uuid.uuid4().hex,
            "name": name,
            "mode": req.mode,
            "prompt": req.prompt,
            "completion_promise": req.completion_promise,
            "max_iterations": req.max_iterations,
            "max_minutes": req.max_minutes,
            "max_tokens": req.max_tokens,
            "max_dollars": req.max_dollars,
            "max_prs": req.max_prs,
            "lock_mode": req.lock_mode,
            "gate_policy": req.gate_policy,
            "budget_file": req.budget_file,
            "verify": req.verify,
            "verify_timeout": req.verify_timeout,
            "task_module": req.task_module,
            "owner_session": req.session,
            "nonce": "lw-" + secrets.token_hex(8),
            "status": loops.ACTIVE,
            "outcome": None,
            "created_at": stamp,
            "started_at": stamp,
            "project_dir": str(state.parent),
        }
        loops.mark_active(paths)
        store.write_json(paths.lock, locks.new_lock(req.session, 1, now))
        paths.configured(loop)
        budget = router.initial_budget(loop)
        if req.task_state:
            budget["task"] = dict(req.task_state, asked_at=stamp)
        store.write_json(paths.budget, budget)
        store.write_json(paths.config, loop)
    store.append_jsonl(
        paths.journal,
        {"at": stamp, "loop": name, "session": req.session, "event": "start", "mode": req.mode,
         "max_iterations": req.max_iterations, "max_minutes": req.max_minutes},
    )
    return paths, loop


START_OPTIONS = {
    "--max-iterations": True,
    "--max-minutes": True,
    "--max-tokens": True,
    "--max-dollars": True,
    "--max-prs": True,
    "--completion-promise": True,
    "--name": True,
    "--lock": True,
    "--gates": True,
    "--budget-file": True,
    "--verify": True,
    "--verify-timeout": True,
    "--resume": False,
}


def _number(option: str, value: str, kind: type):
    try:
        return kind(value)
    except (TypeError, ValueError):
        want = "a whole number" if kind is int else "a number"
        raise loops.LoopError(f"{option} needs {want}, got {value!r}") from None


def request_from_args_text(text: str, session: str | None) -> StartRequest:
    prompt, opts = slashargs.parse(text, START_OPTIONS)
    req = StartRequest(prompt=prompt, session=session)
    if "--max-iterations" in opts:
        req.max_iterations = _number("--max-iterations", opts["--max-iterations"], int)
    if "--max-minutes" in opts:
        req.max_minutes = _number("--max-minutes", opts["--max-minutes"], float)
    if "--max-tokens" in opts:
        req.max_tokens = _number("--max-tokens", opts["--max-tokens"], int)
    if "--max-dollars" in opts:
        req.max_dollars = _number("--max-dollars", opts["--max-dollars"], float)
    if "--completion-promise" in opts:
        req.completion_promise = str(opts["--completion-promise"])
    if "--max-prs" in opts:
        req.max_prs = _number("--max-prs", opts["--max-prs"], int)
    if "--verify-timeout" in opts:
        req.verify_timeout = _number("--verify-timeout", opts["--verify-timeout"], float)
    for opt, attr in (("--name", "name"), ("--lock", "lock_mode"), ("--gates", "gate_policy"), ("--budget-file", "budget_file"),
                      ("--verify", "verify")):
        if opt in opts:
            setattr(req, attr, str(opts[opt]))
    req.resume = bool(opts.get("--resume"))
    return req


def ceilings_of(req: StartRequest) -> dict:
    """The ceilings a request names explicitly (for raising them on resume)."""
    return {k: getattr(req, k) for k in ("max_iterations", "max_minutes", "max_tokens", "max_dollars", "max_prs")
            if getattr(req, k) is not None}


def resumed_note(res) -> str:
    """What resume prints: where the loop stands now, and the goal again."""
    if res.waiting_gate:
        g = res.waiting_gate
        return (
            f"loopwright: loop \"{res.paths.name}\" is held by a live session; --lock force asks first.\n"
            f'Gate "{g["name"]}": {g["question"]}\nOptions: {", ".join(g["options"])}\n'
            "Ask the user with the AskUserQuestion tool (exactly these options), then record the answer with:\n"
            f"    loopwright gate answer {g['name']} <option>\n"
            "Only after a recorded yes does the loop belong to this session; do not work on its goal before that."
        )
    text = announcement(res.loop, verb="resumed")
    if res.notes:
        text += "\n" + "\n".join(f"Note: {n}" for n in res.notes)
    return text


def announcement(loop: dict, verb: str = "started") -> str:
    """What the start command prints: the agent reads this as part of its prompt."""
    max_minutes = loop["max_minutes"]
    dollars = f"${float(loop['max_dollars']):,.2f}" if loop.get("max_dollars") else "no dollar limit"
    lines = [
        f"loopwright: loop \"{loop['name']}\" {verb} ({loop['mode']} mode): up to {loop['max_iterations']} "
        f"iteration{'s' if loop['max_iterations'] != 1 else ''}, {max_minutes:g} minutes and {dollars}"
        + (f", {loop['max_tokens']} tokens" if loop.get("max_tokens") else "") + "."
        + ("" if loop.get("owner_session") else " (No session id was given: the first session to finish a turn with this text in view adopts the loop.)"),
        "",
        "Goal:",
        "<goal>",
        loop["prompt"],
        "</goal>",
        "",
        "Work on the goal now. After each of your turns loopwright hands you the next iteration.",
        "When the goal is fully achieved and checked, end your final message with this line, alone on its line:",
        sentinel(loop["completion_promise"]),
        "Never write it to escape the loop: a false completion claim is worse than another iteration.",
        *([f"loopwright accepts completion only when `{loop['verify']}` passes; run it yourself first."] if loop.get("verify") else []),
        "Plan larger work as tasks with `loopwright task add <text>`: the loop does not end while a task is open.",
        f"loop-nonce: {loop['nonce']}",
    ]
    return "\n".join(lines)
