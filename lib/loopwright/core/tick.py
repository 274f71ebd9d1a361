"""One tick's working state and the turn folded into it: time, tokens, dollars,
the agent's reports, the block-cap bookkeeping and the iteration's history line."""

from __future__ import annotations

from loopwright.core import budget as budgets
from loopwright.core import gates, wrapup
from loopwright.core.clock import now_iso
from loopwright.core.modeapi import Tick
from loopwright.core.outcomes import CONTINUE, PAUSE
from loopwright.core.rates import RateTable, table


class TickState:
    """Working state of one decision."""

    def __init__(self, snap):
        self.snap = snap
        self.loop = snap.loop
        self.budget = b = budgets.upgrade(deep_copy(snap.budget), snap.loop)
        self.router = b["router"]
        self.iteration = int(b.get("iterations_used", 0)) + 1
        self.journal: list[dict] = []
        self.notes: list[str] = []
        self.gates_record: list[dict] = list(b.get("gates_this_iter") or [])
        b["gates_this_iter"] = []
        self.stamp = now_iso(snap.now)
        self.rejected: str | None = None
        self.backprop_new: dict | None = None
        self.judged: dict | None = None  # the completion judge's word on this tick's claim
        self.raised_gates: list[dict] = []  # gates a phase of this tick raised (the judge's)
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


def deep_copy(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: deep_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [deep_copy(v) for v in obj]
    return obj


def fold_turn(t) -> dict:
    """What the turn did: time, tokens, dollars, the agent's reports. Returns the usage before it."""
    snap, b = t.snap, t.budget
    before = budgets.usage_of(b)
    before["iterations"] = float(b.get("iterations_used", 0))
    b["minutes_elapsed"] = budgets.minutes_elapsed(b, snap.now)
    t.delta = budgets.add_usage(b, snap.turn.usage)
    if snap.judge_result:  # the judge's tokens count with the turn's, before the pricing below
        from loopwright.core import judge

        judge.fold(t)
    b["cursor"] = snap.turn.cursor.to_dict()
    t.dollars_before = float(b.get("dollars_estimate", 0.0))
    price(t, snap.rates or table(None))
    tokens = t.delta["input_tokens"] + t.delta["output_tokens"]
    wrapup.note_turn(b, b["dollars_estimate"] - t.dollars_before, tokens, snap.turn.requests)
    t.folded = budgets.fold_reports(b, list(snap.reports), skip=snap.mode.self_counted)
    b["iterations_used"] = t.iteration
    for note in snap.turn.notes:
        t.journal.append({"event": "transcript", "note": note})
    if snap.turn.compacted:
        t.journal.append({"event": "compaction", "iteration": t.iteration})
    track_pauses(t)
    return before


def price(t, rate_table: RateTable) -> None:
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


def history_line(t, outcome: str | None, fired: list[str]) -> dict:
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
    if t.judged:
        history["judge"] = t.judged
    if not t.counted:
        history["counted"] = False  # a wait or a gate turn: time and spend, no iteration
    t.router["iteration_started_at"] = t.stamp
    t.router["last_tick_at"] = t.stamp
    return history


def track_pauses(t) -> None:
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


def with_snapshot(history: dict, b: dict) -> dict:
    history["budget_snapshot"] = {
        k: deep_copy(v)
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
