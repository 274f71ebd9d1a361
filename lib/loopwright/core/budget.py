"""Budgets: the sdd budget record, folding one iteration into it, and the
100% stop conditions and 80% crossings evaluated from it. Pure functions."""

from __future__ import annotations

from loopwright.core.clock import parse_iso
from loopwright.core.record import REQUIRED, Record
from loopwright.core.turn import USAGE_FIELDS

ESCALATE_AT = 0.8
EX_QMD_UNREACHABLE = 78

# The ceilings a loop can have, in the order they are reported.
DIMENSIONS = ("iterations", "minutes", "tokens", "dollars", "prs")
CEILING_KEY = {d: f"max_{d}" for d in DIMENSIONS}
STOP_CONDITION = {
    "iterations": "iteration_budget",
    "minutes": "wall_clock_budget",
    "tokens": "token_budget",
    "dollars": "cost_budget",
    "prs": "prs_touched_budget",
}


def initial(loop: dict) -> dict:
    """budget.json as first written: every sdd field, with the frozen ceilings."""
    return {
        "started_at": loop["started_at"],
        "max_iterations": loop["max_iterations"],
        "max_prs": loop.get("max_prs"),
        "max_minutes": loop["max_minutes"],
        "max_dollars": loop.get("max_dollars"),
        "max_tokens": loop.get("max_tokens"),
        "wrap_up": loop.get("wrap_up") is not False,
        "wrap_up_floor": loop.get("wrap_up_floor"),
        "iterations_used": 0,
        "prs_touched": [],
        "comments_pushed": 0,
        "merges_attempted": 0,
        "minutes_elapsed": 0.0,
        "tokens_in": 0,
        "tokens_out": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "agents_dispatched": 0,
        "dollars_estimate": 0.0,
        "rate_table_source": None,
        "unknown_models": [],
        "qmd_failures_consecutive": 0,
        "tokens_by_model": {},
        "last_failure": None,
        "pending_gates": [],
        "gates_this_iter": [],
        "gates_log": [],
        "tracked_prs": [],
        "active_worktrees": [],
        "cursor": {},
        "reports_offset": 0,
        "router": {
            "last_action": None,
            "last_reason": None,
            "last_tick_at": None,
            "toolless_blocks": 0,
            "pauses": [],
        },
    }


LEGACY_MODE_STATE = "task"  # where versions before the mode interface kept a mode's state


def upgrade(budget: dict, loop: dict) -> dict:
    """Fill fields a budget written by an older version lacks (never ceilings)."""
    fresh = initial(loop)
    for k, v in fresh.items():
        budget.setdefault(k, v)
    if LEGACY_MODE_STATE in budget and "mode_state" not in budget:
        budget["mode_state"] = budget.pop(LEGACY_MODE_STATE)
    return budget


# --- usage ---------------------------------------------------------------------------


def add_usage(budget: dict, usage_by_model: dict[str, dict[str, int]]) -> dict[str, int]:
    delta = {f: 0 for f in USAGE_FIELDS}
    by_model = budget.setdefault("tokens_by_model", {})
    for model, counts in usage_by_model.items():
        slot = by_model.setdefault(model, {f: 0 for f in USAGE_FIELDS})
        for f in USAGE_FIELDS:
            slot[f] = slot.get(f, 0) + counts.get(f, 0)
            delta[f] += counts.get(f, 0)
    budget["tokens_in"] = budget.get("tokens_in", 0) + delta["input_tokens"]
    budget["tokens_out"] = budget.get("tokens_out", 0) + delta["output_tokens"]
    for f in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        budget[f] = budget.get(f, 0) + delta[f]
    return delta


def tokens_total(budget: dict) -> int:
    """What --max-tokens limits: input + output tokens (cache traffic is priced, not counted)."""
    return int(budget.get("tokens_in", 0)) + int(budget.get("tokens_out", 0))


# --- iteration reports -------------------------------------------------------------


class Folded(Record):
    """What this iteration's reports added."""

    FIELDS = (
        ("prs", REQUIRED),
        ("comments", 0),
        ("merges", 0),
        ("agents", 0),
        ("failure", None),
        ("outage", None),
    )

    prs: list[str]
    comments: int
    merges: int
    agents: int
    failure: dict | None
    outage: str | None


def minutes_elapsed(budget: dict, now: float) -> float:
    """Wall-clock minutes since the loop started, less the time its clock was paused (the
    headless runner waiting out a usage limit)."""
    started = parse_iso(budget.get("started_at"))
    started = now if started is None else started
    paused = float(budget.get("clock_paused_seconds") or 0.0)
    return round(max(0.0, now - started - paused) / 60.0, 3)


def _norm_sig(text: str) -> str:
    return " ".join(text.lower().split())


def fold_reports(budget: dict, reports: list[dict], skip: tuple = ()) -> Folded:
    """The agent's iteration reports folded into the budget; ``skip`` names the fields
    the loop's mode counts itself (its own observation wins over what the agent says)."""
    folded = Folded(prs=[])
    for r in reports:
        _add_counts(budget, folded, {k: v for k, v in r.items() if k not in skip})
        if r.get("outcome") == "failure" and r.get("root_cause"):
            folded.failure = {"item": r.get("item") or "", "root_cause": r["root_cause"]}
        ext = str(r.get("external_error") or "")
        if "qmd-unreachable" in ext or r.get("exit_code") == EX_QMD_UNREACHABLE:
            folded.outage = ext or f"exit code {EX_QMD_UNREACHABLE}"
    budget["qmd_failures_consecutive"] = budget.get("qmd_failures_consecutive", 0) + 1 if folded.outage else 0
    return folded


def fold_observed(budget: dict, folded: Folded, report: dict) -> None:
    """What the loop's mode saw the turn do (PRs, comments, merges, tracked PRs,
    worktrees), added to the budget and to this iteration's deltas."""
    _add_counts(budget, folded, report)


def _add_counts(budget: dict, folded: Folded, r: dict) -> None:
    touched = budget.setdefault("prs_touched", [])
    for pr in r.get("prs") or []:
        if pr not in touched:
            touched.append(pr)
        if pr not in folded.prs:
            folded.prs.append(pr)
    for key, total in (
        ("comments", "comments_pushed"),
        ("merges", "merges_attempted"),
        ("agents", "agents_dispatched"),
    ):
        n = int(r.get(key) or 0)
        setattr(folded, key, getattr(folded, key) + n)
        budget[total] = budget.get(total, 0) + n
    if r.get("tracked_prs"):
        budget["tracked_prs"] = r["tracked_prs"]
    if r.get("worktrees") is not None:
        budget["active_worktrees"] = r["worktrees"]


def repeated_failure(budget: dict, folded: Folded) -> dict | None:
    """The failure, when the same item failed last iteration with the same root cause."""
    last = budget.get("last_failure")
    now = folded.failure
    budget["last_failure"] = now
    if not (last and now):
        return None
    if last.get("item") == now["item"] and _norm_sig(last.get("root_cause", "")) == _norm_sig(
        now["root_cause"]
    ):
        return now
    return None


# --- ceilings --------------------------------------------------------------------------


def used(budget: dict, dim: str) -> float:
    if dim == "iterations":
        return float(budget.get("iterations_used", 0))
    if dim == "minutes":
        return float(budget.get("minutes_elapsed", 0.0))
    if dim == "tokens":
        return float(tokens_total(budget))
    if dim == "dollars":
        return float(budget.get("dollars_estimate", 0.0))
    return float(len(budget.get("prs_touched") or []))


def ceiling(budget: dict, dim: str) -> float | None:
    """The active ceiling, or None when the dimension is not limited (0 disables dollars)."""
    value = budget.get(CEILING_KEY[dim])
    if value is None or value == 0:
        return None
    return float(value)


def exhausted(budget: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """Dimensions at or past 100% of their ceiling."""
    out = []
    for dim in DIMENSIONS:
        if dim in skip:
            continue
        cap = ceiling(budget, dim)
        if cap is not None and used(budget, dim) >= cap:
            out.append(dim)
    return out


def crossed(before: dict[str, float], budget: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """Dimensions that crossed 80% of their ceiling during this tick."""
    out = []
    for dim in DIMENSIONS:
        if dim in skip:
            continue
        cap = ceiling(budget, dim)
        if cap is None:
            continue
        mark = ESCALATE_AT * cap
        if before.get(dim, 0.0) < mark <= used(budget, dim):
            out.append(dim)
    return out


def usage_of(budget: dict) -> dict[str, float]:
    return {dim: used(budget, dim) for dim in DIMENSIONS}


def fmt(dim: str, value: float) -> str:
    if dim == "dollars":
        return f"${value:,.2f}"
    if dim == "minutes":
        return f"{value:.0f}" if value >= 10 else f"{value:.1f}"
    return f"{int(value)}"


def describe(budget: dict, dim: str) -> str:
    cap = ceiling(budget, dim)
    return f"{dim} ({fmt(dim, used(budget, dim))}/{fmt(dim, cap) if cap is not None else 'no limit'})"


def raised(cap: float, dim: str) -> object:
    """The ceiling after a "raise" answer: half as much again, at least one more."""
    new = cap * 1.5
    if dim == "dollars":
        return round(new, 2)
    import math  # here: a C extension to load, ~0.15 ms, that no ordinary Stop needs

    return max(int(math.ceil(new)), int(cap) + 1)
