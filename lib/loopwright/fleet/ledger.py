"""An iteration's record in the commit that pushes it, and what a takeover recovers from those.

A worker pushes each iteration before it records it in the database (so that the database never
counts work the remote lacks). A worker killed between the two would lose the iteration's tokens
and dollars for good, so each pushed commit carries its record as git trailers: the loop, its
iteration count, and the tokens, dollars and tokens by model spent since the last record. The
next worker to claim the loop reads the commits after the last one the database knows and
records what they hold that the database lacks.

A branch can be written by the agent, or by anyone who can push to it, so a record is data: each
value is checked and bounded, a commit's record counts only for this loop's id, an iteration the
database holds already is never counted again, and two records of one iteration count once, by
their larger values. A forged record can only make a loop's spend look higher (its budget then
ends it sooner), never lower. Pure: the slot reads the commits and writes the database.
"""

from __future__ import annotations

import json
import math

from loopwright.core.turn import USAGE_FIELDS

PREFIX = "Loopwright-"
MAX_COMMITS = 50  # commits after the last recorded one looked at (one per iteration pushed)
MAX_ITERATION = 1_000_000  # the most iterations a fleet loop may have (fleet/spec.py)
MAX_DOLLARS = 100_000.0  # one record's dollars, at most
MAX_TOKENS = 10**12  # one record's tokens of one kind, at most
MAX_MINUTES = 10_000_000.0
MAX_MODELS = 16


def record(loop_id: str, iteration: int, budget: dict, before: dict, dollars: float) -> dict:
    """The record of a push: what ``budget`` (the loop's budget.json now) adds to ``before``
    (its counters at the last record), with the ``dollars`` the boundary adds to the spend."""
    usage = {}
    for model, counts in (budget.get("tokens_by_model") or {}).items():
        was = (before.get("tokens_by_model") or {}).get(model) or {}
        grown = {f: max(0, _int(counts.get(f)) - _int(was.get(f))) for f in USAGE_FIELDS}
        if any(grown.values()):
            usage[str(model)] = grown
    return {
        "loop": loop_id,
        "iteration": iteration,
        "tokens_in": max(0, _int(budget.get("tokens_in")) - _int(before.get("tokens_in"))),
        "tokens_out": max(0, _int(budget.get("tokens_out")) - _int(before.get("tokens_out"))),
        "dollars": max(0.0, float(dollars)),
        "minutes": _amount(budget.get("minutes_elapsed"), MAX_MINUTES) or 0.0,
        "usage": usage,
    }


def trailers(rec: dict) -> str:
    """``rec`` as the trailer lines that end a commit message."""
    return "\n".join(
        [
            f"{PREFIX}Loop: {rec['loop']}",
            f"{PREFIX}Iteration: {rec['iteration']}",
            f"{PREFIX}Tokens-In: {rec['tokens_in']}",
            f"{PREFIX}Tokens-Out: {rec['tokens_out']}",
            f"{PREFIX}Dollars: {rec['dollars']!r}",
            f"{PREFIX}Minutes: {rec['minutes']!r}",
            f"{PREFIX}Usage: {json.dumps(rec['usage'], separators=(',', ':'), sort_keys=True)}",
        ]
    )


def parse(message: str, loop_id: str) -> dict | None:
    """The record a commit message's last paragraph holds for ``loop_id``; None when it holds
    none, one of another loop, or a value out of shape or bounds."""
    paragraphs = [p for p in str(message).strip().split("\n\n") if p.strip()]
    fields = {}
    for line in paragraphs[-1].splitlines() if paragraphs else []:
        key, sep, value = line.partition(": ")
        name = key[len(PREFIX) :]
        if sep and key.startswith(PREFIX) and name not in fields:  # the first of each: no second word
            fields[name] = value.strip()
    if fields.get("Loop") != loop_id:
        return None
    iteration = _whole(fields.get("Iteration"), MAX_ITERATION)
    tokens_in, tokens_out = (
        _whole(fields.get("Tokens-In"), MAX_TOKENS),
        _whole(fields.get("Tokens-Out"), MAX_TOKENS),
    )
    dollars, minutes = (
        _amount(fields.get("Dollars"), MAX_DOLLARS),
        _amount(fields.get("Minutes"), MAX_MINUTES),
    )
    usage = _usage(fields.get("Usage", "{}"))
    if None in (iteration, tokens_in, tokens_out, dollars, minutes, usage) or iteration < 1:
        return None
    return {"loop": loop_id, "iteration": iteration, "tokens_in": tokens_in, "tokens_out": tokens_out,
            "dollars": dollars, "minutes": minutes, "usage": usage}  # fmt: skip


def recover(
    row: dict,
    records: list,
    *,
    after_head: bool,
    most: int = MAX_ITERATION,
    most_dollars: float = MAX_DOLLARS,
) -> dict | None:
    """What the database lacks of ``records``, for the loop's ``row``: None when nothing, else
    the iteration count (at most ``most``, the loop's limit), the tokens, dollars (at most
    ``most_dollars``, the loop's own ceiling: no push of one loop costs more) and usage to add,
    and the minutes to set. Each iteration counts once. ``after_head``: the records are of the
    commits after the last one the database recorded, so the one of its last iteration counts
    too (a last push after a wrap-up turn adds spend, not an iteration); else (the branch was
    rewritten, or nothing was recorded) only iterations past the row's."""
    done = row.get("iteration") if type(row.get("iteration")) is int else 0
    by_iteration: dict[int, dict] = {}
    for rec in records:
        if isinstance(rec, dict) and (rec["iteration"] > done or (after_head and rec["iteration"] == done)):
            by_iteration[rec["iteration"]] = _larger(by_iteration.get(rec["iteration"]), rec)
    if not by_iteration:
        return None
    fresh = list(by_iteration.values())
    usage: dict[str, dict] = {}
    for rec in fresh:
        for model, counts in rec["usage"].items():
            slot = usage.setdefault(model, dict.fromkeys(USAGE_FIELDS, 0))
            for f in USAGE_FIELDS:
                slot[f] += counts[f]
    return {
        "iteration": min(max(by_iteration), max(most, done)),
        "iterations": sorted(by_iteration),
        "tokens_in": sum(r["tokens_in"] for r in fresh),
        "tokens_out": sum(r["tokens_out"] for r in fresh),
        "dollars": min(sum(r["dollars"] for r in fresh), most_dollars),
        "minutes": max(r["minutes"] for r in fresh),
        "usage": usage,
    }


def counters(carried: dict, found: dict) -> dict:
    """The loop's carried counters (its row's state) with what ``found`` recovered added."""
    out = dict(carried or {})
    out["iterations_used"] = max(_int(out.get("iterations_used")), found["iteration"])
    for key in ("tokens_in", "tokens_out"):
        out[key] = _int(out.get(key)) + found[key]
    models = {m: dict(c) for m, c in (out.get("tokens_by_model") or {}).items() if isinstance(c, dict)}
    for model, counts in found["usage"].items():
        slot = models.setdefault(model, dict.fromkeys(USAGE_FIELDS, 0))
        for f in USAGE_FIELDS:
            slot[f] = _int(slot.get(f)) + counts[f]
    out["tokens_by_model"] = models
    for f in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        out[f] = _int(out.get(f)) + sum(c[f] for c in found["usage"].values())
    out["minutes_elapsed"] = max(_amount(out.get("minutes_elapsed"), MAX_MINUTES) or 0.0, found["minutes"])
    out["dollars_estimate"] = (_amount(out.get("dollars_estimate"), 1e12) or 0.0) + found["dollars"]
    return out


def _larger(one: dict | None, two: dict) -> dict:
    """Two records of one iteration as one: each value the larger (a forgery never lowers)."""
    if one is None:
        return two
    usage = {m: dict(c) for m, c in one["usage"].items()}
    for model, counts in two["usage"].items():
        slot = usage.setdefault(model, dict.fromkeys(USAGE_FIELDS, 0))
        for f in USAGE_FIELDS:
            slot[f] = max(slot[f], counts[f])
    keys = ("tokens_in", "tokens_out", "dollars", "minutes")
    return dict(one, usage=usage, **{k: max(one[k], two[k]) for k in keys})


def _int(value) -> int:
    return value if type(value) is int and value > 0 else 0


def _whole(text, most: int) -> int | None:
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or len(text) > 15:
        return None
    value = int(text)
    return value if value <= most else None


def _amount(value, most: float) -> float | None:
    """A number of 0 to ``most`` (from text or a number); None for anything else."""
    try:
        number = (
            float(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
        )
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) and 0 <= number <= most else None


def _usage(text: str) -> dict | None:
    try:
        value = json.loads(text) if len(text) <= 10_000 else None
    except ValueError:
        return None
    if not isinstance(value, dict) or len(value) > MAX_MODELS:
        return None
    out = {}
    for model, counts in value.items():
        if not (
            isinstance(model, str)
            and 0 < len(model) <= 128
            and model.isprintable()
            and isinstance(counts, dict)
        ):
            return None
        fields = {f: counts.get(f, 0) for f in USAGE_FIELDS}
        if any(type(v) is not int or not 0 <= v <= MAX_TOKENS for v in fields.values()):
            return None
        out[model] = fields
    return out
