"""Which loop a command acts on (pick_loop), and its loop.json and budget.json read with
one-line errors. Every action on a loop starts here."""

from __future__ import annotations

import os
from pathlib import Path

from loopwright.core import budget as budgets
from loopwright.core import router
from loopwright.state import loops


def config(paths: loops.LoopPaths) -> dict:
    cfg = loops.load_config(paths)
    if cfg is None:
        raise loops.LoopError(
            f"loop {paths.name} has no loop.json; remove it with `loopwright teardown {paths.name} --force`"
        )
    return cfg


def pick_loop(
    state: Path,
    name: str | None,
    session: str | None,
    *,
    active_only: bool = True,
    own_only: bool = False,
    trusted: bool = True,
) -> loops.LoopPaths:
    """The loop named, else the active loop owned by ``session``, else (unless
    ``own_only``) the only active loop, else (unless ``active_only``) the only loop.
    A loop this user's loopwright did not create is refused (UntrustedLoop) unless
    ``trusted`` is false (status, adopt and teardown look at such loops)."""
    loops.check_dirs(state)
    if name:
        loops.validate_name(name)
        paths = loops.LoopPaths(state, name)
        if not os.path.isdir(paths.dir):
            known = ", ".join(loops.loop_names(state)) or "none"
            raise loops.LoopError(f"no loop named {name} in {state} (loops: {known})")
        if trusted:
            loops.load_config(paths)  # raises UntrustedLoop for a loop that is not ours
        return paths
    active = []
    for found in loops.scan_active(state):
        if found.config is None:
            continue  # untrusted or damaged: only acted on when named (and then refused)
        if session and found.config.get("owner_session") == session:
            return found.paths
        active.append(found.paths)
    if own_only and session:
        raise loops.LoopError("this session runs no loop; name the loop to act on another session's loop")
    if len(active) == 1:
        return active[0]
    if not active:
        if not active_only:
            names = loops.loop_names(state)
            if len(names) == 1:
                return pick_loop(state, names[0], session, trusted=trusted)
            if names:
                raise loops.LoopError(f"no active loop; name one of: {', '.join(names)}")
        raise loops.LoopError(
            f"no active loop in {state.parent}; start one with /loopwright:loop or `loopwright start`"
        )
    raise loops.LoopError(f"several loops are active ({', '.join(p.name for p in active)}); name one")


def read_budget(paths: loops.LoopPaths, loop: dict, *, ending: bool = False, restoring: bool = False) -> dict:
    """The loop's budget.json. A missing one is never made again from zero, which would reset
    the loop's spend (StateMissing). Only the report of a loop that is ending starts from zero,
    and a resume (``restoring``) from the counters of the last history line."""
    budget = loops.read_state(paths.configured(loop), "budget")
    if budget is None:
        if not (ending or (restoring and loops.last_snapshot(paths) is not None)):
            raise loops.StateMissing(paths.name, paths.budget.name)
        budget = router.initial_budget(loop)
    return budgets.upgrade(budget, loop)
