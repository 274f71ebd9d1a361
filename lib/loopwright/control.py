"""What a user does to loops (pick, cancel, resume), shared by the CLI and the
slash commands. Each operation raises LoopError with a one-line message."""

from __future__ import annotations

import time
from pathlib import Path

from . import lock as locks
from . import loops, report, router, store
from . import start as starting


def config(paths: loops.LoopPaths) -> dict:
    cfg = loops.load_config(paths)
    if cfg is None:
        raise loops.LoopError(f"loop {paths.name} has no loop.json; remove it with `loopwright teardown {paths.name} --force`")
    return cfg


def pick_loop(state: Path, name: str | None, session: str | None, *, active_only: bool = True) -> loops.LoopPaths:
    """The loop named, else the active loop owned by ``session``, else the only active loop."""
    if name:
        loops.validate_name(name)
        paths = loops.LoopPaths(state, name)
        if not paths.dir.is_dir():
            known = ", ".join(loops.loop_names(state)) or "none"
            raise loops.LoopError(f"no loop named {name} in {state} (loops: {known})")
        return paths
    active = []
    for n in loops.active_names(state):
        paths = loops.LoopPaths(state, n)
        try:
            cfg = loops.load_config(paths)
        except store.CorruptFile:
            continue
        if cfg and cfg.get("status") == loops.ACTIVE:
            if session and cfg.get("owner_session") == session:
                return paths
            active.append(paths)
    if len(active) == 1:
        return active[0]
    if not active:
        if not active_only:
            names = loops.loop_names(state)
            if len(names) == 1:
                return loops.LoopPaths(state, names[0])
        raise loops.LoopError(f"no active loop in {state.parent}; start one with /loopwright:loop or `loopwright start`")
    raise loops.LoopError(f"several loops are active ({', '.join(p.name for p in active)}); name one")


def cancel(state: Path, name: str | None, session: str | None, reason: str = "cancelled by the user") -> str:
    """Cancel for good: the tombstone goes down first, so no later Stop can
    continue or revive the loop, then the loop is ended with a report."""
    paths = pick_loop(state, name, session)
    now = time.time()
    try:
        with open(paths.tombstone, "x", encoding="utf-8") as fh:
            fh.write(f"{locks.now_iso(now)} {reason}\n")
    except FileExistsError:
        pass
    with loops.loop_mutex(paths):
        loop = config(paths)
        if loop.get("status") != loops.ACTIVE:
            loops.clear_active(paths)
            return f"loopwright: loop {paths.name} had already ended ({loop.get('outcome')}); it stays ended."
        budget = store.read_json(paths.budget) or router.initial_budget(loop)
        summary = report.end_loop(paths, loop, budget, router.CANCELLED, reason, now)
    store.append_jsonl(paths.journal, {"at": locks.now_iso(now), "loop": paths.name, "session": session, "event": "cancel", "reason": reason})
    return summary


def resume(state: Path, name: str | None, session: str | None) -> tuple[loops.LoopPaths, dict]:
    """Continue an active loop in ``session``: after an interrupt or the block cap,
    or taking over a loop whose session died. A live owner is never displaced."""
    paths = pick_loop(state, name, session)
    now = time.time()
    with loops.loop_mutex(paths):
        loop = config(paths)
        if loops.is_cancelled(paths) or loop.get("status") != loops.ACTIVE:
            raise loops.LoopError(f"loop {paths.name} has ended ({loop.get('outcome')}); start a new loop with /loopwright:loop")
        owner = loop.get("owner_session")
        if owner != session:
            lk = store.read_json(paths.lock)
            if lk and lk.get("owner") != locks.owner_tag(session) and not locks.is_stale(lk, now):
                raise loops.LoopError(
                    f"loop {paths.name} is held by {locks.describe(lk)}, which is alive; "
                    "wait for it to finish, or cancel it with `loopwright cancel`"
                )
            if session and starting.owned_active_loop(state, session):
                raise loops.LoopError("this session already runs another loop; finish or cancel it first")
            loop["owner_session"] = session
            store.write_json(paths.config, loop)
            budget = store.read_json(paths.budget) or {}
            pid, ctime = locks.claude_process()
            store.write_json(paths.lock, locks.new_lock(session, pid, ctime, int(budget.get("iterations_used", 0)) + 1, now))
    store.append_jsonl(paths.journal, {"at": locks.now_iso(now), "loop": paths.name, "session": session, "event": "resume", "previous_owner": owner})
    return paths, loop
