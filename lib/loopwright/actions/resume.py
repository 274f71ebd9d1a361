"""Resuming a loop in a session: after an interrupt or the block cap, taking over a loop
whose session died, or reopening one whose budget ran out (with explicitly higher
ceilings). A live owner is waited for (``--lock wait``) or displaced only after the
force-unlock gate (``--lock force``, see gates); the take-over itself is in takeover."""

from __future__ import annotations

import time
from pathlib import Path

from loopwright import modes
from loopwright.actions.gates import ask_force_unlock
from loopwright.actions.pick import config, pick_loop, read_budget
from loopwright.actions.takeover import Resumed, take_over
from loopwright.core import budget as budgets
from loopwright.core import router
from loopwright.core.modeapi import DIMENSIONS
from loopwright.state import lock as locks
from loopwright.state import loops

LOCK_MODES = ("skip", "wait", "force")
WAIT_POLL_SECONDS = 2.0
# Outcomes a loop can be resumed from (with higher ceilings where one ran out).
RESUMABLE_PREFIXES = ("MAX_ITERATIONS", "BUDGET_EXHAUSTED", "STOPPED", "EXTERNAL_UNREACHABLE")


def resume(
    state: Path,
    name: str | None,
    session: str | None,
    *,
    lock_mode: str | None = None,
    raise_to: dict | None = None,
    max_wait: float | None = None,
    transcript_path: str | None = None,
) -> Resumed:
    """Continue a loop in ``session``: after an interrupt or the block cap, taking
    over a loop whose session died, or reopening a loop whose budget ran out (with
    explicitly higher ceilings). A live owner is displaced only with lock mode
    ``force``, after the force-unlock gate."""
    raise_to = {k: v for k, v in (raise_to or {}).items() if v is not None}
    paths = pick_loop(state, name, session, active_only=False)
    now = time.time()
    notes: list[str] = []
    loop, budget, mode, lk, held = _inspect_for_resume(paths, session, lock_mode, raise_to, now, notes)
    if held and mode == "skip":
        it = int(budget.get("iterations_used", 0)) + 1
        raise loops.LoopError(
            f"Previous iteration {it} still active (pid {lk.get('pid')}, {lk.get('owner')}); "
            "use --lock wait to wait for it, or --lock force to take over"
        )
    if held and mode == "wait":
        _wait_out(paths, loop, budget, session, max_wait)
    elif held and mode == "force":
        waiting = ask_force_unlock(paths, loop, session, raise_to, now, notes)
        if waiting is not None:
            return waiting
    return take_over(paths, session, raise_to, notes, now, state, transcript_path)


def _inspect_for_resume(
    paths: loops.LoopPaths,
    session: str | None,
    lock_mode: str | None,
    raise_to: dict,
    now: float,
    notes: list[str],
) -> tuple[dict, dict, str, dict | None, bool]:
    """Under the loop's mutex: the loop, its budget, the lock mode, the lock and whether a
    live owner other than ``session`` holds it. Refuses an ended loop that cannot resume."""
    with loops.loop_mutex(paths):
        loop = config(paths)
        paths.configured(loop)
        budget = read_budget(paths, loop, restoring=True)
        mode = lock_mode or loop.get("lock_mode") or "skip"
        if mode not in LOCK_MODES:
            raise loops.LoopError(f"--lock must be one of {', '.join(LOCK_MODES)}")
        if loop.get("status") != loops.ACTIVE:
            _check_resumable(paths, loop, budget, raise_to)
        lk = loops.read_state(paths, "lock")
        mine = bool(lk) and lk.get("owner") == locks.owner_tag(session)
        unowned = bool(lk) and lk.get("owner") == locks.owner_tag(None)  # written by an older version
        held = bool(lk) and not unowned and not mine and not locks.is_stale(lk, now)
        if lk and not held and not mine:
            notes.append(f"Reaped stale lock for pid {lk.get('pid')}")
    return loop, budget, mode, lk, held


def _wait_out(
    paths: loops.LoopPaths, loop: dict, budget: dict, session: str | None, max_wait: float | None
) -> None:
    """``--lock wait``: wait for the live owner to let go, within the minutes left."""
    limit = float(budget.get("max_minutes") or loop["max_minutes"]) * 60
    remaining = max(0.0, limit - budget.get("minutes_elapsed", 0.0) * 60)
    still = _wait_for_lock(
        paths, budget, session, remaining if max_wait is None else min(remaining, max_wait)
    )
    if still:
        raise loops.LoopError(
            f"the lock of loop {paths.name} is still held by {locks.describe(still)} after waiting; "
            "try again later"
        )


def _check_resumable(paths: loops.LoopPaths, loop: dict, budget: dict, raise_to: dict) -> None:
    outcome = loop.get("outcome") or ""
    if loops.is_cancelled(paths) or outcome == router.CANCELLED:
        raise loops.LoopError(
            f"loop {paths.name} was cancelled; a cancelled loop stays ended. Start a new loop with "
            "/loopwright:loop"
        )
    if outcome == router.LOOP_DONE:
        raise loops.LoopError(
            f"loop {paths.name} already finished (LOOP_DONE); start a new loop for more work"
        )
    if outcome.startswith("GATE_STOP"):
        gate = outcome.partition(":")[2]
        it = next(
            (
                g.get("iteration")
                for g in reversed(budget.get("gates_log") or [])
                if g.get("name") == gate and g.get("answer") == "stop"
            ),
            "?",
        )
        raise loops.LoopError(
            f"Loop already stopped at gate {gate} in iteration {it}; start a new loop to go on"
        )
    if not outcome.startswith(RESUMABLE_PREFIXES):
        raise loops.LoopError(f"loop {paths.name} ended {outcome}; it cannot be resumed")
    trial = dict(budget, **{k: v for k, v in raise_to.items() if v is not None})
    counted = modes.get(loop.get("mode")).counted
    hit = budgets.exhausted(trial, tuple(d for d in DIMENSIONS if d not in counted))
    if hit:
        dim = hit[0]
        raise loops.LoopError(
            f"loop {paths.name} ended {outcome} with {budgets.describe(trial, dim)}; resume with a higher "
            f"--max-{dim} (ceilings never change silently)"
        )


def _wait_for_lock(paths: loops.LoopPaths, budget: dict, session: str | None, max_wait: float) -> dict | None:
    """Poll until the lock is free or stale, at most ``max_wait`` seconds. Returns the lock if still held."""
    deadline = time.monotonic() + max_wait
    while True:
        lk = loops.read_state(paths, "lock")
        if not lk or lk.get("owner") == locks.owner_tag(session) or locks.is_stale(lk, time.time()):
            return None
        if time.monotonic() >= deadline:
            return lk
        time.sleep(WAIT_POLL_SECONDS)
