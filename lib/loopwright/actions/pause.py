"""Pausing a loop's wall clock for time in which nothing could run (a usage limit the
headless runner waited out)."""

from __future__ import annotations

from pathlib import Path

from loopwright.actions.pick import config, pick_loop, read_budget
from loopwright.state import journal, loops, store


def pause_clock(state: Path, name: str, seconds: float, why: str, session: str | None = None) -> None:
    """Take ``seconds`` off the loop's wall-clock budget (time spent waiting out a usage
    limit, in which nothing could run)."""
    paths = pick_loop(state, name, None, active_only=False)
    with loops.loop_mutex(paths):
        loop = config(paths)
        budget = read_budget(paths.configured(loop), loop)
        budget["clock_paused_seconds"] = float(budget.get("clock_paused_seconds") or 0.0) + max(0.0, seconds)
        store.write_json(paths.budget, budget)
    journal.write(paths, dict(event="clock", paused_seconds=round(seconds, 3), why=why), session=session)
