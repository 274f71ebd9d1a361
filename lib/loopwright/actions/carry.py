"""A loop's counters carried from one machine to another (the fleet's failover).

A fleet worker records :func:`snapshot` of its loop after every iteration; when the worker
dies, another one starts the loop afresh in its own clone and :func:`apply` puts the counters
back before the first turn: iterations, minutes, tokens and dollars go on from where they were,
so the ceilings hold across machines. Dollars follow from the tokens by model, priced as every Stop
prices them. What the loop did so far reaches the new session as its
handoff (``handoff.md``, which opens the first prompt as after a wrap-up turn).

A snapshot comes from the fleet's database, which others can write: it is checked field by
field, and the budget it makes is checked against budget.json's schema before it is written.
"""

from __future__ import annotations

import time

from loopwright.actions.pick import config, pick_loop, read_budget
from loopwright.core import rates, schema
from loopwright.core.clock import now_iso
from loopwright.core.errors import UserError
from loopwright.state import claudemd, journal, loops, store
from loopwright.state.fspath import Path

COUNTS = (
    "iterations_used",
    "tokens_in",
    "tokens_out",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "comments_pushed",
    "merges_attempted",
    "agents_dispatched",
)
AMOUNTS = ("minutes_elapsed", "dollars_estimate")
LISTS = ("prs_touched", "gates_log")
MAX_HANDOFF = 64 * 1024  # characters of handoff text kept


def snapshot(budget: dict) -> dict:
    """What carries a loop over to another machine, from its budget.json."""
    out = {k: budget.get(k, 0) for k in COUNTS}
    out.update({k: float(budget.get(k) or 0.0) for k in AMOUNTS})
    out.update({k: list(budget.get(k) or []) for k in LISTS})
    out["tokens_by_model"] = dict(budget.get("tokens_by_model") or {})
    return out


def _checked(carried: dict) -> dict:
    if not isinstance(carried, dict):
        raise UserError("the carried counters are not a JSON object")
    out = {}
    for k in COUNTS:
        v = carried.get(k, 0)
        if type(v) is not int or v < 0:
            raise UserError(f"carried {k} must be a whole number of at least 0, not {v!r}")
        out[k] = v
    for k in AMOUNTS:
        v = carried.get(k, 0.0)
        if type(v) not in (int, float) or not 0 <= v < 1e12:
            raise UserError(f"carried {k} must be a number of at least 0, not {v!r}")
        out[k] = float(v)
    for k in (*LISTS, "tokens_by_model"):
        want = dict if k == "tokens_by_model" else list
        v = carried.get(k, want())
        if not isinstance(v, want):
            raise UserError(f"carried {k} must be a JSON {want.__name__}")
        out[k] = v
    return out


def apply(state: Path, name: str, carried: dict, handoff: str | None = None, session: str | None = None):
    """Put ``carried`` counters into loop ``name`` (started here moments ago, before its first
    turn) and write ``handoff``; the budget written. UserError when they do not fit."""
    counters = _checked(carried)
    paths = pick_loop(state, name, None, active_only=True)
    with loops.loop_mutex(paths):
        loop = config(paths)
        budget = read_budget(paths.configured(loop), loop)
        if int(budget.get("iterations_used", 0)):
            raise UserError(f'loop "{name}" has run here already; counters are carried only into a new loop')
        budget.update(counters)
        # Dollars are priced from the tokens at every Stop: priced here the same way, so that the
        # first Stop's spend is only its own turn, whatever dollar figure the snapshot held.
        table = rates.table(claudemd.load(Path(loop["project_dir"])).rates, loop.get("accepted_rates"))
        budget["dollars_estimate"] = round(table.cost(budget.get("tokens_by_model") or {})[0], 6)
        # The loop's clock goes on from the minutes it had: it started that long ago, as far as
        # its time limit is concerned (the time nobody ran it is not counted).
        budget["started_at"] = now_iso(time.time() - counters["minutes_elapsed"] * 60.0)
        try:
            schema.check(schema.BUDGET, budget, "budget.json")
        except schema.SchemaError as exc:
            raise UserError(f"the carried counters do not fit the loop: {exc}") from None
        store.write_json(paths.budget, budget)
    if handoff:
        store.write_text(paths.handoff, handoff[:MAX_HANDOFF])
    shown = {k: counters[k] for k in ("iterations_used", "minutes_elapsed", "dollars_estimate")}
    journal.write(paths, dict(event="carried", **shown), session=session)
    return budget
