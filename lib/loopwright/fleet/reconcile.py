"""A claim reconciles the database with the loop's branch: what the last worker pushed and did
not record (it went away between the two) is recorded by the next one to claim the loop.

Each pushed commit carries its iteration's record (fleet/ledger.py says what it holds and how
little of it is trusted). At claim, the commits after the one the database recorded last (the
row's ``state.head``) are read; what their records hold that the database lacks is written in
one fenced transaction with the branch's tip as the new ``state.head``: the tokens, dollars and
minutes onto the row, the dollars onto the day's spend of each of the loop's scopes (as any
boundary adds them), and the counters the new runner carries. Written once: a second claim
finds the tip recorded and reads nothing.
"""

from __future__ import annotations

import os

from loopwright.fleet import ledger, limits, spec
from loopwright.state import loops

# A test's seam (tests/e2e/test_e2e_fleet_failover.py), set by nothing else: while the file it
# names exists, a slot waits after each push, before it records the iteration (a worker that
# stops between the two, for the test to kill there).
PAUSE_AFTER_PUSH = "LOOPWRIGHT_TEST_PAUSE_AFTER_PUSH"


def pause_for_test(lost) -> None:
    path = os.environ.get(PAUSE_AFTER_PUSH)
    while path and os.path.exists(path) and not lost.is_set():
        lost.wait(0.1)


def commit(slot, iteration: int, final: bool, budget: dict, dollars: float) -> str:
    """Commits what the agent left (or nothing) with the record of the push under way: what the
    loop's ``budget`` adds to the counters of its last record, and the dollars the boundary adds
    to the spend; the commit."""
    record = ledger.record(
        slot.id, iteration, budget, slot.counted, limits.dollars_delta(dollars, slot.recorded)
    )
    subject = f"loopwright {slot.name}: iteration {iteration}{' (last)' if final else ''}"
    # The runner's exit after an iteration already pushed adds a commit only for what it left
    # (files, tokens, dollars): not an empty one recording nothing new.
    adds = any(record[k] for k in ("tokens_in", "tokens_out", "dollars", "usage"))
    empty_ok = not final or adds or iteration != slot.synced
    slot.ws.commit_all(f"{subject}\n\n{ledger.trailers(record)}", allow_empty=empty_ok)
    return slot.ws.head()


def carried(row: dict) -> dict:
    """The counters the row holds for the loop (what a runner carries), or {}."""
    state = row.get("state") if isinstance(row.get("state"), dict) else {}
    counters = state.get("counters")
    return counters if isinstance(counters, dict) else {}


def _commit(value) -> str | None:
    ok = isinstance(value, str) and len(value) in (40, 64) and all(c in "0123456789abcdef" for c in value)
    return value if ok else None


def bounds(row: dict) -> dict:
    """What one recovery may add at most: the loop's own iteration limit and dollar ceiling."""
    try:
        lim = spec.limits_of(row.get("spec"))
    except spec.SpecError:
        lim = {}
    dollars = lim.get("max_dollars", loops.DEFAULT_MAX_DOLLARS)
    return {
        "most": lim.get("max_iterations") or ledger.MAX_ITERATION,
        "most_dollars": dollars if dollars else ledger.MAX_DOLLARS,  # 0 is no ceiling
    }


def found_on_branch(slot) -> tuple[dict | None, str | None]:
    """What the records on the loop's branch hold that its row lacks, and the branch's tip."""
    row = slot.row
    state = row.get("state") if isinstance(row.get("state"), dict) else {}
    head, tip = _commit(state.get("head")), slot.ws.remote_seen
    if tip is None or head == tip:
        return None, tip
    messages, ranged = slot.ws.messages(head, tip, ledger.MAX_COMMITS)
    after_head = ranged and len(messages) < ledger.MAX_COMMITS
    records = [ledger.parse(m, slot.id) for m in messages]
    return ledger.recover(row, records, after_head=after_head, **bounds(row)), tip


def recover(slot) -> str | None:
    """Records what the branch holds that the row lacks (see the module's docstring); the slot
    goes on from the counters that makes. What was recovered was spent before the claim held
    room for the loop's next iterations: the reason the fleet's budget has none left now, if
    it has not (the loop then ends before it begins one), else None."""
    found, tip = found_on_branch(slot)
    if found is None:
        return None
    row = slot.row
    state = row.get("state") if isinstance(row.get("state"), dict) else {}
    counters = ledger.counters(carried(row), found)
    tokens = row.get("tokens") if type(row.get("tokens")) is int and row["tokens"] > 0 else 0
    progress = {
        "iteration": found["iteration"],
        "tokens": tokens + found["tokens_in"] + found["tokens_out"],
        "dollars": slot.recorded + found["dollars"],
        "minutes": max(limits.money(row.get("minutes")), found["minutes"]),
        "state": dict(state, counters=counters, head=tip),
    }
    registry = slot.w.registry

    def write():
        now = registry.fleet_loop(slot.id) or {}
        if (now.get("state") or {}).get("head") == tip:  # an attempt whose answer was lost went in
            return None
        each = limits.mean_cost(progress["dollars"], progress["iteration"])
        return registry.record_spend(slot.id, slot.gen, found["dollars"], reserve=each, **progress)

    spend = slot._retrying(write) or {}
    row.update(progress)
    slot.recorded, slot.counted, slot.synced = progress["dollars"], counters, found["iteration"]
    why = f"recovered from the branch: pushed at {tip[:12]} and never recorded (its worker went away)"
    event = {"iteration": found["iteration"], "commit": tip[:12], "dollars_this_iter": found["dollars"]}
    slot._write(registry.add_event, "iteration", dict(event, outcome="continued", reason=why))
    slot.w.log(
        "recovered", loop=slot.name, iterations=found["iterations"], dollars=found["dollars"], head=tip[:12]
    )
    return spend.get("reason") or spend.get("last")
