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
from loopwright.core import checks, gates, prompts
from loopwright.core.clock import now_iso
from loopwright.core.completion import has_sentinel
from loopwright.core.modeapi import DIMENSIONS, PromptParts, Tick
from loopwright.core.rates import RateTable, table
from loopwright.core.record import REQUIRED, Record
from loopwright.core.turn import Increment

CONTINUE, STOP, HOLD, PAUSE = "continue", "stop", "hold", "pause"

# Terminal outcomes (SPEC §4.11).
LOOP_DONE = "LOOP_DONE"
MAX_ITERATIONS = "MAX_ITERATIONS"
CANCELLED = "CANCELLED"
EXTERNAL_UNREACHABLE = "EXTERNAL_UNREACHABLE"
DEPENDENCY_CYCLE = "DEPENDENCY_CYCLE"
OUTAGE_LIMIT = 2  # consecutive iterations with the external service unreachable


def budget_exhausted(what: str) -> str:
    return f"BUDGET_EXHAUSTED:{what}"


def stopped(reason: str) -> str:
    return f"STOPPED:{reason}"


def gate_stop(gate: str) -> str:
    return f"GATE_STOP:{gate}"


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
        ("backprop_pending", None),
        ("mode", None),
        ("observation", None),
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
    backprop_pending: dict | None  # a failure waiting to open the next prompt
    mode: object  # the loop's mode (core.modeapi.Mode), looked up by the shell
    observation: object  # what the mode's observe() read at this Stop


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
    if not snap.loop.get("verify") or snap.cancelled:
        return False
    if snap.tasks is not None and snap.tasks.open_count:
        return False
    return completion_claimed(snap)[0]


def completion_claimed(snap: Snapshot) -> tuple[bool, str]:
    """Whether the final assistant message carries the sentinel, and where it was seen."""
    promise = snap.loop["completion_promise"]
    if snap.last_message is not None:
        if has_sentinel(snap.last_message, promise):
            return True, "last_assistant_message"
        # last_assistant_message holds only the final text block; the transcript has
        # the whole message. Trust it only when it has caught up with that block.
        blocks = snap.turn.final_blocks
        caught_up = len(blocks) > 1 and blocks[-1].strip() == snap.last_message.strip()
        if caught_up and has_sentinel(snap.turn.final_text, promise):
            return True, "transcript (final message)"
        return False, ""
    if has_sentinel(snap.turn.final_text, promise):
        return True, "transcript (final message)"
    return False, ""


class _Tick:
    """Working state of one decision."""

    def __init__(self, snap: Snapshot):
        self.snap = snap
        self.loop = snap.loop
        self.budget = b = budgets.upgrade(_copy(snap.budget), snap.loop)
        self.router = b["router"]
        self.iteration = int(b.get("iterations_used", 0)) + 1
        self.journal: list[dict] = []
        self.notes: list[str] = []
        self.gates_record: list[dict] = list(b.get("gates_this_iter") or [])
        b["gates_this_iter"] = []
        self.stamp = now_iso(snap.now)
        self.rejected: str | None = None
        self.backprop_new: dict | None = None
        self.tick = Tick(
            self.iteration,
            self.stamp,
            compacted=snap.turn.compacted,
            cancelled=snap.cancelled,
            gate_policy=snap.loop.get("gate_policy") or "ask",
        )
        self.answers: list[dict] = []  # gates answered since the last Stop, for the mode
        self.counted = True  # whether the turn that ended counts as an iteration (the mode says)
        self.pending: list[dict] = []  # gates still waiting for an answer after this tick
        self.folded: budgets.Folded | None = None
        self.delta: dict = {}
        self.dollars_before = 0.0

    def record_gate(self, gate: dict, answer: str | None, by: str) -> None:
        entry = gates.record(gate, answer, self.stamp, by)
        self.gates_record.append(entry)
        if answer is not None:
            gates.log(self.budget, entry, self.iteration)
        self.journal.append(
            {"event": "gate", "gate": gate["name"], "answer": answer, "by": by, "question": gate["question"]}
        )


def _copy(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    return obj


def decide(snap: Snapshot) -> Decision:
    """One tick, as named phases (SPEC §4): fold in the turn, gate answers, the mode's
    step, completion and the 100% stops, the 80% gates, the pauses, the next prompt."""
    if snap.lock_state == LOCK_FOREIGN:
        return _hold(snap)
    t = _Tick(snap)
    before = _fold_turn(t)
    outcome, reason, fired = _apply_answers(t)
    mstep = _mode_step(t)
    if outcome is None:
        outcome, reason, fired = _ending(t, mstep)
    history = _history(t, outcome, fired)
    if outcome is not None:
        t.budget["pending_gates"] = []
        return _finish(t, history, STOP, reason, outcome=outcome, fired=fired)
    if t.rejected:
        history["completion_rejected"] = t.rejected
    return (
        _fire_gates(t, before, history, mstep.gates)
        or _pause_for_gates(t, history)
        or _pause_for_block_cap(t, history)
        or _next_prompt(t, mstep, history)
    )


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


def _fold_turn(t: _Tick) -> dict:
    """What the turn did: time, tokens, dollars, the agent's reports. Returns the usage before it."""
    snap, b = t.snap, t.budget
    before = budgets.usage_of(b)
    before["iterations"] = float(b.get("iterations_used", 0))
    b["minutes_elapsed"] = budgets.minutes_elapsed(b, snap.now)
    t.delta = budgets.add_usage(b, snap.turn.usage)
    b["cursor"] = snap.turn.cursor.to_dict()
    t.dollars_before = float(b.get("dollars_estimate", 0.0))
    _price(t, snap.rates or table(None))
    t.folded = budgets.fold_reports(b, list(snap.reports), skip=snap.mode.self_counted)
    b["iterations_used"] = t.iteration
    for note in snap.turn.notes:
        t.journal.append({"event": "transcript", "note": note})
    if snap.turn.compacted:
        t.journal.append({"event": "compaction", "iteration": t.iteration})
    _track_pauses(t)
    return before


def _price(t: _Tick, rate_table: RateTable) -> None:
    b = t.budget
    dollars, unknown = rate_table.cost(b.get("tokens_by_model") or {})
    b["dollars_estimate"] = round(dollars, 6)
    b["rate_table_source"] = rate_table.source
    new_unknown = [m for m in unknown if m not in (b.get("unknown_models") or [])]
    b["unknown_models"] = unknown
    if new_unknown:
        t.notes.append(
            f"no price is known for model(s) {', '.join(new_unknown)}; they are priced at the highest "
            "known rate. Add them to a '### Loop Cost Rates' block in CLAUDE.md."
        )
        t.journal.append({"event": "rates", "unknown_models": new_unknown})


def _ending(t: _Tick, mstep) -> tuple[str | None, str, list[str]]:
    """The mode's own end, else completion (before any budget), else the 100% stops."""
    snap = t.snap
    if mstep.outcome and not snap.cancelled:
        return mstep.outcome, mstep.reason, mstep.fired or [f"{snap.mode.name}_lifecycle"]
    claimed, where = completion_claimed(snap) if mstep.completion else (False, "")
    return _stop_conditions(t, claimed, where, t.folded, mstep.completion)


def _history(t: _Tick, outcome: str | None, fired: list[str]) -> dict:
    """The iteration's history line (sdd's schema)."""
    snap, b, folded, delta = t.snap, t.budget, t.folded, t.delta
    history = {
        "iteration": t.iteration,
        "skill": t.loop["mode"],
        "session": snap.session_id,
        "started_at": t.router.get("iteration_started_at") or b.get("started_at"),
        "ended_at": t.stamp,
        "outcome": outcome or "continued",
        "used_tool": snap.turn.used_tool,
        "prs_touched_this_iter": folded.prs,
        "comments_pushed_this_iter": folded.comments,
        "merges_attempted_this_iter": folded.merges,
        "agents_dispatched_this_iter": folded.agents,
        "tokens_in_this_iter": delta["input_tokens"],
        "tokens_out_this_iter": delta["output_tokens"],
        "cache_creation_tokens_this_iter": delta["cache_creation_input_tokens"],
        "cache_read_tokens_this_iter": delta["cache_read_input_tokens"],
        "dollars_this_iter": round(b["dollars_estimate"] - t.dollars_before, 6),
        "tracked_prs": b.get("tracked_prs") or [],
        "active_worktrees": b.get("active_worktrees") or [],
        "gates": t.gates_record,
        "stop_conditions_fired": fired,
    }
    if not t.counted:
        history["counted"] = False  # a wait or a gate turn: time and spend, no iteration
    t.router["iteration_started_at"] = t.stamp
    t.router["last_tick_at"] = t.stamp
    return history


def _fire_gates(t: _Tick, before: dict, history: dict, mode_gates: list[dict]) -> Decision | None:
    """The 80% budget escalation, the repeated-failure gate and the mode's own gates,
    under the gate policy. Returns the stop when the policy is stop; asked gates wait in
    pending_gates."""
    b = t.budget
    fresh: list[dict] = []
    crossed = budgets.crossed(before, b, _uncounted(t.snap))
    if crossed:
        fresh.append(gates.budget_escalation(b, crossed))
    failure = budgets.repeated_failure(b, t.folded)
    if failure:
        fresh.append(gates.repeated_failure(failure))
    fresh += mode_gates
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
            _note_answer(t, gate, answer)
        else:
            t.record_gate(gate, None, "asked")
            b.setdefault("pending_gates", []).append(dict(gate, asked_at=t.stamp, asks=0, answer=None))
    history["gates"] = t.gates_record
    t.pending = [g for g in b.get("pending_gates") or [] if not g.get("answer")]
    for g in t.pending:
        g["asks"] = g.get("asks", 0) + 1
    return None


def _pause(t: _Tick, history: dict, reason: str, why: str, message: str) -> Decision:
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
        history=_snap(history, t.budget),
        journal=t.journal + [{"event": "route", "decision": PAUSE, "reason": reason}],
        backprop_new=t.backprop_new,
    )


def _pause_for_gates(t: _Tick, history: dict) -> Decision | None:
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


def _pause_for_block_cap(t: _Tick, history: dict) -> Decision | None:
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


def _next_prompt(t: _Tick, mstep, history: dict) -> Decision:
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
        by = "task gate" if t.rejected == "tasks" else "completion check"
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
    return Decision(
        CONTINUE,
        reason,
        iteration=t.iteration,
        prompt=prompt,
        system_message=status + (" · completion check failed" if t.backprop_new else ""),
        budget=b,
        history=_snap(history, b),
        journal=t.journal + [{"event": "route", "decision": CONTINUE, "reason": reason}],
        backprop_new=t.backprop_new,
        backprop_delivered=backprop,
    )


def _mode_step(t: _Tick):
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


def _uncounted(snap: Snapshot) -> tuple[str, ...]:
    """Budget dimensions whose ceilings do not stop loops of this mode."""
    return tuple(d for d in DIMENSIONS if d not in snap.mode.counted)


def _prompt_parts(t: _Tick, gate_section: str | None) -> PromptParts:
    snap, b = t.snap, t.budget
    return PromptParts(
        status=prompts.status_block(t.loop, b, t.iteration + 1, snap.mode.status_parts(t.loop, b)),
        notes=t.notes,
        gates=gate_section,
        tasks=snap.tasks_text,
        pressure=snap.tasks_pressure,
    )


def _track_pauses(t: _Tick) -> None:
    """Block-cap bookkeeping, and noticing that the session stopped in between."""
    snap, router = t.snap, t.router
    router["pauses"] = list(router.get("pauses") or [])
    # Did the last block lead straight into this turn? If not, the session stopped in
    # between (a pause, or the user interrupted) and a new user turn brought it back.
    if router.get("last_action") in (CONTINUE, PAUSE) and not snap.stop_hook_active:
        why = (
            (router.get("pause_why") or "block-cap") if router.get("last_action") == PAUSE else "interrupted"
        )
        router["pauses"].append({"after_iteration": t.iteration - 1, "why": why, "resumed_at": t.stamp})
        router.pop("pause_why", None)
        router.pop("paused_at", None)
        t.journal.append({"event": "resume", "why": why, "after_iteration": t.iteration - 1})
        words = {
            "block-cap": "(Claude Code's block cap: too many turns in a row without a tool call)",
            "gate": "(it was waiting for a gate answer)",
            "interrupted": "(the session was interrupted)",
        }
        t.notes.append(
            f"the loop paused after the previous iteration {words.get(why, '')} and has now resumed."
        )
    # Claude Code ends the turn itself once a Stop hook has blocked `block_cap` times in
    # a row with no tool call in between; count those blocks the same way.
    if snap.turn.used_tool or not snap.stop_hook_active:
        router["toolless_blocks"] = 0
    else:
        router["toolless_blocks"] = router.get("toolless_blocks", 0) + 1


def _note_answer(t: _Tick, gate: dict, answer: str) -> None:
    if gate["name"] == gates.REPEATED_FAILURE and answer == "skip":
        t.notes.append(
            f"the user chose to skip {gate.get('item') or 'the failing item'}; move on to other work."
        )
    elif gate["name"] == gates.REPEATED_FAILURE and answer == "retry":
        t.notes.append(
            f"retry {gate.get('item') or 'the failing item'} once more, with a different approach."
        )


def _apply_answers(t: _Tick) -> tuple[str | None, str, list[str]]:
    """Fold in gate answers recorded since the last tick. Returns a stop, if one was chosen."""
    b = t.budget
    still = []
    for gate in b.get("pending_gates") or []:
        answer = gate.get("answer")
        if not answer:
            still.append(gate)
            continue
        t.record_gate(gate, answer, gate.get("answered_by") or "user")
        t.answers.append(gate)
        if answer == "stop":
            b["pending_gates"] = []
            return (
                gate_stop(gate["name"]),
                f"the user answered stop at gate {gate['name']}",
                ["prior_gate_stop"],
            )
        if gate["name"] == gates.BUDGET_ESCALATION and answer == "raise":
            raised = gate.get("raise_to") or {}
            changes = []
            for dim in gate.get("dimensions") or []:
                key = budgets.CEILING_KEY[dim]
                cap = budgets.ceiling(b, dim)
                if cap is None:
                    continue
                new = raised.get(key) or budgets.raised(cap, dim)
                b[key] = new
                changes.append(f"{key} {budgets.fmt(dim, cap)} → {budgets.fmt(dim, float(new))}")
            if changes:
                t.journal.append({"event": "ceilings", "raised": changes, "by": "gate budget-escalation"})
                t.notes.append("ceilings raised at the user's request: " + "; ".join(changes) + ".")
        _note_answer(t, gate, answer)
    b["pending_gates"] = still
    return None, "", []


def _stop_conditions(
    t: _Tick, claimed: bool, where: str, folded: budgets.Folded, sentinel_applies: bool = True
) -> tuple[str | None, str, list[str]]:
    snap, b = t.snap, t.budget
    if snap.cancelled:
        return CANCELLED, "the loop was cancelled", ["cancel"]
    if claimed:
        rejected = _completion_gates(t)
        if rejected is None:
            how = " and the check passed" if snap.verify_result else ""
            return (
                LOOP_DONE,
                f"the agent ended its final message with the completion sentinel ({where}){how}",
                ["completion"],
            )
    if snap.stop_request is not None:
        why = str(snap.stop_request.get("reason") or "requested")
        return stopped(why), f"a stop was requested ({why})", ["stop_request"]
    hit = budgets.exhausted(b, _uncounted(snap))
    if hit:
        fired = [budgets.STOP_CONDITION[d] for d in hit]
        first = hit[0]
        if first == "iterations":
            unfinished = "without the completion sentinel" if sentinel_applies else "with the work unfinished"
            return (
                MAX_ITERATIONS,
                f"iteration {t.iteration} of {b['max_iterations']} ended {unfinished}",
                fired,
            )
        if first == "dollars":
            reason = f"Cost budget reached: ${b['dollars_estimate']:,.2f} / ${float(b['max_dollars']):,.2f}"
        else:
            reason = f"{budgets.describe(b, first)} reached its ceiling"
        return budget_exhausted(first), reason, fired
    cycle = snap.tasks.cycle if snap.tasks is not None else None
    if cycle:
        edges = " → ".join(cycle)
        return (
            DEPENDENCY_CYCLE,
            f"Dependency cycle detected: {edges} — please resolve manually",
            ["dependency_cycle"],
        )
    if b.get("qmd_failures_consecutive", 0) >= OUTAGE_LIMIT:
        return (
            EXTERNAL_UNREACHABLE,
            f"qmd unreachable for {OUTAGE_LIMIT} iterations ({folded.outage}) — fix per ADR-0024 (e.g., "
            "restart qmd daemon) and resume",
            ["qmd_unreachable"],
        )
    return None, "", []


def _completion_gates(t: _Tick) -> str | None:
    """None when a claimed completion stands; otherwise why it was rejected."""
    snap = t.snap
    if snap.tasks is not None and snap.tasks.open_count:
        count, ids = snap.tasks.open_count, snap.tasks.open_ids_head
        more = f" and {count - len(ids)} more" if count > len(ids) else ""
        t.journal.append({"event": "task.gate", "open": ids, "open_count": count})
        t.notes.append(
            f"you claimed completion, but {count} task(s) are still open: {', '.join(ids)}{more}. Finish "
            "them "
            "(`loopwright task complete <id>`) or remove the ones that no longer apply "
            "(`loopwright task remove <id> <reason>`), then claim completion again."
        )
        t.rejected = "tasks"
        return "tasks"
    if snap.loop.get("verify"):
        result = snap.verify_result
        if result is None:
            t.notes.append("you claimed completion, but the completion check could not run; claim it again.")
            t.rejected = "verify"
            return "verify"
        if not checks.passed(result):
            t.journal.append(
                {
                    "event": "verify",
                    "passed": False,
                    "exit_code": result.get("exit_code"),
                    "timed_out": result.get("timed_out"),
                    "command": result.get("command"),
                }
            )
            t.backprop_new = dict(result, source="verify", iteration=t.iteration)
            t.rejected = "verify"
            return "verify"
        t.journal.append(
            {
                "event": "verify",
                "passed": True,
                "command": result.get("command"),
                "seconds": result.get("seconds"),
            }
        )
    return None


def _snap(history: dict, b: dict) -> dict:
    history["budget_snapshot"] = {
        k: _copy(v)
        for k, v in b.items()
        if k
        not in (
            "cursor",
            "router",
            "tokens_by_model",
            "pending_gates",
            "gates_this_iter",
            "gates_log",
            "tracked_prs",
            "active_worktrees",
            "last_failure",
            "reports_offset",
            "tick",
            "mode_state",  # the mode's working state (an issue's text, say): budget.json keeps it
        )
    }
    return history


def _finish(t: _Tick, history: dict, action: str, reason: str, *, outcome: str, fired: list[str]) -> Decision:
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
        history=_snap(history, t.budget),
        journal=t.journal + [{"event": "route", "decision": STOP, "outcome": outcome, "reason": reason}],
    )
