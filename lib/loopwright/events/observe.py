"""What a Stop observes before the router decides: the lock, a stop request, the
turn in the transcript (waiting briefly for a late write), the mode's own
observation, the loop's tasks and the project's rules."""

from __future__ import annotations

import os
import time

from loopwright import modes
from loopwright.core import rates, router, schema
from loopwright.events.debuglog import debug
from loopwright.events.hookinput import HookInput
from loopwright.state import claudemd, loops, store, transcript, verify
from loopwright.state import lock as locks
from loopwright.state import tasks as taskreg
from loopwright.state.fspath import Path
from loopwright.state.project import project_config


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


# Claude Code writes the turn's final message to the transcript around the time the Stop
# hook starts. While the transcript demonstrably lags (the hook's last_assistant_message is
# not its final text yet), a Stop waits for it, this long at most; no wait when it is there.
# Measured with the real CLI (bench/bench_catchup.py, 2 CPUs): a third to a half of Stops
# wait, 10-80 ms, also with the CPUs saturated; 1.5 s is the longest lag reported. A turn
# still behind is counted at the next Stop, or by the deferred tick when the loop ends.
CATCH_UP_SECONDS = 2.0


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
    pause = 0.005  # the lag is tens of milliseconds: look often at first (reading only what is new)
    while not caught_up(turn, last_message) and time.monotonic() < started + limit:
        time.sleep(pause)
        pause = min(pause * 1.5, 0.1)
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
        handoff_path=str(paths.handoff),
    )
    if not dry_run and router.needs_verification(snap):
        timeout = min(float(loop.get("verify_timeout") or verify.DEFAULT_TIMEOUT), verify.MAX_TIMEOUT)
        snap = snap.replace(verify_result=verify.run(loop["verify"], Path(loop["project_dir"]), timeout))
    if not dry_run and router.needs_judgement(snap):  # after the check: it judges only what passed
        from loopwright.state import judging

        late = os.environ.get(LATE_ENV) == "1"  # the deferred redo of this Stop: the same claim
        snap = snap.replace(judge_result=judging.judge_loop(paths, snap, reuse=late))
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
    registry = None
    if own is not None and not os.path.lexists(own):
        registry = taskreg.Registry()  # none yet: what taskindex.view says, without loading it
    elif own is not None:
        from loopwright.state import taskindex

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


# The project's CLAUDE.md rules, read once per process (a deferred final tick reads them again).
_RULES: dict[str, claudemd.ProjectRules] = {}


def _rules_for(project: str) -> claudemd.ProjectRules:
    """CLAUDE.md is read once per hook process (observe and apply both need it)."""
    if project not in _RULES:
        _RULES[project] = claudemd.load(Path(project))
    return _RULES[project]
