"""Taking a loop over for a session: the last step of a resume and of a force-unlock
``yes``. Recovers a cut-short tick, restores and reconciles after a crash or a new run,
applies raised ceilings, reopens an ended loop and writes the new lock."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from loopwright.actions import start as starting
from loopwright.actions.pick import config, read_budget
from loopwright.actions.reconcile import reconcile, restore_from_history
from loopwright.state import journal, loops, store
from loopwright.state import lock as locks
from loopwright.tick import commit


@dataclass
class Resumed:
    paths: loops.LoopPaths
    loop: dict
    notes: list[str] = field(default_factory=list)
    waiting_gate: dict | None = None  # a force-unlock gate the user must answer first


def take_over(
    paths: loops.LoopPaths,
    session: str | None,
    raise_to: dict,
    notes: list[str],
    now: float,
    state: Path,
    transcript_path: str | None = None,
) -> Resumed:
    with loops.loop_mutex(paths):
        loop = config(paths)
        paths.configured(loop)
        commit.recover(paths, loop)
        loop = config(paths)
        if loops.missing_state(paths, loop) == paths.history.name:  # a gone budget comes back from it
            raise loops.StateMissing(paths.name, paths.history.name)
        gone = not os.path.lexists(paths.budget)
        budget = read_budget(paths, loop, restoring=True)
        budget.pop("tick", None)  # applied (recover saw to it): a reopened loop must not replay its end
        previous = loop.get("owner_session")
        if session and previous != session and starting.owned_active_loop(state, session):
            raise loops.LoopError("this session already runs another loop; finish or cancel it first")
        if gone or previous != session or loop.get("status") != loops.ACTIVE:
            # Crash recovery or a new run: the counters come from the history line, and
            # the PRs and worktrees it names are reconciled once.
            notes += restore_from_history(paths, budget)
            notes += reconcile(
                Path(loop.get("project_dir") or state.parent), budget, loop.get("gate_policy") or "ask"
            )
        for key, value in raise_to.items():
            old = budget.get(key)
            if value != old:
                budget[key] = value
                loop[key] = value
                notes.append(f"{key} {old} → {value}")
        if raise_to:
            journal.write(
                paths, dict(event="ceilings", changed=raise_to, by="resume"), session=session, now=now
            )
        if loop.get("status") != loops.ACTIVE:
            notes.append(f"reopened after {loop.get('outcome')}")
            loops.mark_active(paths)
            loop.update(status=loops.ACTIVE, outcome=None, ended_at=None, end_reason=None)
            try:
                paths.stop.unlink()
            except FileNotFoundError:
                pass
        if previous != session and transcript_path:
            # A new session's transcript: reading starts here, not at its beginning.
            budget["cursor"] = dict(
                starting.start_cursor(transcript_path) or budget.get("cursor") or {},
                last_ts=(budget.get("cursor") or {}).get("last_ts"),
            )
        loop["owner_session"] = session
        store.write_json(paths.lock, locks.new_lock(session, int(budget.get("iterations_used", 0)) + 1, now))
        store.write_json(paths.budget, budget)
        loop = loops.save_config(paths, loop)
    journal.write(paths, dict(event="resume", previous_owner=previous, notes=notes), session=session, now=now)
    return Resumed(paths, loop, notes)
