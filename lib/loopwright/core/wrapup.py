"""The wrap-up turn (SPEC §4.11), as pure functions.

A loop that runs out of iterations, minutes, PRs, tokens or dollars gets exactly one
more turn, with no new work in it: the agent writes ``handoff.md`` (what is done, what
is left, what failed, how to go on) so whoever continues, a person or ``--resume``,
does not start blind. The Stop after that turn ends the loop with the outcome it
already had, whatever the agent did.

The dollar and token ceilings still hold, the wrap-up turn included: it is taken *before*
the ceiling, as soon as what is left would not pay for one more iteration and the wrap-up
turn (a share of the ceiling before there is a cost to go by). A working turn is expected to
cost the loop's mean iteration, or its last turn when that cost more (a session's turns carry
ever more context). The wrap-up turn is expected to cost two model requests (the handoff
written with one tool call, then the turn's last word) at the dearest request so far: not an
iteration's cost, which may be one request or thirty. A loop whose dollars or tokens left would
not pay for the wrap-up turn gets none, whatever ran out: it would spend past the ceiling.
Cancel, a stop request, a gate's stop and the loop's own ends get no wrap-up turn either.
"""

from __future__ import annotations

from loopwright.core import budget as budgets
from loopwright.core.outcomes import MAX_ITERATIONS

DEFAULT_FLOOR = 0.1  # share of the dollar and token ceilings kept before a mean is known
WRAP_UP_REQUESTS = 2  # the model requests of a wrap-up turn: the handoff's tool call, the last word
PRE_CEILING = ("tokens", "dollars")  # taken before the ceiling, not after it
EXHAUSTED = "BUDGET_EXHAUSTED:"


def enabled(budget: dict) -> bool:
    return budget.get("wrap_up") is not False


def floor(budget: dict) -> float:
    value = budget.get("wrap_up_floor")
    return DEFAULT_FLOOR if value is None else float(value)


def open_record(budget: dict) -> dict | None:
    """The wrap-up under way (its turn was handed over and has not ended yet), or None."""
    record = (budget.get("router") or {}).get("wrap_up")
    return record if isinstance(record, dict) and record.get("open") else None


def dimension(outcome: str) -> str | None:
    """The budget an outcome that earns a wrap-up turn ran out of; None for other outcomes."""
    if outcome == MAX_ITERATIONS:
        return "iterations"
    if outcome.startswith(EXHAUSTED):
        return outcome[len(EXHAUSTED) :]
    return None


def note_turn(budget: dict, dollars: float, tokens: int, requests: int) -> None:
    """What the turn that ended cost, kept for the estimates below: its dollars, tokens and
    model requests, and the dearest request so far (dollars and tokens each)."""
    router = budget["router"]
    router["last_turn"] = {
        "dollars": round(max(dollars, 0.0), 6),
        "tokens": max(tokens, 0),
        "requests": requests,
    }
    if requests > 0:
        dearest = dict(router.get("dearest_request") or {})
        for dim, spent in (("dollars", dollars), ("tokens", tokens)):
            dearest[dim] = round(max(_number(dearest.get(dim)), spent / requests), 6)
        router["dearest_request"] = dearest


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def turn_cost(budget: dict, dim: str) -> float:
    """What the next working turn is expected to cost of ``dim`` (0 before anything cost)."""
    iterations = int(budget.get("iterations_used") or 0)
    mean = budgets.used(budget, dim) / iterations if iterations > 0 else 0.0
    return max(mean, _number((budget["router"].get("last_turn") or {}).get(dim)))


def wrap_up_cost(budget: dict, dim: str) -> float:
    """What the wrap-up turn is expected to cost of ``dim``: its requests at the dearest so far;
    a working turn's cost where requests were never counted (a budget from before they were)."""
    dearest = _number((budget["router"].get("dearest_request") or {}).get(dim))
    return WRAP_UP_REQUESTS * dearest if dearest > 0 else turn_cost(budget, dim)


def reserve(budget: dict, dim: str) -> float:
    """What must be left of ``dim`` for one more iteration and the wrap-up turn."""
    need = turn_cost(budget, dim) + wrap_up_cost(budget, dim)
    return need if need > 0 else floor(budget) * (budgets.ceiling(budget, dim) or 0.0)


def short_of_reserve(budget: dict, skip: tuple) -> tuple[str | None, str, list[str]]:
    """The dollar or token budget that would not pay for another iteration and the
    wrap-up: the next turn is the wrap-up, and the loop ends exhausted after it."""
    if not enabled(budget) or open_record(budget):
        return None, "", []
    short = _first_short(budget, skip, reserve)
    if short is None:
        return None, "", []
    dim, left, need = short
    reason = (
        f"{budgets.describe(budget, dim)}: what is left ({budgets.fmt(dim, left)}) would not pay for "
        f"another iteration and a wrap-up turn ({budgets.fmt(dim, need)} kept back)"
    )
    return EXHAUSTED + dim, reason, [budgets.STOP_CONDITION[dim], "wrap_up_reserve"]


def _first_short(budget: dict, skip: tuple, need_of):
    """(dimension, left, needed) of the first dollar or token ceiling whose remainder is less
    than ``need_of(budget, dimension)``, or None."""
    for dim in PRE_CEILING:
        cap = budgets.ceiling(budget, dim)
        if dim in skip or cap is None:
            continue
        left, need = cap - budgets.used(budget, dim), need_of(budget, dim)
        if left < need:
            return dim, left, need
    return None


def earns_turn(budget: dict, outcome: str, skip: tuple = ()) -> tuple[bool, str]:
    """Whether an ending gets the wrap-up turn, and why not when it does not: not when the
    dollars or tokens left (whatever ran out) would not pay for it."""
    dim = dimension(outcome)
    if dim is None or not enabled(budget) or open_record(budget):
        return False, ""
    cap = budgets.ceiling(budget, dim)
    if dim in PRE_CEILING and cap is not None and budgets.used(budget, dim) >= cap:
        return False, f"the {dim} ceiling was already reached, so there is no wrap-up turn to spend past it"
    short = _first_short(budget, skip, wrap_up_cost)
    if short is None:
        return True, ""
    each, left, need = short
    return False, (
        f"what is left of the {each} ceiling ({budgets.fmt(each, left)}) would not pay for a wrap-up "
        f"turn (about {budgets.fmt(each, need)}), so there is none: it would spend past the ceiling"
    )


def open_turn(budget: dict, outcome: str, reason: str, fired: list[str], iteration: int, stamp: str) -> dict:
    """Record the wrap-up as under way; the ending it will have is kept with it."""
    record = {
        "open": True,
        "outcome": outcome,
        "reason": reason,
        "fired": list(fired),
        "after_iteration": iteration,
        "started_at": stamp,
        "dollars_before": float(budget.get("dollars_estimate") or 0.0),
        "tokens_before": budgets.tokens_total(budget),
    }
    budget["router"]["wrap_up"] = record
    return record


def close_turn(budget: dict, stamp: str) -> tuple[dict, list[str]]:
    """The wrap-up turn has ended: what it cost, and notes when it ran past a ceiling."""
    record = budget["router"]["wrap_up"]
    record["open"] = False
    record["ended_at"] = stamp
    record["dollars"] = round(float(budget.get("dollars_estimate") or 0.0) - record["dollars_before"], 6)
    record["tokens"] = budgets.tokens_total(budget) - int(record["tokens_before"])
    over = []
    for dim in PRE_CEILING:
        cap = budgets.ceiling(budget, dim)
        if cap is not None and budgets.used(budget, dim) > cap:
            over.append(f"the wrap-up turn ran past the {dim} ceiling: {budgets.describe(budget, dim)}")
    record["over"] = over
    return record, over


def prompt(status: str, reason: str, handoff: str, hint: str) -> str:
    """The wrap-up turn's prompt: no new work, a handoff, the tree left as the mode wants."""
    lines = [
        status,
        "",
        f"WRAP-UP TURN. This loop ends after this turn: {reason}.",
        "",
        "Start no new work. Write the handoff for whoever continues (a person, or `--resume`, which "
        f"opens its first prompt with it) to this file:\n\n    {handoff}\n",
        "Use these sections, with file paths wherever they help:",
        "- ## Done: what is finished and where it is.",
        "- ## Left: what remains, in the order you would do it.",
        "- ## Tried and failed: approaches that did not work, and why.",
        "- ## How to continue: the next concrete steps, commands to run, files to read first.",
        "",
    ]
    if hint:
        lines += [hint, ""]
    lines.append("Then end your turn. Whatever this turn does, the loop ends at the next stop.")
    return "\n".join(lines)
