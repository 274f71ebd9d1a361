"""The fleet's limits as one slot meets them: the dollars an iteration adds to the day's spend,
whether the iteration under way must be the loop's last, and an account's pause after a usage
limit. Pure: the slot reads the loop's files and the database, this decides.

The budget is checked at iteration boundaries (the registry's ``record_spend``) and claims, and
the iteration under way when a boundary is recorded has started already: a stop written then
ends the loop after it. So the boundary holds room for that one and, when every cap has room,
for the next (registry/reservations.py); when not, the iteration under way is the last.
"""

from __future__ import annotations

import math

from loopwright.core.clock import now_iso, parse_iso
from loopwright.core.outcomes import budget_exhausted, stopped
from loopwright.core.recovery import FINISHED
from loopwright.registry.limits import SPENT  # noqa: F401 - the control a spent budget sets (slot.py)

OUT_OF_BUDGET = budget_exhausted("fleet_dollars")
STOP_REASON = "fleet_dollars"  # the local loop's stop request: it ends STOPPED:fleet_dollars
LOCAL_STOP = stopped(STOP_REASON)
SPENT_ELSEWHERE = (
    "a daily budget this loop counts in was spent (by another loop's iteration): "
    "the iteration under way was its last"
)


def money(value) -> float:
    """A dollar figure read from a file or a row (anyone may have written either): a finite
    number of 0 or more, else 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    value = float(value)
    return value if math.isfinite(value) and value > 0 else 0.0


def dollars_delta(now, recorded) -> float:
    """The dollars to add to the day's spend: the loop's dollars now less what the database
    has counted for it already, never negative (a carried loop priced again on another
    machine may start a little below what the database had)."""
    return max(0.0, money(now) - money(recorded))


def mean_cost(dollars, iterations) -> float:
    """The loop's mean iteration cost so far (0 before its first iteration)."""
    count = iterations if isinstance(iterations, int) and not isinstance(iterations, bool) else 0
    return money(dollars) / count if count > 0 else 0.0


def ends_for_budget(local_outcome, told_stop: bool) -> bool:
    """Whether a loop the fleet's budget stopped ends BUDGET_EXHAUSTED:fleet_dollars in the
    database: yes once a boundary said the budget is spent, whatever the local loop ended
    with, unless it finished its work (then its own outcome says more); after a stop made
    ahead of the cap, only when that stop is what ended it."""
    if local_outcome in FINISHED:
        return False
    return told_stop or local_outcome == LOCAL_STOP


def quota_until(event: dict, now: float) -> float | None:
    """When the usage limit a runner's ``quota_wait`` event reports resets (epoch seconds):
    its ``until``, else ``now`` plus its ``seconds``; None when it says neither."""
    until = parse_iso(event.get("until"))
    if until is not None:
        return until
    seconds = event.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return None
    return now + max(0.0, float(seconds))


def pause_reason(account: str, until: float, why) -> str:
    """The reason a loop is handed back while its account is paused."""
    cause = f" ({str(why)[:200]})" if why else ""
    return (
        f"account {account} is paused until {now_iso(until)}{cause}: "
        "the loop waits for the reset and goes on with the worker that claims it then"
    )
