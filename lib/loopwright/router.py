"""The router: what happens at a Stop, as a pure function.

``decide(snapshot)`` reads nothing and writes nothing. It returns a Decision:
continue with a prompt, stop with an outcome, step back (another live session
holds the loop) — and the records the shell must persist. Everything it knows
comes in through the Snapshot, which is what makes it fast to test and lets
``loopwright route --explain`` show exactly why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import prompts
from .completion import has_sentinel
from .lock import now_iso, parse_iso
from .transcript import USAGE_FIELDS, Increment

CONTINUE, STOP, HOLD, PAUSE = "continue", "stop", "hold", "pause"

# Terminal outcomes (SPEC §4.11).
LOOP_DONE = "LOOP_DONE"
MAX_ITERATIONS = "MAX_ITERATIONS"
CANCELLED = "CANCELLED"
LOCK_CONFLICT = "LOCK_CONFLICT"


def budget_exhausted(what: str) -> str:
    return f"BUDGET_EXHAUSTED:{what}"


def stopped(reason: str) -> str:
    return f"STOPPED:{reason}"


# Lock states as the shell observed them.
LOCK_OURS, LOCK_FREE, LOCK_STALE, LOCK_FOREIGN = "ours", "free", "stale", "foreign"


@dataclass(frozen=True)
class Snapshot:
    now: float
    session_id: str
    loop: dict
    budget: dict
    turn: Increment
    last_message: str | None = None
    stop_hook_active: bool = False
    stop_request: dict | None = None
    cancelled: bool = False
    lock: dict | None = None
    lock_state: str = LOCK_OURS
    block_cap: int = 8


@dataclass
class Decision:
    action: str
    reason: str
    outcome: str | None = None
    iteration: int = 0
    prompt: str | None = None
    system_message: str | None = None
    budget: dict | None = None
    history: dict | None = None
    journal: list[dict] = field(default_factory=list)
    stop_conditions: list[str] = field(default_factory=list)

    @property
    def ends_loop(self) -> bool:
        return self.action == STOP


def initial_budget(loop: dict) -> dict:
    """budget.json as first written: the frozen ceilings and zeroed counters."""
    return {
        "started_at": loop["started_at"],
        "max_iterations": loop["max_iterations"],
        "max_minutes": loop["max_minutes"],
        "max_tokens": loop.get("max_tokens"),
        "max_dollars": loop.get("max_dollars"),
        "iterations_used": 0,
        "minutes_elapsed": 0.0,
        "tokens_in": 0,
        "tokens_out": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "tokens_by_model": {},
        "cursor": {},
        "router": {
            "last_action": None,
            "last_reason": None,
            "last_tick_at": None,
            "toolless_blocks": 0,
            "pauses": [],
        },
    }


def _apply_usage(budget: dict, turn: Increment) -> dict[str, int]:
    delta = {f: 0 for f in USAGE_FIELDS}
    by_model = budget.setdefault("tokens_by_model", {})
    for model, counts in turn.usage.items():
        slot = by_model.setdefault(model, {f: 0 for f in USAGE_FIELDS})
        for f in USAGE_FIELDS:
            slot[f] = slot.get(f, 0) + counts.get(f, 0)
            delta[f] += counts.get(f, 0)
    budget["tokens_in"] = budget.get("tokens_in", 0) + delta["input_tokens"]
    budget["tokens_out"] = budget.get("tokens_out", 0) + delta["output_tokens"]
    for f in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        budget[f] = budget.get(f, 0) + delta[f]
    return delta


def completion_claimed(snap: Snapshot) -> tuple[bool, str]:
    """Whether the final assistant message carries the sentinel, and where it was seen."""
    promise = snap.loop["completion_promise"]
    if snap.last_message is not None:
        if has_sentinel(snap.last_message, promise):
            return True, "last_assistant_message"
        # last_assistant_message holds only the final text block; the transcript has
        # the whole message. Trust it only when it has caught up with that block.
        blocks = snap.turn.final_blocks
        if len(blocks) > 1 and blocks[-1].strip() == snap.last_message.strip():
            if has_sentinel(snap.turn.final_text, promise):
                return True, "transcript (final message)"
        return False, ""
    if has_sentinel(snap.turn.final_text, promise):
        return True, "transcript (final message)"
    return False, ""


def decide(snap: Snapshot) -> Decision:
    loop = snap.loop
    name = loop["name"]

    if snap.lock_state == LOCK_FOREIGN:
        holder = (snap.lock or {}).get("owner", "another session")
        reason = f"loop {name} is held by {holder}, which is still alive; this session steps back"
        return Decision(
            HOLD,
            reason,
            system_message=f"loopwright: {reason} (see `loopwright status`)",
            journal=[{"event": "lock", "result": "held-elsewhere", "holder": holder}],
        )

    budget = dict(snap.budget)
    budget["router"] = router = dict(budget.get("router") or {})
    router.setdefault("pauses", [])
    router["pauses"] = list(router["pauses"])
    iteration = int(budget.get("iterations_used", 0)) + 1
    journal: list[dict] = []
    notes: list[str] = []

    started = parse_iso(budget.get("started_at")) or snap.now
    budget["minutes_elapsed"] = round(max(0.0, snap.now - started) / 60.0, 3)
    delta = _apply_usage(budget, snap.turn)
    budget["cursor"] = snap.turn.cursor.to_dict()

    # Did the last block lead straight into this turn? If not, the session stopped
    # in between (the block cap, or the user interrupted) and a new user turn has
    # brought the loop back.
    if router.get("last_action") in (CONTINUE, PAUSE) and not snap.stop_hook_active:
        why = "block-cap" if router.get("last_action") == PAUSE else "interrupted"
        router["pauses"].append({"after_iteration": iteration - 1, "why": why, "resumed_at": now_iso(snap.now)})
        journal.append({"event": "resume", "why": why, "after_iteration": iteration - 1})
        notes.append(
            "the loop paused after the previous iteration "
            + ("(Claude Code's block cap: too many turns in a row without a tool call)" if why == "block-cap" else "(the session was interrupted)")
            + " and has now resumed."
        )
    # Claude Code ends the turn itself once a Stop hook has blocked `block_cap` times
    # in a row with no tool call in between; count those blocks the same way.
    if snap.turn.used_tool or not snap.stop_hook_active:
        router["toolless_blocks"] = 0
    else:
        router["toolless_blocks"] = router.get("toolless_blocks", 0) + 1
    for note in snap.turn.notes:
        journal.append({"event": "transcript", "note": note})
    if snap.turn.compacted:
        journal.append({"event": "compaction", "iteration": iteration})

    outcome, reason, fired = None, "", []
    claimed, where = completion_claimed(snap)
    if snap.cancelled:
        outcome, reason, fired = CANCELLED, "the loop was cancelled", ["cancel"]
    elif claimed:
        outcome, reason = LOOP_DONE, f"the agent ended its final message with the completion sentinel ({where})"
        fired = ["completion"]
    elif snap.stop_request is not None:
        why = str(snap.stop_request.get("reason") or "requested")
        outcome, reason, fired = stopped(why), f"a stop was requested ({why})", ["stop_request"]
    elif iteration >= int(loop["max_iterations"]):
        outcome = MAX_ITERATIONS
        reason = f"iteration {iteration} of {loop['max_iterations']} ended without the completion sentinel"
        fired = ["iteration_budget"]
    elif loop.get("max_minutes") and budget["minutes_elapsed"] >= float(loop["max_minutes"]):
        outcome = budget_exhausted("minutes")
        reason = f"{budget['minutes_elapsed']:.1f} of {loop['max_minutes']} minutes used"
        fired = ["wall_clock_budget"]
    elif loop.get("max_tokens") and prompts.tokens_total(budget) >= int(loop["max_tokens"]):
        outcome = budget_exhausted("tokens")
        reason = f"{prompts.tokens_total(budget)} of {loop['max_tokens']} tokens used"
        fired = ["token_budget"]

    budget["iterations_used"] = iteration
    router["last_tick_at"] = now_iso(snap.now)
    history = {
        "iteration": iteration,
        "skill": loop["mode"],
        "session": snap.session_id,
        "started_at": router.get("iteration_started_at") or budget.get("started_at"),
        "ended_at": now_iso(snap.now),
        "outcome": outcome or "continued",
        "used_tool": snap.turn.used_tool,
        "tokens_in_this_iter": delta["input_tokens"],
        "tokens_out_this_iter": delta["output_tokens"],
        "cache_creation_tokens_this_iter": delta["cache_creation_input_tokens"],
        "cache_read_tokens_this_iter": delta["cache_read_input_tokens"],
        "gates": [],
        "stop_conditions_fired": fired,
    }
    router["iteration_started_at"] = now_iso(snap.now)

    if outcome is not None:
        router["last_action"], router["last_reason"] = STOP, reason
        history["budget_snapshot"] = _snapshot_of(budget)
        return Decision(
            STOP,
            reason,
            outcome=outcome,
            iteration=iteration,
            budget=budget,
            history=history,
            journal=journal + [{"event": "route", "decision": STOP, "outcome": outcome, "reason": reason}],
            stop_conditions=fired,
        )

    if snap.block_cap > 0 and router["toolless_blocks"] >= snap.block_cap:
        # Claude Code would override this block and end the turn anyway. Pause
        # openly instead: the loop stays active and the next user turn resumes it.
        reason = (
            f"iteration {iteration} was the {snap.block_cap}th turn in a row without a tool call: Claude Code's "
            "block cap ends the turn here; the loop stays active and resumes at the next message"
        )
        router["last_action"], router["last_reason"] = PAUSE, reason
        router["paused_at"] = now_iso(snap.now)
        history["outcome"] = "paused"
        history["budget_snapshot"] = _snapshot_of(budget)
        return Decision(
            PAUSE,
            reason,
            iteration=iteration,
            system_message=(
                f"loopwright · {loop['name']} paused after iteration {iteration}: Claude Code's block cap "
                f"({snap.block_cap} turns without a tool call) ends this turn. The loop stays active: send any "
                "message or /loopwright:resume to continue, or /loopwright:cancel to end it."
            ),
            budget=budget,
            history=history,
            journal=journal + [{"event": "route", "decision": PAUSE, "reason": reason}],
        )

    reason = f"iteration {iteration} ended without the completion sentinel; iteration {iteration + 1} begins"
    router["last_action"], router["last_reason"] = CONTINUE, reason
    history["budget_snapshot"] = _snapshot_of(budget)
    return Decision(
        CONTINUE,
        reason,
        iteration=iteration,
        prompt=prompts.next_prompt(loop, budget, iteration + 1, notes),
        system_message=prompts.status_line(loop, budget, iteration + 1),
        budget=budget,
        history=history,
        journal=journal + [{"event": "route", "decision": CONTINUE, "reason": reason}],
    )


def _snapshot_of(budget: dict) -> dict[str, Any]:
    return {k: v for k, v in budget.items() if k not in ("cursor", "router", "tokens_by_model")}
