"""Ending a loop between turns: the user's cancel (for good: a tombstone first) and the
headless runner's end_now. Each ends the loop with its report; an ended loop stays ended."""

from __future__ import annotations

import time
from pathlib import Path

from loopwright.actions.pick import config, pick_loop, read_budget
from loopwright.core import router
from loopwright.state import journal, loops
from loopwright.state import lock as locks
from loopwright.tick import commit, ending


def cancel(state: Path, name: str | None, session: str | None, reason: str = "cancelled by the user") -> str:
    """Cancel for good: the tombstone goes down first, so no later Stop can
    continue or revive the loop, then the loop is ended with a report."""
    paths = pick_loop(state, name, session, own_only=bool(session) and not name)
    now = time.time()
    try:
        with open(paths.tombstone, "x", encoding="utf-8") as fh:
            fh.write(f"{locks.now_iso(now)} {reason}\n")
    except FileExistsError:
        pass
    return _end(paths, router.CANCELLED, reason, dict(event="cancel", reason=reason), session, now)


def end_now(state: Path, name: str, outcome: str, reason: str, session: str | None = None) -> str:
    """End an active loop with ``outcome`` between turns (the headless runner giving up);
    returns the end summary. An ended loop stays as it is."""
    paths = pick_loop(state, name, None, active_only=False)
    event = dict(event="end", outcome=outcome, reason=reason)
    return _end(paths, outcome, reason, event, session, time.time())


def _end(
    paths: loops.LoopPaths, outcome: str, reason: str, event: dict, session: str | None, now: float
) -> str:
    with loops.loop_mutex(paths):
        loop = config(paths)
        if loop.get("status") == loops.ACTIVE:
            commit.recover(paths.configured(loop), loop)  # a tick cut short is finished first
            loop = config(paths)
        if loop.get("status") != loops.ACTIVE:
            loops.clear_active(paths)
            return f"loopwright: loop {paths.name} had already ended ({loop.get('outcome')}); it stays ended."
        summary = ending.end_loop(paths, loop, read_budget(paths, loop, ending=True), outcome, reason, now)
    journal.write(paths, event, session=session, now=now)
    return summary
