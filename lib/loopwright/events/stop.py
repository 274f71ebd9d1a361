"""The Stop hook's shell around the router: read, decide, persist, answer.

Everything that touches files, locks, processes or Claude Code's JSON is here;
the decision itself is ``router.decide``. Any failure ends in "let the session
stop" plus one line for the user: the hook never crashes a session and never
blocks on input it does not understand.
"""

from __future__ import annotations

import os
import sys
import time

from loopwright import modes
from loopwright.core import jsoncodec, rates, router, schema
from loopwright.core.errors import UnsafePath
from loopwright.events.entry import MAX_STDIN_BYTES
from loopwright.state import claudemd, journal, loops, store, transcript, verify
from loopwright.state import lock as locks
from loopwright.state import tasks as taskreg
from loopwright.state.fspath import Path
from loopwright.state.project import project_config, state_dir
from loopwright.tick import commit


class HookInput:
    """The fields of the Stop hook's stdin that loopwright uses, validated."""

    def __init__(self, data: dict):
        sid = data.get("session_id")
        if not isinstance(sid, str) or not sid.strip():
            raise ValueError("stdin has no session_id")
        self.session_id = sid
        tp = data.get("transcript_path")
        self.transcript_path = tp if isinstance(tp, str) and tp else None
        cwd = data.get("cwd")
        self.cwd = cwd if isinstance(cwd, str) and cwd else None
        self.stop_hook_active = data.get("stop_hook_active") is True
        msg = data.get("last_assistant_message")
        self.last_message = msg if isinstance(msg, str) else None
        self.raw = b""  # the event as received: a deferred final tick hands it on


def parse_stdin(raw: bytes) -> HookInput:
    if not raw.strip():
        raise ValueError("stdin is empty")
    if len(raw) > MAX_STDIN_BYTES:
        raise ValueError(f"stdin is larger than {MAX_STDIN_BYTES // (1024 * 1024)} MiB")
    try:
        data = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        raise ValueError("stdin is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("stdin is not a JSON object")
    hook = HookInput(data)
    hook.raw = raw
    return hook


def debug(state: Path | None, message: str) -> None:
    if os.environ.get("LOOPWRIGHT_DEBUG") != "1" or state is None:
        return
    try:
        loops.ensure_ignored(state)
        store.append_text(state / "debug.log", f"{locks.now_iso()} pid={os.getpid()} {message}\n")
    except (OSError, UnsafePath):
        pass


# --- finding the session's loop -------------------------------------------------


def find_loop(state: Path, hook: HookInput, now: float, notes: list[str]) -> loops.LoopPaths | None:
    """The active loop owned by this session. A loop that is not this user's own, or
    that no session owns yet, is never taken: unowned loops wait for the user to
    attach them (`/loopwright:resume NAME`)."""
    try:
        found = loops.scan_active(state)
    except UnsafePath as exc:
        notes.append(f"loopwright: {exc}; loops in this project are ignored until it is fixed.")
        return None
    for f in found:
        if f.config is not None:
            if f.config.get("owner_session") == hook.session_id:
                return f.paths
            continue
        if isinstance(f.problem, store.CorruptFile):
            notes.append(
                f"loopwright: loop {f.paths.name}: {f.problem}; the loop is stopped. "
                "Start a new one if needed."
            )
            loops.clear_active(f.paths)
        elif _claims(f.paths, hook.session_id):
            notes.append(f"loopwright: {f.problem}")
    return None


def _claims(paths: loops.LoopPaths, session: str) -> bool:
    """Whether an untrusted loop names this session as its owner (then, and only then,
    the session is told why nothing happens: a planted loop stays silent elsewhere)."""
    try:
        cfg = loops.read_unverified(paths)
    except UnsafePath:
        return False
    return bool(cfg) and cfg.get("owner_session") == session


# --- observing ------------------------------------------------------------------


def lock_state(lock: dict | None, session_id: str, now: float) -> str:
    if not lock:
        return router.LOCK_FREE
    if lock.get("owner") == locks.owner_tag(session_id):
        return router.LOCK_OURS
    return router.LOCK_STALE if locks.is_stale(lock, now) else router.LOCK_FOREIGN


def read_stop_request(paths: loops.LoopPaths, notes: list[str], move: bool = True) -> dict | None:
    if not os.path.lexists(paths.stop):
        return None
    try:
        req = loops.read_state(paths, "stop", move_corrupt=move)
    except store.CorruptFile as exc:
        notes.append(f"loopwright: {exc}; treating it as a stop request")
        return {"reason": "requested"}
    return req if req is not None else None


# Claude Code writes the turn's final message to the transcript shortly after the
# Stop hook starts (tens of milliseconds; seconds on a loaded machine). While the
# transcript demonstrably lags (the hook's last_assistant_message is not its final
# text yet), a Stop waits for it, this long at most; no wait when it is there.
CATCH_UP_SECONDS = 5.0
# A tick that would end the loop is not committed without its final turn's usage:
# it is handed to a detached process that waits this long for the transcript.
LATE_CATCH_UP_SECONDS = 120.0
LATE_ENV = "LOOPWRIGHT_LATE_TICK"


def catch_up_seconds() -> float:
    if os.environ.get(LATE_ENV) == "1":
        return LATE_CATCH_UP_SECONDS
    raw = os.environ.get("LOOPWRIGHT_CATCH_UP_SECONDS", "")
    try:
        return max(0.0, min(float(raw), LATE_CATCH_UP_SECONDS)) if raw else CATCH_UP_SECONDS
    except ValueError:
        return CATCH_UP_SECONDS


def caught_up(turn: transcript.Increment, last_message: str | None) -> bool:
    """The transcript holds the turn's final message. A Stop always follows a model
    response, so a read without any assistant message is behind, whatever the hook says."""
    if turn.final_message_id is None:
        return False
    if not last_message or not last_message.strip():
        return True
    return bool(turn.final_blocks) and turn.final_blocks[-1].strip() == last_message.strip()


def _awaitable(path: str | None, cursor: transcript.Cursor) -> bool:
    """A transcript worth waiting for: a regular file, or one Claude Code has not created
    yet (it writes a new session's file lazily) unless an earlier Stop already found it
    missing. A special file or a symlink in its place is never waited on."""
    if not path:
        return False
    if transcript.regular_size(path) is not None:
        return True
    return not os.path.lexists(path) and cursor.path != path


def read_turn(
    path: str | None,
    cursor: transcript.Cursor,
    nonce: str | None,
    last_message: str | None,
    waiting=lambda _: None,  # called with a note while the Stop waits for the transcript
) -> transcript.Increment:
    """The new part of the transcript, waiting (bounded) while it lags behind the
    hook's input, so the turn's tokens count in this iteration rather than the next.
    ``waiting`` hears once when the wait starts and once when it ends; a turn still
    behind after the wait is marked ``lagging``. A catch-up time of 0 turns all this off."""
    turn = transcript.read_increment(path, cursor, nonce=nonce)
    limit = catch_up_seconds()
    if limit <= 0 or not _awaitable(path, cursor) or caught_up(turn, last_message):
        return turn
    started = time.monotonic()
    waiting(f"the transcript lags behind the Stop; waiting up to {limit:.1f} s")
    pause = 0.01
    while not caught_up(turn, last_message) and time.monotonic() < started + limit:
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
        if turn.opened:
            turn = transcript.merge(turn, transcript.read_increment(path, turn.cursor, nonce=nonce))
        else:  # Claude Code had not created it yet: read it afresh
            turn = transcript.read_increment(path, cursor, nonce=nonce)
    turn.lagging = not caught_up(turn, last_message)
    done = "is still behind" if turn.lagging else "caught up"
    waiting(f"the transcript {done} after {time.monotonic() - started:.2f} s")
    return turn


def observe(
    paths: loops.LoopPaths,
    loop: dict,
    hook: HookInput,
    now: float,
    notes: list[str],
    *,
    dry_run: bool = False,
) -> router.Snapshot:
    """Everything the router needs, read from disk. ``dry_run`` leaves corrupt files in place."""
    move = not dry_run
    mode = modes.for_loop(loop)
    budget = loops.read_state(paths, "budget", move_corrupt=move)
    if budget is None:  # never started again from zero: that would reset its spend
        raise loops.StateMissing(paths.name, paths.budget.name)
    modes.check_state(mode, budget)
    lock = loops.read_state(paths, "lock", move_corrupt=move)
    turn = _observe_turn(paths, loop, hook, budget, dry_run)
    reports, offset, problems = store.read_jsonl_from(
        paths.reports, int(budget.get("reports_offset") or 0), spec=schema.REPORT
    )
    budget = dict(budget, reports_offset=offset)
    notes.extend(f"loopwright: {p}" for p in problems)
    rules = project_rules(loop)
    notes.extend(f"loopwright: {p}" for p in rules.problems)
    registry, tasks_text = loop_tasks(paths, loop, notes, mode)
    pending = loops.read_state(paths, "backprop_pending", move_corrupt=move)  # damaged: the loop stops
    cap = os.environ.get("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "8")
    snap = router.Snapshot(
        now=now,
        session_id=hook.session_id,
        loop=loop,
        budget=budget,
        turn=turn,
        last_message=hook.last_message,
        stop_hook_active=hook.stop_hook_active,
        stop_request=read_stop_request(paths, notes, move),
        cancelled=loops.is_cancelled(paths),
        lock=lock,
        lock_state=lock_state(lock, hook.session_id, now),
        block_cap=int(cap) if cap.isdigit() else 8,
        reports=tuple(reports),
        rates=rates.table(rules.rates, loop.get("accepted_rates")),  # lower rows: only if confirmed
        tasks=registry,
        tasks_text=tasks_text,
        tasks_pressure=taskreg.pressure_line(registry) if registry is not None and registry.total else None,
        backprop_pending=pending,
        mode=mode,
        observation=mode.observe(loop),
    )
    if not dry_run and router.needs_verification(snap):
        timeout = min(float(loop.get("verify_timeout") or verify.DEFAULT_TIMEOUT), verify.MAX_TIMEOUT)
        snap = snap.replace(verify_result=verify.run(loop["verify"], Path(loop["project_dir"]), timeout))
    return snap


def _observe_turn(
    paths: loops.LoopPaths, loop: dict, hook: HookInput, budget: dict, dry_run: bool
) -> transcript.Increment:
    """What the transcript gained since the last Stop (waiting for it to catch up, unless
    this is a dry run for ``route --explain``)."""
    cursor = transcript.Cursor.from_dict(budget.get("cursor"))
    if dry_run:
        return transcript.read_increment(hook.transcript_path, cursor, nonce=loop.get("nonce"))
    return read_turn(
        hook.transcript_path,
        cursor,
        loop.get("nonce"),
        hook.last_message,
        lambda what: debug(paths.state, f"session {hook.session_id}: loop {paths.name}: {what}"),
    )


def loop_tasks(paths: loops.LoopPaths, loop: dict, notes: list[str], mode):
    """The loop's own tasks as the router reads them (an incremental view for a large
    registry, see taskindex.py; None when it has none of its own), and the prompt's tasks
    text: its own ``Tasks:`` section, then the tasks of a file loopwright did not write,
    quoted as data (they never reach the router, so they hold nothing open)."""
    project = Path(loop.get("project_dir") or paths.state.parent)
    config, problem = project_config(project)
    if problem:
        notes.append(f"loopwright: {problem}")
    try:
        own, foreign = taskreg.loop_files(loop, project, paths.state, paths.dir, mode.project_tasks, config)
    except taskreg.RegistryError as exc:
        notes.append(f"loopwright: {exc}")
        own, foreign = paths.tasks, None
    chars = (
        (config.get("tasks") or {}).get("prompt_budget_chars")
        if isinstance(config.get("tasks"), dict)
        else None
    )
    chars = int(chars) if isinstance(chars, int) and chars > 0 else taskreg.DEFAULT_PROMPT_BUDGET
    from loopwright.state import taskindex

    registry = None
    if own is not None:
        try:
            registry = taskindex.view(own, paths.dir / "tasks-index.sqlite", chars)
        except taskreg.RegistryError as exc:
            # A tasks file that cannot be read safely must not read as "no open tasks":
            # that would let a completion claim through. The loop stops instead.
            raise store.CorruptFile(own, None, str(exc)) from None
        notes.extend(f"loopwright: {p}" for p in registry.problems[:3])
    text = taskreg.render(registry, chars) if registry is not None else ""
    quoted = _foreign_tasks(paths, project, foreign, chars, notes) if foreign else ""
    return registry, "\n\n".join(t for t in (text, quoted) if t)


def _foreign_tasks(paths: loops.LoopPaths, project: Path, relpath: str, chars: int, notes: list[str]) -> str:
    """The open tasks of a file loopwright did not write, quoted and attributed to it. One that
    cannot be read is left out with a note: it holds nothing open, so nothing rides on it."""
    from loopwright.core.termsafe import one_line
    from loopwright.state import taskindex

    try:
        reg = taskindex.view(
            taskreg.foreign_file(project, relpath), paths.dir / "tasks-index-project.sqlite", chars
        )
    except taskreg.RegistryError as exc:
        notes.append(f"loopwright: the tasks of {one_line(relpath)} are not shown: {exc}")
        return ""
    from loopwright.state.tasksource import render_foreign

    return render_foreign(reg, relpath, chars)


def project_rules(loop: dict) -> claudemd.ProjectRules:
    project = loop.get("project_dir")
    return _rules_for(project) if project else claudemd.ProjectRules()


_RULES: dict[str, claudemd.ProjectRules] = {}


def _rules_for(project: str) -> claudemd.ProjectRules:
    """CLAUDE.md is read once per hook process (observe and apply both need it)."""
    if project not in _RULES:
        _RULES[project] = claudemd.load(Path(project))
    return _RULES[project]


def apply(
    paths: loops.LoopPaths,
    loop: dict,
    snap: router.Snapshot,
    decision: router.Decision,
    ledger: dict | None = None,
) -> dict:
    """Persist a decision and return the hook's JSON answer. Holds the loop mutex.

    Nothing is counted for a HOLD. Otherwise the tick is committed by one atomic
    write of budget.json (see commit.py), then its effects are applied."""
    now, sid = snap.now, snap.session_id
    redactions = project_rules(loop).redactions
    entries = [
        claudemd.redact(
            journal.stamped(paths, sid, now, {**e, "iteration": decision.iteration or None}), redactions
        )
        for e in decision.journal
    ]
    if decision.action == router.HOLD:
        journal.append(paths, entries)
        return {"systemMessage": decision.system_message}
    if decision.action == router.CONTINUE and snap.lock_state != router.LOCK_OURS:
        taken = {
            "event": "lock",
            "result": "acquired",
            "previous": snap.lock_state,
            "iteration": decision.iteration,
        }
        entries.append(journal.stamped(paths, sid, now, taken))
    record = commit.tick_record(loop, decision, snap, entries, redactions)
    budget = dict(decision.budget, tick=record)
    store.write_json(paths.budget, budget)  # the commit point of this tick
    summary = commit.finish(paths, loop, budget, ledger, redactions)
    if decision.action == router.STOP:
        return {"systemMessage": summary}
    if decision.action == router.PAUSE:
        return {"systemMessage": decision.system_message}
    return {"decision": "block", "reason": decision.prompt, "systemMessage": decision.system_message}


def handle(raw: bytes) -> dict | None:
    """One Stop event. Returns the JSON answer, or None to let the session stop quietly."""
    try:
        hook = parse_stdin(raw)
    except ValueError as exc:
        debug(state_dir(), f"bad stdin: {exc}")
        note = f"loopwright: ignored a Stop event it could not read ({exc}); the session may stop."
        return {"systemMessage": note}
    state = state_dir(hook.cwd)
    now = time.time()
    notes: list[str] = []
    paths = find_loop(state, hook, now, notes)
    if paths is None:
        debug(state, f"session {hook.session_id}: no loop; pass through")
        return {"systemMessage": " ".join(notes)} if notes else None
    try:
        with loops.loop_mutex(paths):
            answer, decision = _tick(paths, hook, now, notes)
    except UnsafePath as exc:
        return {"systemMessage": f"loopwright: loop {paths.name}: {exc}"}
    if decision is not None:
        debug(
            state,
            f"session {hook.session_id}: loop {paths.name}: {decision.action} {decision.outcome or ''} "
            f"({decision.reason})",
        )
    if notes and answer is not None:
        answer["systemMessage"] = " ".join([*notes, answer.get("systemMessage") or ""]).strip()
    return answer


def _tick(paths: loops.LoopPaths, hook: HookInput, now: float, notes: list[str]):
    """Observe, decide, apply: one tick under the loop mutex. Returns (answer, decision)."""
    try:
        loop = loops.load_config(paths)
        if not loop or loop.get("status") != loops.ACTIVE or loop.get("owner_session") != hook.session_id:
            return None, None  # ended or taken over while we waited for the mutex
        paths.configured(loop)
        store.remove_stale_temps(paths.dir)
        summary = commit.recover(paths, loop, project_rules(loop).redactions)
        if summary is not None:  # the previous tick ended the loop but was cut short
            return {"systemMessage": summary}, None
        missing = loops.missing_state(paths, loop)  # after recover: a tick cut short writes history
        if missing:
            raise loops.StateMissing(paths.name, missing)
        ledger = loops.read_state(paths, "ledger")
        snap = observe(paths, loop, hook, now, notes)
    except store.CorruptFile as exc:
        return _stop_on_corrupt(paths, hook, now, exc), None
    except loops.StateMissing as exc:
        return _stop_on_missing(paths, loop, hook, now, exc), None
    except (loops.UntrustedLoop, UnsafePath) as exc:
        return {"systemMessage": f"loopwright: {exc}"}, None
    except (schema.SchemaError, modes.UnknownMode) as exc:  # signed by us, but by another version
        note = f"loopwright: loop {paths.name}: {exc}; it is left as it is (`loopwright doctor`)"
        return {"systemMessage": note}, None
    decision = router.decide(snap)
    if decision.action == router.STOP and snap.turn.lagging and os.environ.get(LATE_ENV) != "1":
        return _defer_final_tick(paths, hook, decision, now), decision
    return apply(paths, loop, snap, decision, ledger), decision


def _defer_final_tick(paths: loops.LoopPaths, hook: HookInput, decision: router.Decision, now: float) -> dict:
    """The loop ends at this Stop, but the transcript has not caught up with the final
    turn: committing now would leave that turn's spend out of budget.json, the history
    and the report for good. A detached process (holding no pipe of Claude Code's, so
    the session stops at once) redoes this tick once the transcript has the turn."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[3] / "hooks" / "stop.py"  # from lib/loopwright/events/
    env = dict(os.environ, **{LATE_ENV: "1"})
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(script)],  # as hooks/stop starts it: nothing from the cwd
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        close_fds=True,
    )
    proc.stdin.write(hook.raw)
    proc.stdin.close()
    journal.write(
        paths,
        {
            "event": "deferred",
            "outcome": decision.outcome,
            "pid": proc.pid,
            "reason": "the transcript had not caught up with the final turn; the last tick waits for it",
        },
        session=hook.session_id,
        now=now,
    )
    return {
        "systemMessage": f"loopwright · {paths.name} is ending ({decision.outcome}): {decision.reason}. "
        "The final turn's spend is still being written by Claude Code; the report follows when it lands "
        "(`loopwright status`)."
    }


def _stop_on_corrupt(paths: loops.LoopPaths, hook: HookInput, now: float, exc: store.CorruptFile) -> dict:
    """A state file did not parse or had the wrong shape: it has been moved aside; stop the loop safely."""
    journal.write(
        paths,
        {"event": "corrupt", "file": exc.path.name, "moved_to": str(exc.moved_to), "detail": exc.detail},
        session=hook.session_id,
        now=now,
    )
    loop = None
    try:
        loop = loops.load_config(paths)
    except (store.CorruptFile, loops.UntrustedLoop, UnsafePath):
        pass
    if loop and loop.get("status") == loops.ACTIVE:
        from loopwright.tick import ending

        budget = router.initial_budget(loop)
        try:
            budget = loops.read_state(paths, "budget") or budget
        except (store.CorruptFile, UnsafePath):
            pass
        ending.end_loop(paths, loop, budget, router.stopped("corrupt-state"), str(exc), now)
    else:
        loops.clear_active(paths)
    return {
        "systemMessage": f"loopwright: loop {paths.name} stopped: {exc}. Inspect it with `loopwright status`."
    }


def _stop_on_missing(
    paths: loops.LoopPaths, loop: dict, hook: HookInput, now: float, exc: loops.StateMissing
) -> dict:
    """budget.json or history.jsonl of a signed active loop is gone: the loop ends
    ``STOPPED:state_missing``, its report naming the file; its counters come from what is left
    (the budget, else the last history line), never from zero."""
    from loopwright.tick import ending

    journal.write(paths, {"event": "state_missing", "file": exc.what}, session=hook.session_id, now=now)
    budget = None
    try:
        budget = loops.read_state(paths, "budget", move_corrupt=False)
    except (store.CorruptFile, UnsafePath):
        pass
    if budget is None:
        budget = router.initial_budget(loop)
        try:
            last = loops.last_snapshot(paths)
        except UnsafePath:
            last = None
        budget.update(last["budget_snapshot"] if last else {})
    reason = f"{exc.what} was missing: the loop stops rather than count again from zero"
    summary = ending.end_loop(paths, loop, budget, router.stopped("state_missing"), reason, now)
    return {"systemMessage": f"loopwright: {exc}. {summary}"}


def main_with(raw: bytes) -> int:
    """Answer one Stop event: never raises, always exits 0."""
    try:
        answer = handle(raw)
    except ImportError as exc:  # a dependency the common path does without (psutil for a foreign lock)
        answer = {
            "systemMessage": (
                "loopwright: this Stop needs a Python package that is missing "
                f"({getattr(exc, 'name', None) or exc}); "
                "the session stops here. Start a new session so the SessionStart hook installs it, "
                "or run `loopwright doctor`."
            )
        }
    except Exception as exc:  # the hook must never crash a session
        try:
            debug(state_dir(), f"internal error: {exc!r}")
        except Exception:
            pass
        answer = {
            "systemMessage": f"loopwright: internal error in the Stop hook ({type(exc).__name__}: {exc}); "
            "the session may stop. Run `loopwright doctor`."
        }
    if answer:
        sys.stdout.buffer.write(jsoncodec.dumps(safe_answer(answer)))
        sys.stdout.flush()
    return 0


def safe_answer(answer: dict) -> dict:
    """Claude Code shows these strings on the user's terminal: no escape sequences in them."""
    from loopwright.core.termsafe import clean

    return {k: clean(v) if isinstance(v, str) else v for k, v in answer.items()}


# --- auto-backprop: a failing test run noticed as it happens -------------------------------------

TEST_RUNNER_PATTERN = (
    r"(^|[\s;&|(])(pytest|py\.test|tox|nox|jest|vitest|mocha|rspec|phpunit|ctest|"
    r"(python3?|uv run|poetry run) -m (pytest|unittest)|(npm|yarn|pnpm|bun)( run)? test|"
    r"npx (jest|vitest|mocha)|go test|cargo (test|nextest)|mvn( -\S+)* (test|verify)|"
    r"(\./)?gradlew? test|dotnet test|mix test|swift test|"
    r"make (test|check))\b"
)


def is_test_run(command: str, loop: dict) -> bool:
    import re  # only in the tool-failure hook, never on a Stop

    check = (loop.get("verify") or "").strip()
    return bool((check and check in command) or re.search(TEST_RUNNER_PATTERN, command))


def handle_tool_failure(raw: bytes) -> None:
    """PostToolUseFailure on Bash: inside this session's active loop, a failed test run
    raises the backprop flag so the next prompt opens with the failure."""
    try:
        data = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        return
    if (
        not isinstance(data, dict)
        or data.get("tool_name") != "Bash"
        or not isinstance(data.get("session_id"), str)
    ):
        return
    command = (
        (data.get("tool_input") or {}).get("command") if isinstance(data.get("tool_input"), dict) else None
    )
    error = data.get("error")
    if not isinstance(command, str) or not isinstance(error, str) or data.get("is_interrupt"):
        return
    state = state_dir(data.get("cwd") if isinstance(data.get("cwd"), str) else None)
    hook = HookInput({"session_id": data["session_id"], "cwd": data.get("cwd")})
    now = time.time()
    paths = find_loop(state, hook, now, [])
    if paths is None:
        return
    with loops.loop_mutex(paths):
        loop = loops.load_config(paths)
        if not loop or loop.get("status") != loops.ACTIVE or not is_test_run(command, loop):
            return
        rest = error[len("Exit code ") :] if error.startswith("Exit code ") else ""
        code = rest[: len(rest) - len(rest.lstrip("0123456789"))]  # the digits it starts with
        pending = {
            "source": "post-tool",
            "command": command,
            "exit_code": int(code) if code else None,
            "timed_out": False,
            "seconds": None,
            "output_tail": error[-verify.TAIL_CHARS :],
            "at": locks.now_iso(now),
        }
        store.write_json(paths.backprop_pending, claudemd.redact(pending, project_rules(loop).redactions))
    entry = {"event": "backprop", "source": "post-tool", "command": command}
    journal.write(paths, entry, session=hook.session_id, now=now)


def tool_failure_main(raw: bytes) -> int:
    try:
        handle_tool_failure(raw)
    except Exception as exc:  # never disturb the session over a side channel
        debug(state_dir(), f"tool-failure hook error: {exc!r}")
    return 0
