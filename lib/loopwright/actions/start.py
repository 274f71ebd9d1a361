"""Starting a loop: validate the request, then create its files in an order that
is safe at every instant (active marker, lock, budget, then loop.json)."""

from __future__ import annotations

import os
import secrets
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from loopwright import modes
from loopwright.core import gates, judge, router, slashargs
from loopwright.core.completion import DEFAULT_PROMISE
from loopwright.core.errors import UnsafePath
from loopwright.state import journal, loops, store, transcript, verify
from loopwright.state import lock as locks
from loopwright.state import tasks as taskreg
from loopwright.state.project import contained

MAX_PROMPT_CHARS = 100_000
MAX_WRAP_UP_FLOOR = 0.5  # more would end a loop at half its budget before a mean is known


@dataclass
class StartRequest:
    prompt: str
    mode: str = modes.DEFAULT
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
    accept_project_rates: bool = False  # count CLAUDE.md rates below the built-in ones
    wrap_up: bool = True  # one last turn for a handoff when a budget runs out (core/wrapup.py)
    wrap_up_floor: float | None = None  # share of the dollar/token ceilings kept before a mean is known
    judge: bool = False  # a small model judges completion claims the checks let through (core/judge.py)
    judge_model: str | None = None
    judge_timeout: float | None = None
    mode_config: dict = field(default_factory=dict)  # the mode's own loop.json keys (its config_fields)
    mode_state: dict | None = None  # what the mode's begin() starts from
    transcript_path: str | None = (
        None  # the session's transcript, when known: reading starts where the loop does
    )


def clean_session(value: str | None) -> str | None:
    """A session id as handed over by a slash command; None when Claude Code
    did not substitute it (the text still holds ``${``) or it is blank."""
    if not value:
        return None
    value = value.strip()
    if not value or "${" in value or "$" in value:
        return None
    return value


def validate(req: StartRequest, project: Path | None = None) -> StartRequest:
    if not req.prompt.strip():
        raise loops.LoopError(
            'no goal given: write it after the command, e.g. /loopwright:loop "make the tests pass"'
        )
    if len(req.prompt) > MAX_PROMPT_CHARS:
        raise loops.LoopError(
            f"the goal is {len(req.prompt)} characters; the limit is {MAX_PROMPT_CHARS}. Put the details in "
            "a file and point to it"
        )
    _fill_limits(req)
    _check_limits(req)
    _check_verify(req)
    _check_judge(req, project)
    if req.budget_file is not None and project is not None:
        req.budget_file = _contained_budget_file(project, req.budget_file)
    promise = " ".join(req.completion_promise.split())
    if not promise:
        raise loops.LoopError("--completion-promise must not be empty")
    if "<" in promise or ">" in promise:
        raise loops.LoopError("--completion-promise must not contain < or >; give just the text, e.g. DONE")
    req.completion_promise = promise
    if req.name is not None:
        loops.validate_name(req.name)
    return req


def _fill_limits(req: StartRequest) -> None:
    """Limits not given take the mode's defaults, then loopwright's."""
    defaults = modes.get(req.mode).defaults
    if req.max_iterations is None:
        req.max_iterations = defaults.get("max_iterations", loops.DEFAULT_MAX_ITERATIONS)
    if req.max_minutes is None:
        req.max_minutes = defaults.get("max_minutes", loops.DEFAULT_MAX_MINUTES)
    if req.max_prs is None:
        req.max_prs = defaults.get("max_prs")
    if req.max_dollars is None:
        req.max_dollars = loops.DEFAULT_MAX_DOLLARS


def _check_limits(req: StartRequest) -> None:
    if req.max_iterations < 1:
        raise loops.LoopError(f"--max-iterations must be 1 or more (got {req.max_iterations})")
    if req.max_minutes <= 0:
        raise loops.LoopError(f"--max-minutes must be more than 0 (got {req.max_minutes:g})")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise loops.LoopError(f"--max-tokens must be 1 or more (got {req.max_tokens})")
    if req.max_dollars < 0:
        raise loops.LoopError(f"--max-dollars must be 0 (no limit) or more (got {req.max_dollars:g})")
    if req.max_prs is not None and req.max_prs < 1:
        raise loops.LoopError(f"--max-prs must be 1 or more (got {req.max_prs})")
    if req.lock_mode not in ("skip", "wait", "force"):
        raise loops.LoopError(f"--lock must be skip, wait or force (got {req.lock_mode!r})")
    if req.wrap_up_floor is not None and not (0 <= req.wrap_up_floor <= MAX_WRAP_UP_FLOOR):
        raise loops.LoopError(
            f"--wrap-up-floor must be between 0 and {MAX_WRAP_UP_FLOOR:g} (a share of the ceiling; "
            f"got {req.wrap_up_floor:g})"
        )
    if req.gate_policy not in gates.POLICIES:
        raise loops.LoopError(f"--gates must be ask, continue or stop (got {req.gate_policy!r})")


def _check_verify(req: StartRequest) -> None:
    if req.verify is not None:
        req.verify = req.verify.strip()
        if not req.verify:
            raise loops.LoopError('--verify needs a command, e.g. --verify "pytest -q"')
    if req.verify_timeout is not None and not (0 < req.verify_timeout <= verify.MAX_TIMEOUT):
        raise loops.LoopError(f"--verify-timeout must be between 0 and {verify.MAX_TIMEOUT:g} seconds")


def _check_judge(req: StartRequest, project: Path | None) -> None:
    """The judge's model and time bound, and that its client can be found (state/judging.py)."""
    if not req.judge:
        if req.judge_model is not None or req.judge_timeout is not None:
            raise loops.LoopError("--judge-model and --judge-timeout go with --judge")
        return
    req.judge_model = (req.judge_model or judge.DEFAULT_MODEL).strip()
    if not judge.valid_model(req.judge_model):
        raise loops.LoopError(
            f"--judge-model {req.judge_model!r} is not a model name (e.g. {judge.DEFAULT_MODEL}, or haiku)"
        )
    if req.judge_timeout is not None and not (1 <= req.judge_timeout <= judge.MAX_TIMEOUT):
        raise loops.LoopError(f"--judge-timeout must be between 1 and {judge.MAX_TIMEOUT:g} seconds")
    if project is not None:
        from loopwright.state import judging

        client, why = judging.find_client(project)
        if client is None:
            raise loops.LoopError(f"--judge: {why}")


def _contained_budget_file(project: Path, budget_file: str) -> str:
    """The budget file as a path relative to the project; it must be new and inside it."""
    try:
        bf = contained(project, budget_file, "--budget-file")
    except UnsafePath as exc:
        raise loops.LoopError(str(exc)) from None
    if not bf.parent.is_dir():
        raise loops.LoopError(f"--budget-file {budget_file}: its directory does not exist")
    if os.path.lexists(bf):
        raise loops.LoopError(
            f"--budget-file {budget_file} already exists; budgets reset only with a fresh file "
            "(delete it, or use --resume)"
        )
    return str(bf.relative_to(os.path.realpath(project)))


def owned_active_loop(state: Path, session: str) -> str | None:
    for found in loops.scan_active(state, move_corrupt=False):
        if found.config is not None and found.config.get("owner_session") == session:
            return found.paths.name
    return None


def start(state: Path, req: StartRequest, now: float | None = None) -> tuple[loops.LoopPaths, dict]:
    req = validate(req, state.parent)
    now = time.time() if now is None else now
    loops.ensure_state_dir(state)
    with loops.state_mutex(state):
        if req.session:
            held = owned_active_loop(state, req.session)
            if held:
                raise loops.LoopError(
                    f"this session already runs loop {held}; finish it, or cancel it with "
                    "/loopwright:cancel, before starting another"
                )
        name = loops.allocate_name(state, req.name or req.mode)
        paths = loops.LoopPaths(state, name)
        paths.dir.mkdir(mode=0o700)  # private: nobody else may change a loop's files
        stamp = locks.now_iso(now)
        loop = _new_loop(req, name, stamp, str(state.parent))
        if req.accept_project_rates:
            loop["accepted_rates"] = accepted_rates(loop["project_dir"])
        mode = modes.get(req.mode)
        loop["tasks_source"] = taskreg.start_source(state.parent, state, mode.project_tasks)
        loop.update({k: req.mode_config.get(k) for k in mode.config_fields})
        mode_state = mode.begin(dict(req.mode_config, mode_state=req.mode_state), loop["project_dir"], stamp)
        loops.mark_active(paths)
        if req.session:  # a loop nobody owns yet holds no lock: whoever attaches it takes one
            store.write_json(paths.lock, locks.new_lock(req.session, 1, now))
        paths.configured(loop)
        budget = router.initial_budget(loop)
        budget["mode_state"] = mode_state
        budget["cursor"] = start_cursor(req.transcript_path)
        store.write_json(paths.budget, budget)
        store.write_bytes_atomic(paths.history, b"")  # from now on, a missing history stops the loop
        loops.save_config(paths, loop)
    journal.write(
        paths,
        {
            "event": "start",
            "mode": req.mode,
            "max_iterations": req.max_iterations,
            "max_minutes": req.max_minutes,
        },
        session=req.session,
        now=now,
    )
    return paths, loop


def _new_loop(req: StartRequest, name: str, stamp: str, project_dir: str) -> dict:
    """loop.json of a new loop, before its mode adds its own fields."""
    return {
        "version": 1,
        "id": uuid.uuid4().hex,
        "loop_id": secrets.token_hex(16),
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
        "wrap_up": req.wrap_up,
        "wrap_up_floor": req.wrap_up_floor,
        "judge": req.judge,
        "judge_model": req.judge_model if req.judge else None,
        "judge_timeout": req.judge_timeout,
        "owner_session": req.session,
        "nonce": "lw-" + secrets.token_hex(8),
        "status": loops.ACTIVE,
        "outcome": None,
        "created_at": stamp,
        "started_at": stamp,
        "project_dir": project_dir,
    }


def start_cursor(transcript_path: str | None) -> dict:
    """Where the first Stop starts reading the transcript: its size now, so the first
    tick costs what any tick costs however long the session already is."""
    size = transcript.regular_size(transcript_path) if transcript_path else None
    if size is None:
        return {}
    return transcript.Cursor(path=transcript_path, offset=size).to_dict()


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
    "--accept-project-rates": False,
    "--wrap-up": False,
    "--no-wrap-up": False,
    "--wrap-up-floor": True,
    "--judge": False,
    "--judge-model": True,
    "--judge-timeout": True,
}


def _number(option: str, value: str, kind: type):
    try:
        return kind(value)
    except (TypeError, ValueError):
        want = "a whole number" if kind is int else "a number"
        raise loops.LoopError(f"{option} needs {want}, got {value!r}") from None


LIMIT_OPTIONS = (
    ("--max-iterations", "max_iterations", int),
    ("--max-minutes", "max_minutes", float),
    ("--max-tokens", "max_tokens", int),
    ("--max-dollars", "max_dollars", float),
    ("--max-prs", "max_prs", int),
)


def apply_limits(req: StartRequest, opts: dict) -> None:
    """The ceilings, gate policy and lock mode a slash command's options name (any mode's)."""
    for opt, attr, kind in LIMIT_OPTIONS:
        if opt in opts:
            setattr(req, attr, _number(opt, opts[opt], kind))
    if "--gates" in opts:
        req.gate_policy = str(opts["--gates"])
    if "--lock" in opts:
        req.lock_mode = str(opts["--lock"])
    if opts.get("--accept-project-rates"):
        req.accept_project_rates = True
    if opts.get("--no-wrap-up"):
        req.wrap_up = False
    elif opts.get("--wrap-up"):
        req.wrap_up = True
    if "--wrap-up-floor" in opts:
        req.wrap_up_floor = _number("--wrap-up-floor", opts["--wrap-up-floor"], float)
    if opts.get("--judge"):
        req.judge = True
    if "--judge-model" in opts:
        req.judge_model = str(opts["--judge-model"])
    if "--judge-timeout" in opts:
        req.judge_timeout = _number("--judge-timeout", opts["--judge-timeout"], float)


def accepted_rates(project_dir: str) -> dict:
    """The project's CLAUDE.md rows below the built-in rates, as the user confirms them
    with --accept-project-rates: these rows, as they are now, count (core/rates.py)."""
    from loopwright.core import rates
    from loopwright.state import claudemd

    rules = claudemd.load(claudemd.Path(project_dir))
    return {key: rules.rates[key] for key in rates.lowered(rules.rates)}


def project_notes(loop: dict) -> list[str]:
    """What the project's CLAUDE.md changes for this loop, for the start and resume text:
    its rates below the built-in ones (and whether they count), and its problems."""
    from loopwright.state import claudemd

    rules = claudemd.load(claudemd.Path(loop["project_dir"]))
    lowered = claudemd.lowered_rates(rules, loop.get("accepted_rates"))
    name = rules.path.name if rules.path is not None else "CLAUDE.md"
    return [*claudemd.lowered_lines(lowered, name), *rules.problems]


def request_from_args_text(text: str, session: str | None) -> StartRequest:
    prompt, opts = slashargs.parse(text, START_OPTIONS)
    req = StartRequest(prompt=prompt, session=session)
    apply_limits(req, opts)
    if "--completion-promise" in opts:
        req.completion_promise = str(opts["--completion-promise"])
    if "--verify-timeout" in opts:
        req.verify_timeout = _number("--verify-timeout", opts["--verify-timeout"], float)
    for opt, attr in (
        ("--name", "name"),
        ("--budget-file", "budget_file"),
        ("--verify", "verify"),
    ):
        if opt in opts:
            setattr(req, attr, str(opts[opt]))
    req.resume = bool(opts.get("--resume"))
    return req


def ceilings_of(req: StartRequest) -> dict:
    """The ceilings a request names explicitly (for raising them on resume)."""
    return {
        k: getattr(req, k)
        for k in ("max_iterations", "max_minutes", "max_tokens", "max_dollars", "max_prs")
        if getattr(req, k) is not None
    }


def resumed_note(res) -> str:
    """What resume prints: where the loop stands now, and the goal again."""
    if res.waiting_gate:
        g = res.waiting_gate
        return (
            f'loopwright: loop "{res.paths.name}" is held by a live session; --lock force asks first.\n'
            f'Gate "{g["name"]}": {g["question"]}\nOptions: {", ".join(g["options"])}\n'
            "Ask the user with the AskUserQuestion tool (exactly these options), then record the answer "
            "with:\n"
            f"    loopwright gate answer {g['name']} <option>\n"
            "Only after a recorded yes does the loop belong to this session; do not work on its goal before "
            "that."
        )
    text = announcement(res.loop, verb="resumed")
    if res.notes:
        text += "\n" + "\n".join(f"Note: {n}" for n in res.notes)
    return _handoff_section(res.paths) + text


def _handoff_section(paths: loops.LoopPaths) -> str:
    """The handoff the last run's wrap-up turn wrote (core/wrapup.py), to open the resumed loop with."""
    from loopwright.state import handoff

    text = handoff.read(paths)
    if text is None:
        return ""
    return (
        f"Handoff from the last run of this loop (written in its wrap-up turn; {paths.handoff}):\n\n"
        f"{text}\n\n---\n\n"
    )


def announcement(loop: dict, verb: str = "started", state: dict | None = None) -> str:
    """What the start command prints: the agent reads this as part of its prompt."""
    max_minutes = loop["max_minutes"]
    dollars = f"${float(loop['max_dollars']):,.2f}" if loop.get("max_dollars") else "no dollar limit"
    lines = [
        f'loopwright: loop "{loop["name"]}" {verb} ({loop["mode"]} mode): up to {loop["max_iterations"]} '
        f"iteration{'s' if loop['max_iterations'] != 1 else ''}, {max_minutes:g} minutes and {dollars}"
        + (f", {loop['max_tokens']} tokens" if loop.get("max_tokens") else "")
        + "."
        + (
            ""
            if loop.get("owner_session")
            else " No session owns it yet: it waits until you attach it from the Claude Code session of "
            f"your choice with /loopwright:resume {loop['name']} "
            f"(or `loopwright resume {loop['name']} --session ID`)."
        ),
        *(f"Note: {n}" for n in project_notes(loop)),
        *_tasks_line(loop),
        *_judge_line(loop),
        "",
        modes.get(loop["mode"]).first_prompt(loop, state),
        f"loop-nonce: {loop['nonce']}",
    ]
    return "\n".join(lines)


def _judge_line(loop: dict) -> list[str]:
    if not judge.enabled(loop):
        return []
    return [
        f"Completion judge: {judge.model_of(loop)} (no tools) reads the goal, your final message, the "
        "check's output and what changed, when you claim completion; a claim it does not accept comes "
        "back with its reason."
    ]


def _tasks_line(loop: dict) -> list[str]:
    """Where the loop's tasks come from, when not from its own file (state/tasks.py)."""
    from loopwright.state.tasksource import describe_source

    line = describe_source(loop.get("tasks_source"), modes.get(loop["mode"]).project_tasks)
    return [line] if line else []
