"""`loopwright stop`: the user asks a loop to end at its next Stop, with its report.

The request is the loop's stop file, the one the headless runner writes on a first Ctrl-C and
the monitor's Stop button writes: the session holding the loop finishes the turn under way and
its Stop hook ends the loop ``STOPPED:user_stop``. A loop no live session holds has no next
Stop to wait for, so it ends now (a resume would clear the request instead of honouring it)."""

from __future__ import annotations

import time
from pathlib import Path

from loopwright.actions import cancel
from loopwright.actions.pick import config, pick_loop
from loopwright.core.clock import now_iso
from loopwright.core.outcomes import stopped
from loopwright.state import journal, loops, store
from loopwright.state import lock as locks

REASON = "user_stop"


def stop(state: Path, name: str | None, session: str | None) -> str:
    """Ask the loop (named, else the session's, else the only active one) to stop; one line
    saying what happens next."""
    paths = pick_loop(state, name, session, own_only=bool(session) and not name)
    now = time.time()
    with loops.loop_mutex(paths):
        loop = config(paths)
        if loop.get("status") != loops.ACTIVE:
            return (
                f"loopwright: loop {paths.name} has already ended ({loop.get('outcome')}); nothing to stop."
            )
        try:
            lock = loops.read_state(paths, "lock", move_corrupt=False)
            held = lock is not None and not locks.is_stale(lock, now)
        except store.CorruptFile:
            held = True  # a lock that cannot be read may be alive: ask, do not end it under a session
        if held:
            store.write_json(paths.stop, {"reason": REASON, "timestamp": now_iso()})
    if not held:
        why = "stopped by the user while no session ran it"
        cancel.end_now(state, paths.name, stopped(REASON), why, session)
        return (
            f"loopwright: loop {paths.name} had no live session, so it ended now: {stopped(REASON)}, "
            f"report in {paths.report}."
        )
    journal.write(paths, {"event": "stop_requested", "reason": REASON}, session=session, now=now)
    return (
        f"loopwright: loop {paths.name} stops at its next Stop: its session finishes the turn under way, "
        f"then the loop ends {stopped(REASON)} with a report; `loopwright cancel {paths.name}` ends it now."
    )
