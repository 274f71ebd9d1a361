"""The Stop hook's shell around the router: read, decide, persist, answer.

Everything that touches files, locks, processes or Claude Code's JSON is here;
the decision itself is ``router.decide``. Any failure ends in "let the session
stop" plus one line for the user: the hook never crashes a session and never
blocks on input it does not understand.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import orjson

import dataclasses
import functools

from . import claudemd, rates, verify
from . import lock as locks
from . import loops, router, store, transcript
from . import tasks as taskreg
from .entry import MAX_STDIN_BYTES
from .project import project_config, state_dir


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


def parse_stdin(raw: bytes) -> HookInput:
    if not raw.strip():
        raise ValueError("stdin is empty")
    if len(raw) > MAX_STDIN_BYTES:
        raise ValueError(f"stdin is larger than {MAX_STDIN_BYTES // (1024 * 1024)} MiB")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ValueError("stdin is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("stdin is not a JSON object")
    return HookInput(data)


def debug(state: Path | None, message: str) -> None:
    if os.environ.get("LOOPWRIGHT_DEBUG") != "1" or state is None:
        return
    try:
        loops.ensure_ignored(state)
        with open(state / "debug.log", "a", encoding="utf-8") as fh:
            fh.write(f"{locks.now_iso()} pid={os.getpid()} {message}\n")
    except OSError:
        pass


def journal(paths: loops.LoopPaths, entry: dict, now: float, session: str | None) -> None:
    record = {"at": locks.now_iso(now), "loop": paths.name, "session": session}
    record.update(entry)
    store.append_jsonl(paths.journal, record)


# --- finding the session's loop -------------------------------------------------


def _nonce_seen(loop: dict, hook: HookInput) -> bool:
    nonce = loop.get("nonce")
    if not nonce:
        return False
    if hook.last_message and nonce in hook.last_message:
        return True
    return nonce.encode() in transcript.tail_text(hook.transcript_path)


def find_loop(state: Path, hook: HookInput, now: float, notes: list[str]) -> loops.LoopPaths | None:
    """The active loop owned by this session, adopting an unowned one whose
    start nonce this session's transcript carries. Cleans stale markers."""
    unowned: list[tuple[loops.LoopPaths, dict]] = []
    for name in loops.active_names(state):
        paths = loops.LoopPaths(state, name)
        try:
            cfg = loops.load_config(paths)
        except store.CorruptFile as exc:
            notes.append(f"loopwright: loop {name}: {exc}; the loop is stopped. Start a new one if needed.")
            loops.clear_active(paths)
            continue
        if cfg is None or cfg.get("status") != loops.ACTIVE:
            loops.clear_active(paths)  # left behind by a crash between the two writes
            continue
        owner = cfg.get("owner_session")
        if owner == hook.session_id:
            return paths
        if not owner:
            unowned.append((paths, cfg))
    for paths, cfg in unowned:
        if not _nonce_seen(cfg, hook):
            continue
        with loops.loop_mutex(paths):
            cfg = loops.load_config(paths)
            if cfg and cfg.get("status") == loops.ACTIVE and not cfg.get("owner_session"):
                cfg["owner_session"] = hook.session_id
                # The start command had no session to name in the lock; this session takes it.
                budget = store.read_json(paths.budget) or {}
                store.write_json(paths.lock, locks.new_lock(hook.session_id, int(budget.get("iterations_used", 0)) + 1, now))
                store.write_json(paths.config, cfg)
                journal(paths, {"event": "adopt", "reason": "start nonce found in this session"}, now, hook.session_id)
                return paths
    return None


# --- observing ------------------------------------------------------------------


def lock_state(lock: dict | None, session_id: str, now: float) -> str:
    if not lock:
        return router.LOCK_FREE
    if lock.get("owner") == locks.owner_tag(session_id):
        return router.LOCK_OURS
    return router.LOCK_STALE if locks.is_stale(lock, now) else router.LOCK_FOREIGN


def read_stop_request(paths: loops.LoopPaths, notes: list[str], move: bool = True) -> dict | None:
    if not paths.stop.exists():
        return None
    try:
        req = store.read_json(paths.stop, move_corrupt=move)
    except store.CorruptFile as exc:
        notes.append(f"loopwright: {exc}; treating it as a stop request")
        return {"reason": "requested"}
    return req if req is not None else None


# How long a Stop waits for the transcript to show the final message: Claude Code
# often writes it a few tens of milliseconds after the hook starts.
TRANSCRIPT_CATCH_UP_SECONDS = 0.5


def _caught_up(turn: transcript.Increment, last_message: str | None) -> bool:
    if not last_message or not last_message.strip():
        return True
    return bool(turn.final_blocks) and turn.final_blocks[-1].strip() == last_message.strip()


def read_turn(path: str | None, cursor: transcript.Cursor, nonce: str | None, last_message: str | None) -> transcript.Increment:
    """The new part of the transcript, waiting briefly for the final message to land
    so its tokens count in this iteration rather than the next."""
    turn = transcript.read_increment(path, cursor, nonce=nonce)
    if not path or not os.path.exists(path):
        return turn
    deadline = time.monotonic() + TRANSCRIPT_CATCH_UP_SECONDS
    while not _caught_up(turn, last_message) and time.monotonic() < deadline:
        time.sleep(0.02)
        more = transcript.read_increment(path, turn.cursor, nonce=nonce)
        turn = transcript.merge(turn, more)
    return turn


def observe(
    paths: loops.LoopPaths, loop: dict, hook: HookInput, now: float, notes: list[str], *, dry_run: bool = False
) -> router.Snapshot:
    """Everything the router needs, read from disk. ``dry_run`` leaves corrupt files in place."""
    move = not dry_run
    budget = store.read_json(paths.budget, move_corrupt=move) or router.initial_budget(loop)
    lock = store.read_json(paths.lock, move_corrupt=move)
    cursor = transcript.Cursor.from_dict(budget.get("cursor"))
    if dry_run:
        turn = transcript.read_increment(hook.transcript_path, cursor, nonce=loop.get("nonce"))
    else:
        turn = read_turn(hook.transcript_path, cursor, loop.get("nonce"), hook.last_message)
    reports, offset, problems = store.read_jsonl_from(paths.reports, int(budget.get("reports_offset") or 0))
    budget = dict(budget, reports_offset=offset)
    notes.extend(f"loopwright: {p}" for p in problems)
    rules = project_rules(loop)
    notes.extend(f"loopwright: {p}" for p in rules.problems)
    registry, budget_chars = loop_tasks(paths, loop, notes)
    pending = None
    if paths.backprop_pending.exists():
        try:
            pending = store.read_json(paths.backprop_pending, move_corrupt=move)
        except store.CorruptFile as exc:
            notes.append(f"loopwright: {exc}")
    cap = os.environ.get("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "8")
    task_view = read_task_view(loop) if loop.get("mode") == "task" else None
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
        rates=rates.table(rules.rates),
        tasks=registry,
        tasks_budget_chars=budget_chars,
        backprop_pending=pending,
        task_view=task_view,
    )
    if not dry_run and router.needs_verification(snap):
        timeout = min(float(loop.get("verify_timeout") or verify.DEFAULT_TIMEOUT), verify.MAX_TIMEOUT)
        snap = dataclasses.replace(snap, verify_result=verify.run(loop["verify"], Path(loop["project_dir"]), timeout))
    return snap


def read_task_view(loop: dict):
    """Task mode: the module's status and phase, its signal and its stop request."""
    from . import automode, signals, taskdir, taskops

    module = loop.get("task_module") or ""
    try:
        mod = taskops.locate(Path(loop["project_dir"]), module)
        index = taskdir.read_index(mod.state_dir)
    except (taskops.TaskError, taskdir.TaskDirError) as exc:
        return automode.TaskView(status="", problem=f"TASK/{module} cannot be read: {exc}")
    view = automode.TaskView(status=index.meta["status"], phase=index.meta.get("phase") or "")
    sig_path, stop_path = mod.main_dir / ".auto-signal", mod.main_dir / ".auto-stop"
    if sig_path.exists():
        try:
            view.signal = signals.validate(orjson.loads(sig_path.read_bytes()))
        except orjson.JSONDecodeError:
            view.signal_problem = ".auto-signal is not valid JSON"
        except signals.SignalError as exc:
            view.signal_problem = f".auto-signal is invalid: {exc}"
    if stop_path.exists():
        try:
            stop = orjson.loads(stop_path.read_bytes())
        except orjson.JSONDecodeError:
            stop = None
        view.stop_request = stop if isinstance(stop, dict) else {"reason": "user_stop"}
    return view


def clear_task_files(loop: dict) -> None:
    """Task mode cleanup at the end of the loop: the transient signal and stop files go."""
    from . import taskops

    try:
        mod = taskops.locate(Path(loop["project_dir"]), loop.get("task_module") or "", must_exist=False)
    except taskops.TaskError:
        return
    for name in (".auto-signal", ".auto-stop"):
        try:
            (mod.main_dir / name).unlink()
        except FileNotFoundError:
            pass


def loop_tasks(paths: loops.LoopPaths, loop: dict, notes: list[str]) -> tuple[taskreg.Registry, int]:
    """The loop's task registry and the prompt's character budget for it."""
    project = Path(loop.get("project_dir") or paths.state.parent)
    config, problem = project_config(project)
    if problem:
        notes.append(f"loopwright: {problem}")
    try:
        path = taskreg.tasks_path(project, paths.state, paths.dir, config)
    except taskreg.TaskError as exc:
        notes.append(f"loopwright: {exc}")
        path = paths.tasks
    registry = taskreg.load(path)
    notes.extend(f"loopwright: {p}" for p in registry.problems[:3])
    chars = (config.get("tasks") or {}).get("prompt_budget_chars") if isinstance(config.get("tasks"), dict) else None
    return registry, int(chars) if isinstance(chars, int) and chars > 0 else taskreg.DEFAULT_PROMPT_BUDGET


def project_rules(loop: dict) -> claudemd.ProjectRules:
    project = loop.get("project_dir")
    return _rules_for(project) if project else claudemd.ProjectRules()


@functools.lru_cache(maxsize=4)
def _rules_for(project: str) -> claudemd.ProjectRules:
    """CLAUDE.md is read once per hook process (observe and apply both need it)."""
    return claudemd.load(Path(project))


def write_progress(paths: loops.LoopPaths, loop: dict, decision: router.Decision, now: float) -> None:
    b = decision.budget or {}
    store.write_json(
        paths.progress,
        {
            "name": loop["name"],
            "mode": loop["mode"],
            "status": loops.ENDED if decision.action == router.STOP else loops.ACTIVE,
            "paused": decision.action == router.PAUSE,
            "outcome": decision.outcome,
            "iteration": decision.iteration,
            "max_iterations": b.get("max_iterations", loop["max_iterations"]),
            "minutes_elapsed": b.get("minutes_elapsed", 0.0),
            "max_minutes": b.get("max_minutes", loop["max_minutes"]),
            "tokens_in": b.get("tokens_in", 0),
            "tokens_out": b.get("tokens_out", 0),
            "max_tokens": b.get("max_tokens"),
            "dollars_estimate": b.get("dollars_estimate", 0.0),
            "max_dollars": b.get("max_dollars"),
            "prs_touched": len(b.get("prs_touched") or []),
            "pending_gates": [g["name"] for g in b.get("pending_gates") or [] if not g.get("answer")],
            "owner_session": loop.get("owner_session"),
            "last_reason": decision.reason,
            "updated_at": locks.now_iso(now),
        },
    )


def write_ledger(paths: loops.LoopPaths, snap: router.Snapshot, decision: router.Decision) -> None:
    """Token tallies per session and per task (the latest task an iteration report named)."""
    try:
        ledger = store.read_json(paths.ledger) or {}
    except store.CorruptFile:
        ledger = {}
    h = decision.history or {}
    delta = {
        "tokens_in": h.get("tokens_in_this_iter", 0),
        "tokens_out": h.get("tokens_out_this_iter", 0),
        "cache_creation_input_tokens": h.get("cache_creation_tokens_this_iter", 0),
        "cache_read_input_tokens": h.get("cache_read_tokens_this_iter", 0),
        "dollars": h.get("dollars_this_iter", 0.0),
        "iterations": 1,
    }
    task = next((r.get("task") for r in reversed(snap.reports) if r.get("task")), None) or ledger.get("current_task") or snap.loop["name"]
    ledger["current_task"] = task
    for kind, key in (("sessions", snap.session_id), ("tasks", task)):
        slot = ledger.setdefault(kind, {}).setdefault(key, {})
        for k, v in delta.items():
            slot[k] = round(slot.get(k, 0) + v, 6) if k == "dollars" else slot.get(k, 0) + v
    store.write_json(paths.ledger, ledger)


def apply(paths: loops.LoopPaths, loop: dict, snap: router.Snapshot, decision: router.Decision) -> dict:
    """Persist a decision and return the hook's JSON answer. Holds the loop mutex."""
    now, sid = snap.now, snap.session_id
    redactions = project_rules(loop).redactions
    for entry in decision.journal:
        journal(paths, claudemd.redact(dict(entry, iteration=decision.iteration or None), redactions), now, sid)
    if decision.action == router.HOLD:
        return {"systemMessage": decision.system_message}
    # History first: resume restores from its last line, so budget.json is never ahead of it.
    store.append_jsonl(paths.history, claudemd.redact(decision.history, redactions))
    store.write_json(paths.budget, decision.budget)
    write_progress(paths, loop, decision, now)
    write_ledger(paths, snap, decision)
    if decision.action == router.STOP:
        try:
            paths.backprop_pending.unlink()  # nothing is left to hand it to
        except FileNotFoundError:
            pass
        if loop.get("mode") == "task":
            clear_task_files(loop)
        from . import report  # the end of a loop: rare, so loaded only then

        summary = report.end_loop(paths, loop, decision.budget, decision.outcome, decision.reason, now, redactions)
        return {"systemMessage": summary}
    if decision.backprop_new is not None and decision.action != router.CONTINUE:
        store.write_json(paths.backprop_pending, decision.backprop_new)  # delivered by a later prompt
    if decision.action == router.PAUSE:
        return {"systemMessage": decision.system_message}
    if decision.backprop_delivered is not None:
        with store.file_lock(paths.backprop_log.with_name(".backprop-log.lock")):
            with open(paths.backprop_log, "a", encoding="utf-8") as fh:
                fh.write(claudemd.redact(verify.log_entry(decision.backprop_delivered, decision.iteration, locks.now_iso(now)), redactions))
        try:
            paths.backprop_pending.unlink()  # consumed: this prompt carries it
        except FileNotFoundError:
            pass
    lock = snap.lock if snap.lock_state == router.LOCK_OURS else None
    if lock is None:  # free or stale: this session (re)takes it
        lock = locks.new_lock(sid, decision.iteration, now)
        journal(paths, {"event": "lock", "result": "acquired", "previous": snap.lock_state}, now, sid)
    lock = dict(lock, heartbeat_at=locks.now_iso(now), iteration=decision.iteration + 1)
    store.write_json(paths.lock, lock)
    return {"decision": "block", "reason": decision.prompt, "systemMessage": decision.system_message}


def handle(raw: bytes) -> dict | None:
    """One Stop event. Returns the JSON answer, or None to let the session stop quietly."""
    try:
        hook = parse_stdin(raw)
    except ValueError as exc:
        debug(state_dir(), f"bad stdin: {exc}")
        return {"systemMessage": f"loopwright: ignored a Stop event it could not read ({exc}); the session may stop."}
    state = state_dir(hook.cwd)
    now = time.time()
    notes: list[str] = []
    paths = find_loop(state, hook, now, notes)
    if paths is None:
        debug(state, f"session {hook.session_id}: no loop; pass through")
        return {"systemMessage": " ".join(notes)} if notes else None
    with loops.loop_mutex(paths):
        try:
            loop = loops.load_config(paths)
            if not loop or loop.get("status") != loops.ACTIVE or loop.get("owner_session") != hook.session_id:
                return None  # ended or taken over while we waited for the mutex
            paths.configured(loop)
            snap = observe(paths, loop, hook, now, notes)
        except store.CorruptFile as exc:
            return _stop_on_corrupt(paths, hook, now, exc)
        decision = router.decide(snap)
        answer = apply(paths, loop, snap, decision)
    debug(state, f"session {hook.session_id}: loop {paths.name}: {decision.action} {decision.outcome or ''} ({decision.reason})")
    if notes:
        answer["systemMessage"] = " ".join([*notes, answer.get("systemMessage") or ""]).strip()
    return answer


def _stop_on_corrupt(paths: loops.LoopPaths, hook: HookInput, now: float, exc: store.CorruptFile) -> dict:
    """A state file did not parse: it has been moved aside; stop the loop safely."""
    journal(paths, {"event": "corrupt", "file": exc.path.name, "moved_to": str(exc.moved_to), "detail": exc.detail}, now, hook.session_id)
    loop = None
    try:
        loop = loops.load_config(paths)
    except store.CorruptFile:
        pass
    if loop and loop.get("status") == loops.ACTIVE:
        from . import report

        budget = router.initial_budget(loop)
        try:
            budget = store.read_json(paths.budget) or budget
        except store.CorruptFile:
            pass
        report.end_loop(paths, loop, budget, router.stopped("corrupt-state"), str(exc), now)
    else:
        loops.clear_active(paths)
    return {"systemMessage": f"loopwright: loop {paths.name} stopped: {exc}. Inspect it with `loopwright status`."}


def main_with(raw: bytes) -> int:
    """Answer one Stop event: never raises, always exits 0."""
    try:
        answer = handle(raw)
    except Exception as exc:  # the hook must never crash a session
        try:
            debug(state_dir(), f"internal error: {exc!r}")
        except Exception:
            pass
        answer = {"systemMessage": f"loopwright: internal error in the Stop hook ({type(exc).__name__}: {exc}); the session may stop. Run `loopwright doctor`."}
    if answer:
        sys.stdout.buffer.write(orjson.dumps(answer))
        sys.stdout.flush()
    return 0


# --- auto-backprop: a failing test run noticed as it happens -------------------------------------

TEST_RUNNER_PATTERN = (
    r"(^|[\s;&|(])(pytest|py\.test|tox|nox|jest|vitest|mocha|rspec|phpunit|ctest|"
    r"(python3?|uv run|poetry run) -m (pytest|unittest)|(npm|yarn|pnpm|bun)( run)? test|npx (jest|vitest|mocha)|"
    r"go test|cargo (test|nextest)|mvn( -\S+)* (test|verify)|(\./)?gradlew? test|dotnet test|mix test|swift test|"
    r"make (test|check))\b"
)


@functools.lru_cache(maxsize=1)
def _test_runner_re() -> re.Pattern:
    return re.compile(TEST_RUNNER_PATTERN)  # compiled only in the tool-failure hook, not on every Stop


def is_test_run(command: str, loop: dict) -> bool:
    check = (loop.get("verify") or "").strip()
    return bool((check and check in command) or _test_runner_re().search(command))


def handle_tool_failure(raw: bytes) -> None:
    """PostToolUseFailure on Bash: inside this session's active loop, a failed test run
    raises the backprop flag so the next prompt opens with the failure."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return
    if not isinstance(data, dict) or data.get("tool_name") != "Bash" or not isinstance(data.get("session_id"), str):
        return
    command = (data.get("tool_input") or {}).get("command") if isinstance(data.get("tool_input"), dict) else None
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
        m = re.match(r"^Exit code (\d+)", error)
        pending = {"source": "post-tool", "command": command, "exit_code": int(m.group(1)) if m else None,
                   "timed_out": False, "seconds": None, "output_tail": error[-verify.TAIL_CHARS:], "at": locks.now_iso(now)}
        store.write_json(paths.backprop_pending, claudemd.redact(pending, project_rules(loop).redactions))
    journal(paths, {"event": "backprop", "source": "post-tool", "command": command}, now, hook.session_id)


def tool_failure_main(raw: bytes) -> int:
    try:
        handle_tool_failure(raw)
    except Exception as exc:  # never disturb the session over a side channel
        debug(state_dir(), f"tool-failure hook error: {exc!r}")
    return 0
