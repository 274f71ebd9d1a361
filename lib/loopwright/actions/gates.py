"""Answering a loop's gates between turns: the user's answer to a waiting gate (the next
Stop acts on it), and the force-unlock gate, asked when a resume would displace a live
owner and acted on at once."""

from __future__ import annotations

import time
from pathlib import Path

from loopwright.actions.pick import config, pick_loop, read_budget
from loopwright.actions.takeover import Resumed, take_over
from loopwright.core import gates, router
from loopwright.state import journal, loops, store
from loopwright.state import lock as locks
from loopwright.tick import ending


def answer_gate(
    state: Path,
    name: str | None,
    session: str | None,
    gate_name: str,
    answer: str,
    raise_to: dict | None = None,
) -> str:
    """Record the user's answer to a waiting gate; the next Stop acts on it.
    A force-unlock ``yes`` takes the loop over right away."""
    raise_to = {k: v for k, v in (raise_to or {}).items() if v is not None}
    paths = pick_loop(state, name, session, active_only=False)
    now = time.time()
    gate = _record_answer(paths, gate_name, answer, raise_to, now)
    journal.write(
        paths,
        dict(event="gate", gate=gate_name, answer=answer, by="user", question=gate["question"]),
        session=session,
        now=now,
    )
    if gate_name == gates.FORCE_UNLOCK:
        return _act_on_force_unlock(state, paths, session, gate, answer, now)
    return (
        f"loopwright: recorded {answer!r} for gate {gate_name} of loop {paths.name}; "
        "it takes effect when this turn ends."
    )


def _record_answer(paths: loops.LoopPaths, gate_name: str, answer: str, raise_to: dict, now: float) -> dict:
    """Check the answer against the waiting gate and store it; returns the gate. A
    force-unlock answer is logged at once: no Stop of the loop's owner will act on it."""
    with loops.loop_mutex(paths):
        loop = config(paths)
        paths.configured(loop)
        budget = read_budget(paths, loop)
        try:
            gate = gates.validate_answer(budget.get("pending_gates") or [], gate_name, answer)
        except ValueError as exc:
            raise loops.LoopError(str(exc)) from None
        if raise_to and (gate_name != gates.BUDGET_ESCALATION or answer != "raise"):
            raise loops.LoopError("--max-* values go only with: gate answer budget-escalation raise")
        gate.update(answer=answer, answered_at=locks.now_iso(now), answered_by="user")
        if raise_to:
            gate["raise_to"] = raise_to
        if gate_name == gates.FORCE_UNLOCK:
            budget["pending_gates"] = [g for g in budget["pending_gates"] if g is not gate]
            _log_gate(budget, gate, answer, now, "user")
        store.write_json(paths.budget, budget)
    return gate


def _act_on_force_unlock(
    state: Path, paths: loops.LoopPaths, session: str | None, gate: dict, answer: str, now: float
) -> str:
    if answer == "yes":
        requester = gate.get("requested_by") or session
        taken = ["force-unlocked by the user"]
        res = take_over(paths, requester, gate.get("raise_to") or {}, taken, now, state)
        owner = res.loop.get("owner_session")
        return f"loopwright: force-unlock confirmed; loop {res.paths.name} now belongs to session {owner}."
    if answer != "stop":
        return f"loopwright: the live lock of loop {paths.name} was left alone."
    with loops.loop_mutex(paths):
        loop = config(paths)
        if loop.get("status") == loops.ACTIVE:
            why = "the user answered stop at gate force-unlock"
            outcome = router.gate_stop(gates.FORCE_UNLOCK)
            return ending.end_loop(paths, loop, read_budget(paths, loop, ending=True), outcome, why, now)
    return f"loopwright: loop {paths.name} stays ended."


def ask_force_unlock(
    paths: loops.LoopPaths,
    loop: dict,
    session: str | None,
    raise_to: dict,
    now: float,
    notes: list[str],
) -> Resumed | None:
    """``--lock force``: the force-unlock gate decides. Returns the waiting result when the
    gate asks the user; None when the policy lets the take-over go ahead."""
    policy = loop.get("gate_policy") or "ask"
    gate = gates.force_unlock()
    if policy == "stop":
        raise loops.LoopError(
            "the force-unlock gate fired and the gate policy is stop; the live lock was left alone"
        )
    if policy == "ask":
        with loops.loop_mutex(paths):
            budget = read_budget(paths, loop)
            pending = [g for g in budget.get("pending_gates") or [] if g["name"] != gates.FORCE_UNLOCK]
            asked = dict(gate, asked_at=locks.now_iso(now), asks=1, answer=None)
            pending.append(dict(asked, requested_by=session, raise_to=raise_to))
            budget["pending_gates"] = pending
            store.write_json(paths.budget, budget)
        journal.write(
            paths,
            dict(event="gate", gate=gates.FORCE_UNLOCK, answer=None, by="asked", question=gate["question"]),
            session=session,
            now=now,
        )
        return Resumed(paths, loop, notes, waiting_gate=gate)
    notes.append("force-unlock: the gate policy is continue, so the live lock was taken over")
    _record_policy_gate(paths, loop, gate, "yes", now)
    return None


def _record_policy_gate(paths: loops.LoopPaths, loop: dict, gate: dict, answer: str, now: float) -> None:
    with loops.loop_mutex(paths):
        budget = read_budget(paths, loop)
        _log_gate(budget, gate, answer, now, "policy")
        store.write_json(paths.budget, budget)


def _log_gate(budget: dict, gate: dict, answer: str, now: float, by: str) -> None:
    """A gate answered between ticks: into this iteration's record and the loop's log."""
    entry = gates.record(gate, answer, locks.now_iso(now), by)
    budget.setdefault("gates_this_iter", []).append(entry)
    gates.log(budget, entry, int(budget.get("iterations_used", 0)) + 1)
