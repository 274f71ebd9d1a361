"""The router: what happens at a Stop, as a pure function.

``decide(snapshot)`` reads nothing and writes nothing. It returns a Decision:
continue with a prompt, stop with an outcome, pause, or step back (another live
session holds the loop), plus the records the shell must persist. Everything it
knows comes in through the Snapshot, which is what makes it fast to test and
lets ``loopwright route --explain`` show exactly why.

Order of one tick (SPEC §4): fold in what the turn did (tokens, dollars, the
agent's iteration reports, gate answers); completion (before any budget, so a
loop that finishes on its last allowed iteration is done, not exhausted); the
100% stop conditions; the gates (the 80% budget escalation is suppressed when a
100% stop fires in the same tick); the block cap; then the next prompt.
"""

from __future__ import annotations

from loopwright.core import budget as budgets
from loopwright.core import checks, gates, prompts, wrapup
from loopwright.core.answers import apply_answers, note_answer
from loopwright.core.completion import completion_claimed
from loopwright.core.modeapi import PromptParts
from loopwright.core.outcomes import (  # the outcomes are the router's vocabulary: callers read them here
    CANCELLED,
    CONTINUE,
    DEPENDENCY_CYCLE,
    EXTERNAL_UNREACHABLE,
    HOLD,
    LOOP_DONE,
    MAX_ITERATIONS,
    PAUSE,
    STOP,
    budget_exhausted,
    gate_stop,
    stopped,
)
from loopwright.core.rates import RateTable
from loopwright.core.record import REQUIRED, Record
from loopwright.core.stopping import ending, uncounted
from loopwright.core.tick import TickState, fold_turn, history_line, with_snapshot
from loopwright.core.turn import Increment

__all__ = [
    "CANCELLED",
    "CONTINUE",
    "DEPENDENCY_CYCLE",
    "EXTERNAL_UNREACHABLE",
    "HOLD",
    "LOOP_DONE",
    "MAX_ITERATIONS",
    "PAUSE",
    "STOP",
    "Decision",
    "Snapshot",
    "budget_exhausted",
    "completion_claimed",
    "decide",
    "gate_stop",
    "initial_budget",
    "needs_judgement",
    "needs_verification",
    "stopped",
]

# Lock states as the shell observed them.
LOCK_OURS, LOCK_FREE, LOCK_STALE, LOCK_FOREIGN = "ours", "free", "stale", "foreign"


class Snapshot(Record):
    FIELDS = (
        ("now", REQUIRED),
        ("session_id", REQUIRED),
        ("loop", REQUIRED),
        ("budget", REQUIRED),
        ("turn", REQUIRED),
        ("last_message", None),
        ("stop_hook_active", False),
        ("stop_request", None),
        ("cancelled", False),
        ("lock", None),
        ("lock_state", LOCK_OURS),
        ("block_cap", 8),
        ("reports", ()),
        ("rates", None),
        ("tasks", None),
        ("tasks_text", ""),
        ("tasks_pressure", None),
        ("verify_result", None),
        ("judge_result", None),
        ("backprop_pending", None),
        ("mode", None),
        ("observation", None),
        ("handoff_path", None),
    )

    now: float
    session_id: str
    loop: dict
    budget: dict
    turn: Increment
    last_message: str | None
    stop_hook_active: bool
    stop_request: dict | None
    cancelled: bool
    lock: dict | None
    lock_state: str
    block_cap: int
    reports: tuple
    rates: RateTable | None
    tasks: object  # tasks.Registry or taskindex.TasksView: counts, heads, the cycle
    tasks_text: str  # the tasks section of the next prompt, rendered by the shell
    tasks_pressure: str | None  # one line when the open tasks pile up
    verify_result: dict | None  # the completion check, when it ran this tick
    judge_result: dict | None  # the completion judge's run, when it ran this tick (core/judge.py)
    backprop_pending: dict | None  # a failure waiting to open the next prompt
    mode: object  # the loop's mode (core.modeapi.Mode), looked up by the shell
    observation: object  # what the mode's observe() read at this Stop
    handoff_path: str | None  # where the wrap-up turn writes its handoff (core/wrapup.py)


class Decision(Record):
    FIELDS = (
        ("action", REQUIRED),
        ("reason", REQUIRED),
        ("outcome", None),
        ("iteration", 0),
        ("prompt", None),
        ("system_message", None),
        ("budget", None),
        ("history", None),
        ("journal", []),
        ("backprop_new", None),
        ("backprop_delivered", None),
    )

    action: str
    reason: str
    outcome: str | None
    iteration: int
    prompt: str | None
    system_message: str | None
    budget: dict | None
    history: dict | None
    journal: list[dict]
    backprop_new: dict | None  # write backprop-pending.json
    backprop_delivered: dict | None  # the pending failure this prompt carries: log it, clear it


def initial_budget(loop: dict) -> dict:
    return budgets.initial(loop)


def needs_verification(snap: Snapshot) -> bool:
    """Whether this Stop must run the loop's --verify check: completion is claimed
    and no task is open (the task gate rejects it first)."""
    if not snap.loop.get("verify") or snap.cancelled or wrapup.open_record(snap.budget):
        return False
    if snap.tasks is not None and snap.tasks.open_count:
        return False
    return completion_claimed(snap)[0]


def needs_judgement(snap: Snapshot) -> bool:
    """Whether this Stop must ask the loop's --judge: a claim the task gate and the
    --verify check (run first) let through, outside a wrap-up turn (core/judge.py)."""
    if not snap.loop.get("judge"):
        return False  # no judge in this loop: a Stop does not even load its module
    from loopwright.core import judge

    return judge.wanted(snap)


def decide(snap: Snapshot) -> Decision:
    """One tick, as named phases (SPEC §4): fold in the turn, gate answers, the mode's
    step, completion and the 100% stops (or the wrap-up turn they earn), the 80% gates,
    the pauses, the next prompt."""
    if snap.lock_state == LOCK_FOREIGN:
        return _hold(snap)
    t = TickState(snap)
    before = fold_turn(t)
    if wrapup.open_record(t.budget):
        return _close_wrap_up(t)
    outcome, reason, fired = apply_answers(t)
    mstep = _mode_step(t)
    if outcome is None:
        outcome, reason, fired = ending(t, mstep)
    if outcome is None:
        outcome, reason, fired = wrapup.short_of_reserve(t.budget, uncounted(snap))
    history = history_line(t, outcome, fired)
    if outcome is not None:
        t.budget["pending_gates"] = []
        earns, why = wrapup.earns_turn(t.budget, outcome, uncounted(snap))
        if earns:
            return _open_wrap_up(t, history, outcome, reason, fired)
        if why:
            t.journal.append({"event": "wrap-up", "skipped": why})
        return _finish(t, history, STOP, reason, outcome=outcome, fired=fired)
    if t.rejected:
        history["completion_rejected"] = t.rejected
    return (
        _fire_gates(t, before, history, mstep.gates)
        or _pause_for_gates(t, history)
        or _pause_for_block_cap(t, history)
        or _next_prompt(t, mstep, history)
    )


def _open_wrap_up(t: TickState, history: dict, outcome: str, reason: str, fired: list[str]) -> Decision:
    """The loop has run out: one more turn, to write the handoff; it ends at the next Stop."""
    snap, b, loop = t.snap, t.budget, t.loop
    wrapup.open_turn(b, outcome, reason, fired, t.iteration, t.stamp)
    history["outcome"] = "wrapping-up"
    history["stop_conditions_fired"] = fired
    history["wrap_up_for"] = outcome
    extra = snap.mode.status_parts(loop, b)
    status = prompts.status_block(loop, b, t.iteration, extra)
    hint = snap.mode.wrap_up_hint(loop, b.get("mode_state"))
    prompt = wrapup.prompt(status, reason, snap.handoff_path or "handoff.md in the loop's directory", hint)
    why = f"{reason}; the agent has one wrap-up turn to write its handoff, then the loop ends with {outcome}"
    t.router["last_action"], t.router["last_reason"] = CONTINUE, why
    return Decision(
        CONTINUE,
        why,
        iteration=t.iteration,
        prompt=prompt,
        system_message=prompts.status_line(loop, b, t.iteration, extra) + f" · wrap-up turn ({outcome})",
        budget=b,
        history=with_snapshot(history, b),
        journal=t.journal
        + [{"event": "wrap-up", "outcome": outcome, "reason": reason}]
        + [{"event": "route", "decision": CONTINUE, "reason": why}],
    )


def _close_wrap_up(t: TickState) -> Decision:
    """The wrap-up turn ended: the loop ends with the outcome it already had (cancel
    during the turn ends it as cancelled). The turn is no iteration; its spend counts."""
    t.iteration -= 1
    t.budget["iterations_used"] = t.iteration
    t.counted = False
    record, over = wrapup.close_turn(t.budget, t.stamp)
    outcome, reason, fired = record["outcome"], record["reason"], list(record["fired"])
    if t.snap.cancelled:
        outcome, reason, fired = CANCELLED, "the loop was cancelled during its wrap-up turn", ["cancel"]
    spent = {"dollars": record["dollars"], "tokens": record["tokens"], "over": over}
    t.journal.append(dict({"event": "wrap-up", "ended": True}, **spent))
    t.budget["pending_gates"] = []
    history = history_line(t, outcome, fired)
    history["wrap_up"] = True
    return _finish(t, history, STOP, reason, outcome=outcome, fired=fired)


def _hold(snap: Snapshot) -> Decision:
    """Another live session holds the loop: nothing is counted."""
    holder = (snap.lock or {}).get("owner", "another session")
    it = int(snap.budget.get("iterations_used", 0)) + 1
    pid = (snap.lock or {}).get("pid")
    reason = f"Previous iteration {it} still active ({holder}, pid {pid}) — skipping this tick"
    return Decision(
        HOLD,
        reason,
        system_message=f"loopwright: {reason}; nothing was counted (see `loopwright status`)",
        journal=[{"event": "lock", "result": "held-elsewhere", "holder": holder}],
    )


def _fire_gates(t: TickState, before: dict, history: dict, mode_gates: list[dict]) -> Decision | None:
    """The 80% budget escalation, the repeated-failure gate and the mode's own gates,
    under the gate policy. Returns the stop when the policy is stop; asked gates wait in
    pending_gates."""
    b = t.budget
    fresh: list[dict] = []
    crossed = budgets.crossed(before, b, uncounted(t.snap))
    if crossed:
        fresh.append(gates.budget_escalation(b, crossed))
    failure = budgets.repeated_failure(b, t.folded)
    if failure:
        fresh.append(gates.repeated_failure(failure))
    fresh += mode_gates + t.raised_gates
    policy = t.loop.get("gate_policy") or "ask"
    for gate in fresh:
        if policy == "stop":
            t.record_gate(gate, "stop", "policy")
            reason = f"gate {gate['name']} fired and the gate policy is stop: {gate['question']}"
            b["pending_gates"] = []
            return _finish(
                t, history, STOP, reason, outcome=gate_stop(gate["name"]), fired=["prior_gate_stop"]
            )
        if policy == "continue":
            answer = gates.POLICY_CONTINUE[gate["name"]]
            t.record_gate(gate, answer, "policy")
            note_answer(t, gate, answer)
        else:
            t.record_gate(gate, None, "asked")
            b.setdefault("pending_gates", []).append(dict(gate, asked_at=t.stamp, asks=0, answer=None))
    history["gates"] = t.gates_record
    t.pending = [g for g in b.get("pending_gates") or [] if not g.get("answer")]
    for g in t.pending:
        g["asks"] = g.get("asks", 0) + 1
    return None


def _pause(t: TickState, history: dict, reason: str, why: str, message: str) -> Decision:
    router = t.router
    router["last_action"], router["last_reason"], router["paused_at"] = PAUSE, reason, t.stamp
    router["pause_why"] = why
    history["outcome"] = "paused"
    return Decision(
        PAUSE,
        reason,
        iteration=t.iteration,
        system_message=message,
        budget=t.budget,
        history=with_snapshot(history, t.budget),
        journal=t.journal + [{"event": "route", "decision": PAUSE, "reason": reason}],
        backprop_new=t.backprop_new,
    )


def _pause_for_gates(t: TickState, history: dict) -> Decision | None:
    """Gates asked MAX_ASKS times without an answer: the loop waits for the user."""
    if not t.pending or max(g["asks"] for g in t.pending) <= gates.MAX_ASKS:
        return None
    names = ", ".join(g["name"] for g in t.pending)
    reason = f"gate(s) {names} asked {gates.MAX_ASKS} times without an answer; the loop waits for the user"
    return _pause(
        t,
        history,
        reason,
        "gate",
        f"loopwright · {t.loop['name']} paused: waiting for your answer to gate(s) {names}. Answer with "
        "/loopwright:answer <gate> <option> (or `loopwright gate answer`), then send any message.",
    )


def _pause_for_block_cap(t: TickState, history: dict) -> Decision | None:
    """Claude Code would override the next block: pause before it does."""
    cap = t.snap.block_cap
    if cap <= 0 or t.router["toolless_blocks"] < cap:
        return None
    reason = (
        f"Claude Code allows {cap} Stop-hook blocks in a row without a tool call and would override "
        f"the next one, so the loop pauses after iteration {t.iteration}; it stays active and resumes at the "
        "next message"
    )
    return _pause(
        t,
        history,
        reason,
        "block-cap",
        f"loopwright · {t.loop['name']} paused after iteration {t.iteration}: Claude Code's block cap "
        f"({cap} blocks in a row without a tool call) ends this turn. The loop stays active: send any "
        "message or /loopwright:resume to continue, or /loopwright:cancel to end it.",
    )


def _next_prompt(t: TickState, mstep, history: dict) -> Decision:
    """Continue: the reason, the mode's prompt with the engine's parts, the backprop directive."""
    snap, b, loop = t.snap, t.budget, t.loop
    section = None
    if t.pending:
        names = ", ".join(g["name"] for g in t.pending)
        reason = f"iteration {t.iteration} ended; gate(s) {names} wait for the user's answer"
        section = gates.prompt_section(t.pending, max(g["asks"] for g in t.pending))
    else:
        reason = (
            f"iteration {t.iteration} ended without the completion sentinel; "
            f"iteration {t.iteration + 1} begins"
        )
    if t.rejected:
        by = {"tasks": "task gate", "judge": "completion judge"}.get(t.rejected, "completion check")
        reason = f"iteration {t.iteration} claimed completion, rejected by the {by}"
    reason = mstep.reason or reason
    t.router["last_action"], t.router["last_reason"] = CONTINUE, reason
    if mstep.handover:
        b["mode_state"] = dict(b.get("mode_state") or {}, **mstep.handover)
    prompt = snap.mode.prompt(loop, b.get("mode_state"), _prompt_parts(t, section), t.tick)
    backprop = t.backprop_new or snap.backprop_pending
    if backprop:
        prompt = checks.directive(backprop) + "\n\n" + prompt
    status = prompts.status_line(loop, b, t.iteration + 1, snap.mode.status_parts(loop, b))
    if t.judged:  # the judge's word on this claim opens the prompt
        from loopwright.core import judge

        prompt = judge.directive(t.judged) + "\n\n" + prompt
        status += judge.status_note(t.judged)
    return Decision(
        CONTINUE,
        reason,
        iteration=t.iteration,
        prompt=prompt,
        system_message=status + (" · completion check failed" if t.backprop_new else ""),
        budget=b,
        history=with_snapshot(history, b),
        journal=t.journal + [{"event": "route", "decision": CONTINUE, "reason": reason}],
        backprop_new=t.backprop_new,
        backprop_delivered=backprop,
    )


def _mode_step(t: TickState):
    """The mode's part of the decision, folded into the tick."""
    t.tick.answers = tuple(t.answers)
    step = t.snap.mode.step(t.budget.get("mode_state"), t.snap.observation, t.tick)
    b = t.budget
    b["mode_state"] = step.state
    t.notes += step.notes
    t.journal += step.journal
    if step.report:
        budgets.fold_observed(b, t.folded, step.report)
    if not step.counted:
        t.counted = False
        t.iteration -= 1
        b["iterations_used"] = t.iteration
        t.tick.iteration = t.iteration
    return step


def _prompt_parts(t: TickState, gate_section: str | None) -> PromptParts:
    snap, b = t.snap, t.budget
    return PromptParts(
        status=prompts.status_block(t.loop, b, t.iteration + 1, snap.mode.status_parts(t.loop, b)),
        notes=t.notes,
        gates=gate_section,
        tasks=snap.tasks_text,
        pressure=snap.tasks_pressure,
    )


def _finish(
    t: TickState, history: dict, action: str, reason: str, *, outcome: str, fired: list[str]
) -> Decision:
    t.router["last_action"], t.router["last_reason"] = STOP, reason
    history["outcome"] = outcome
    history["stop_conditions_fired"] = fired
    history["gates"] = t.gates_record
    return Decision(
        STOP,
        reason,
        outcome=outcome,
        iteration=t.iteration,
        budget=t.budget,
        history=with_snapshot(history, t.budget),
        journal=t.journal + [{"event": "route", "decision": STOP, "outcome": outcome, "reason": reason}],
    )
