"""What the running loops hold of the day's dollar budget, so that the fleet's caps are passed by
at most about one iteration in all, not one per running loop.

A loop's iteration boundary is recorded while its next iteration has already begun (the runner
does not wait for the database), so a boundary decides about the iteration after that one. Each
running loop therefore holds (its row's ``reserved``) the expected cost of the iterations it has
begun or may begin and has not recorded: its mean iteration cost for the one under way, and as
much again when it may begin another. A boundary lets the loop begin another only when today's
spend, what every other running loop of the scope holds and its own two iterations stay within
each cap; else the iteration under way is its last. A claim holds the loop's first two
iterations (the second begins before the first is recorded) at the loop's mean if it ran
before, else at the fleet's recent mean iteration cost; when nothing in the fleet has a cost
yet, one loop a scope runs at a time until one does (its cost held as unknown: NULL). Every such
decision takes the capped scopes' rows of ``fleet_limits`` first, in one order, so that two of
them never both count on the same room. A loop that stops running (ended, queued, at a gate)
holds nothing, whatever its row says.
"""

from __future__ import annotations

from loopwright.core import attention
from loopwright.registry.queue import json_value

EPSILON = 1e-9  # sums of dollar amounts compared with a cap: float noise is not "past it"
# Iterations a loop holds: the one under way and the one it may begin next (the page's reasons
# for a stuck loop count the same: core/attention.py).
AHEAD = attention.AHEAD
RUNNING_HELD = "SELECT id, account, tags, reserved FROM fleet_loops WHERE status = 'running'"
# The fleet's recent mean iteration cost: the first estimate of a loop that has none of its own.
FLEET_MEAN = (
    "SELECT SUM(dollars) AS dollars, SUM(iteration) AS iterations FROM fleet_loops "
    "WHERE iteration > 0 AND updated_at > {now} - 86400"
)
HOLD = "UPDATE fleet_loops SET reserved = %s WHERE id = %s"
# The running loops in a few groups (their account and tags decide their scopes), not a row each.
RUNNING_BY_SCOPE = (
    "SELECT account, tags, COUNT(*) AS n, SUM(CASE WHEN reserved IS NULL THEN 1 ELSE 0 END) AS unknown, "
    # A hold below 0, NaN or past any budget (a hand-written row) is shown as none.
    "SUM(CASE WHEN reserved > 0 AND reserved < 1e15 THEN reserved ELSE 0 END) AS held "
    "FROM fleet_loops WHERE status = 'running' GROUP BY account, tags"
)


def lock_caps(tx, dialect: str, scopes=None) -> list[dict]:
    """The dollar caps of ``scopes`` (every scope when None), their rows locked in scope order
    on PostgreSQL until the transaction ends: decisions on the room under a cap take turns."""
    sql = "SELECT scope, max_dollars_per_day FROM fleet_limits WHERE max_dollars_per_day IS NOT NULL"
    args: tuple = ()
    if scopes is not None:
        sql += " AND scope IN (" + ", ".join("%s" for _ in scopes) + ")"
        args = tuple(scopes)
    return tx.rows(sql + " ORDER BY scope" + (" FOR UPDATE" if dialect == "postgres" else ""), args)


def held(tx, scopes_of, capped, but: str | None = None) -> tuple[dict, dict, dict]:
    """What the running loops (all but ``but``) hold in each scope of ``capped``: dollars by
    scope, the count of loops holding an unknown cost by scope, and each loop's own hold."""
    dollars = dict.fromkeys(capped, 0.0)
    unknown = dict.fromkeys(capped, 0)
    own: dict = {}
    for row in tx.rows(RUNNING_HELD):
        if row["id"] == but:
            continue
        own[row["id"]] = row["reserved"]
        for scope in set(scopes_of(row["account"], json_value(row["tags"]))) & set(capped):
            if row["reserved"] is None:
                unknown[scope] += 1
            else:
                dollars[scope] += max(0.0, float(row["reserved"]))
    return dollars, unknown, own


def by_scope(tx, scopes_of) -> dict[str, dict]:
    """Every scope a running loop counts in: ``running`` loops, the dollars they ``held`` for
    iterations begun or about to begin and not recorded yet, and how many hold a cost not known
    yet (``held_unknown``): what `fleet limits`, the page and the metrics show beside today's
    spend, since a claim or a boundary counts them against a cap as if spent."""
    out: dict[str, dict] = {}
    for group in tx.rows(RUNNING_BY_SCOPE):
        for scope in scopes_of(group["account"], json_value(group["tags"])):
            mine = out.setdefault(scope, {"running": 0, "held": 0.0, "held_unknown": 0})
            mine["running"] += int(group["n"])
            mine["held_unknown"] += int(group["unknown"] or 0)
            mine["held"] += float(group["held"] or 0.0)
    return out


def fleet_mean(tx) -> float | None:
    """The fleet's mean iteration cost over the loops that recorded one in the last day; None
    when none has (nothing is known yet)."""
    row = tx.one(FLEET_MEAN)
    if not row or not row["iterations"]:
        return None
    return max(0.0, float(row["dollars"] or 0.0)) / int(row["iterations"])


def loop_mean(row: dict) -> float | None:
    """A loop's own mean iteration cost from its row, None before it recorded an iteration."""
    iterations, dollars = row.get("iteration"), row.get("dollars")
    if type(iterations) is not int or iterations <= 0 or not isinstance(dollars, (int, float)):
        return None
    return max(0.0, float(dollars)) / iterations


def short(spent: dict, caps: dict, holds: dict, need: float) -> str | None:
    """The first capped scope (the fleet's first) whose spend today, what others hold and
    ``need`` would pass its cap; None when every one has room."""
    for scope in sorted(caps, key=lambda s: (s != "fleet", s)):
        if spent.get(scope, 0.0) + holds.get(scope, 0.0) + need > caps[scope] + EPSILON:
            return scope
    return None
