"""Committing one tick: a single atomic write, then effects that can be redone.

A Stop changes several files: budget.json, a history line, journal lines, the
token ledger, progress.json, the lock, backprop files, and at the end the report
and loop.json. A kill between any two of those writes must leave no duplicate or
missing iteration line and counters that agree with the history. So the tick is
committed by ONE atomic replace of budget.json that carries a ``tick`` record
(the history line, the journal lines, the ledger delta, the backprop and stop
steps). Everything after that is an effect derived from the record, each one
idempotent (it checks whether it already happened), applied in a fixed order
with the ledger last. The ledger's ``iteration`` is therefore the marker that
the whole tick was applied; a tick found committed but not applied is finished
before anything else reads or decides (``recover``).
"""

from __future__ import annotations

import os

from loopwright import modes
from loopwright.core.errors import UnsafePath
from loopwright.state import claudemd, journal, loops, store, verify
from loopwright.state import lock as locks
from loopwright.state.fspath import Path

LEDGER_FIELDS = (
    "tokens_in",
    "tokens_out",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "dollars",
)
JOURNAL_TAIL = 256 * 1024  # a tick's journal lines are near the end of the file


def tick_record(loop: dict, decision, snap, journal_entries: list[dict], redactions) -> dict:
    """The commit record of a decision: everything the effects need, redacted once."""
    h = decision.history or {}
    task = next((r.get("task") for r in reversed(snap.reports) if r.get("task")), None)
    tick_id = f"{decision.iteration}-{os.urandom(6).hex()}"  # not uuid: its import costs ~3 ms
    history = claudemd.redact(h, redactions)
    if history:
        history["tick"] = tick_id  # what makes appending the line idempotent
    return {
        "id": tick_id,
        "iteration": decision.iteration,
        "action": decision.action,
        "outcome": decision.outcome,
        "reason": claudemd.redact(decision.reason, redactions),
        "session": snap.session_id,
        "history": history,
        "journal": journal_entries,
        "ledger": {
            "task": task,
            "iterations": 0 if h.get("counted") is False else 1,
            "tokens_in": h.get("tokens_in_this_iter", 0),
            "tokens_out": h.get("tokens_out_this_iter", 0),
            "cache_creation_input_tokens": h.get("cache_creation_tokens_this_iter", 0),
            "cache_read_input_tokens": h.get("cache_read_tokens_this_iter", 0),
            "dollars": h.get("dollars_this_iter", 0.0),
        },
        "backprop_new": claudemd.redact(decision.backprop_new, redactions)
        if decision.action != "continue"
        else None,
        "backprop_delivered": claudemd.redact(decision.backprop_delivered, redactions)
        if decision.action == "continue"
        else None,
        "heartbeat": locks.now_iso(snap.now),
    }


def applied(budget: dict, ledger: dict | None, loop: dict) -> bool:
    """Whether the tick committed in ``budget`` has had all its effects: an ending
    tick once loop.json says ended, any other once the ledger (written last) has it."""
    rec = budget.get("tick")
    if not isinstance(rec, dict):
        return True
    if rec.get("action") == "stop":
        return loop.get("status") != loops.ACTIVE
    return _seen(ledger or {}, rec)


def _seen(record: dict | None, rec: dict) -> bool:
    """Whether a history line or the ledger already holds the tick ``rec``: by the tick's
    id (a wait turn shares its iteration number with the turn before), or by the iteration
    number for what versions without tick ids wrote."""
    if not record or record.get("iteration") is None:
        return False
    if record.get("tick") is not None:
        return record["tick"] == rec["id"]
    return int(record.get("iteration") or 0) >= int(rec.get("iteration") or 0)


def finish(paths: loops.LoopPaths, loop: dict, budget: dict, ledger: dict | None, redactions) -> str | None:
    """Apply the effects of the tick committed in ``budget``; returns the end summary
    when the tick ended the loop. Safe to run again after a kill at any point."""
    rec = budget["tick"]
    _history(paths, rec)
    _journal(paths, rec)
    if rec["action"] == "stop":
        _ledger(paths, rec, ledger, loop)
        return _end(paths, loop, budget, rec, redactions)  # loop.json says ended: the last write
    _backprop(paths, rec, redactions)
    write_progress(paths, loop, budget, rec)
    if rec["action"] == "continue":
        _heartbeat(paths, rec)
    _ledger(paths, rec, ledger, loop)  # the ledger's iteration marks the tick as applied: last
    return None


def recover(paths: loops.LoopPaths, loop: dict, redactions=()) -> str | None:
    """Finish a tick that was committed but not fully applied (the writer was killed).
    Call with the loop mutex held, before reading state for a new decision."""
    budget = loops.read_state(paths, "budget")
    if not budget or not isinstance(budget.get("tick"), dict):
        return None
    ledger = loops.read_state(
        paths, "ledger"
    )  # a damaged ledger stops the loop (CorruptFile), never resets it
    if applied(budget, ledger, loop):
        return None
    return finish(paths, loop, budget, ledger, redactions)


def _history(paths: loops.LoopPaths, rec: dict) -> None:
    from loopwright.core.schema import HISTORY

    try:
        last = store.last_jsonl_record(paths.history, spec=HISTORY)
    except UnsafePath:
        _set_aside(paths, paths.history, rec)
        last = None
    if rec["history"] and not _seen(last, rec):
        # Not flushed: budget.json, flushed, carries the line until the next tick commits, and
        # the file system keeps the append in order with that commit (see store.write_bytes_atomic).
        store.append_jsonl_many(paths.history, [rec["history"]], durable=False)


def _set_aside(paths: loops.LoopPaths, path: Path, rec: dict) -> None:
    """A symlink or special file where a log belongs: moved aside (the link itself, never
    its target) and reported, so the tick can still be recorded in a fresh file."""
    moved = store.move_aside(path)
    rec["journal"] = [
        *rec["journal"],
        {
            "at": rec["heartbeat"],
            "loop": paths.name,
            "session": rec["session"],
            "event": "corrupt",
            "file": path.name,
            "detail": "symlink or special file",
            "moved_to": moved.name if moved else None,
        },
    ]


def _journal(paths: loops.LoopPaths, rec: dict) -> None:
    if not rec["journal"]:
        return
    marker = f'"tick":"{rec["id"]}"'.encode()
    try:
        if marker in store.read_tail(paths.journal, JOURNAL_TAIL):
            return
    except UnsafePath:
        _set_aside(paths, paths.journal, rec)
    journal.append(paths, [dict(e, tick=rec["id"]) for e in rec["journal"]])


def _tail(path, size: int) -> bytes:
    try:
        return store.read_tail(path, size)
    except (UnsafePath, OSError):
        return b""


def _backprop(paths: loops.LoopPaths, rec: dict, redactions) -> None:
    if rec.get("backprop_new") is not None:
        store.write_json(paths.backprop_pending, rec["backprop_new"])  # delivered by a later prompt
    delivered = rec.get("backprop_delivered")
    if delivered is None:
        return
    entry = claudemd.redact(verify.log_entry(delivered, rec["iteration"], rec["heartbeat"]), redactions)
    with store.file_lock(paths.backprop_log.with_name(".backprop-log.lock")):
        if not _tail(paths.backprop_log, len(entry.encode())).endswith(entry.encode()):
            store.append_text(paths.backprop_log, entry)
    try:
        paths.backprop_pending.unlink()  # consumed: this prompt carries it
    except FileNotFoundError:
        pass


def _heartbeat(paths: loops.LoopPaths, rec: dict) -> None:
    try:
        lock = loops.read_state(paths, "lock")
    except store.CorruptFile:
        lock = None
    if not lock or lock.get("owner") != locks.owner_tag(rec["session"]):
        lock = locks.new_lock(
            rec["session"], rec["iteration"], locks.parse_iso(rec["heartbeat"])
        )  # free or stale
    # Not flushed to disk: after the machine dies the lock is stale whatever it says.
    beat = dict(lock, heartbeat_at=rec["heartbeat"], iteration=rec["iteration"] + 1)
    store.write_json(paths.lock, beat, durable=False)


def _end(paths: loops.LoopPaths, loop: dict, budget: dict, rec: dict, redactions) -> str:
    from loopwright.tick import ending

    try:
        paths.backprop_pending.unlink()  # nothing is left to hand it to
    except FileNotFoundError:
        pass
    write_progress(paths, loop, budget, rec)
    current = loops.load_config(paths)
    if current is None or current.get("status") != loops.ACTIVE:
        return ending.summary_line(loop, budget, rec["outcome"], paths)
    modes.get(loop["mode"]).end(loop, rec["outcome"])
    now = locks.parse_iso(rec["heartbeat"])
    return ending.end_loop(paths, current, budget, rec["outcome"], rec["reason"], now, redactions)


def _ledger(paths: loops.LoopPaths, rec: dict, ledger: dict | None, loop: dict) -> None:
    """Token tallies per session and per task (the latest task an iteration report named)."""
    ledger = dict(ledger or {})
    if _seen(ledger, rec):
        return
    delta = dict(rec["ledger"])
    delta.setdefault("iterations", 1)
    task = delta.pop("task", None) or ledger.get("current_task") or loop["name"]
    ledger["current_task"] = task
    for kind, key in (("sessions", rec["session"]), ("tasks", task)):
        slot = ledger.setdefault(kind, {}).setdefault(key, {})
        for k, v in delta.items():
            slot[k] = round(slot.get(k, 0) + v, 6) if k == "dollars" else slot.get(k, 0) + v
    ledger["iteration"], ledger["tick"] = rec["iteration"], rec["id"]
    # Not flushed: a ledger that lost this write after a crash makes recover() apply the tick
    # again, which is idempotent.
    store.write_json(paths.ledger, ledger, durable=False)


def write_progress(paths: loops.LoopPaths, loop: dict, budget: dict, rec: dict) -> None:
    b = budget
    store.write_json(
        paths.progress,
        {
            "name": loop["name"],
            "mode": loop["mode"],
            "status": loops.ENDED if rec["action"] == "stop" else loops.ACTIVE,
            "paused": rec["action"] == "pause",
            "outcome": rec["outcome"],
            "iteration": rec["iteration"],
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
            "last_reason": rec["reason"],
            "updated_at": rec["heartbeat"],
        },
        durable=False,  # a summary of budget.json, rewritten every tick
    )
