"""The fleet's limits as a slot meets them (lib/loopwright/fleet/limits.py): the dollars a
boundary adds, the room under a cap a boundary or a claim asks for (registry/reservations.py),
the outcome a budget stop leaves in the database, and an account's pause from a runner's event."""

from __future__ import annotations

import math

from loopwright.core.clock import now_iso
from loopwright.fleet import limits
from loopwright.registry import reservations
from loopwright.registry.limits import room_reason


def test_the_dollars_a_boundary_adds_are_what_the_database_has_not_counted():
    assert limits.dollars_delta(1.5, 1.125) == 0.375
    assert limits.dollars_delta(0.75, 0.0) == 0.75
    # A carried loop priced again on another machine may start below the row: never negative.
    assert limits.dollars_delta(0.9, 1.0) == 0.0
    # Figures anyone could have written count as nothing, never as an error.
    for bad in (math.nan, math.inf, -1.0, "3", None, True, [1]):
        assert limits.money(bad) == 0.0
        assert limits.dollars_delta(bad, 0.0) == 0.0
    assert limits.dollars_delta(2.0, math.nan) == 2.0


def test_the_mean_iteration_cost():
    assert limits.mean_cost(1.5, 4) == 0.375
    assert limits.mean_cost(1.5, 0) == 0.0
    assert limits.mean_cost(1.5, True) == 0.0 and limits.mean_cost(math.nan, 2) == 0.0


def test_the_room_under_a_cap_counts_the_spend_what_others_hold_and_the_next_two_iterations():
    """A boundary's and a claim's question (registry/reservations.py): would today's spend, what
    the other running loops hold and this loop's two iterations pass a cap? The fleet's first."""
    spent = {"fleet": 1.0, "account:a": 0.5, "tag:x": 0.2}
    holds = {"fleet": 0.6, "account:a": 0.0, "tag:x": 0.0}
    assert reservations.short(spent, {"fleet": 2.4, "account:a": 1.3}, holds, 0.8) is None
    # Exactly at the cap is within it (sums of binary fractions, and float noise, are not past it).
    assert reservations.short(spent, {"fleet": 2.4}, holds, 0.8) is None
    assert reservations.short({"fleet": 0.1 + 0.2}, {"fleet": 0.3}, {}, 0.0) is None
    assert reservations.short(spent, {"fleet": 2.39, "account:a": 1.3}, holds, 0.8) == "fleet"
    assert reservations.short(spent, {"tag:x": 0.5, "account:a": 0.9}, holds, 0.8) == "account:a"
    assert reservations.short({}, {"tag:y": 0.3}, {}, 0.4) == "tag:y"  # nothing spent: from 0
    why = room_reason("fleet", 14.25, 12.0, 1.5, 1.5)
    assert why == (
        "the fleet's daily budget of $14.25 would be passed by another iteration ($12.00 spent today, "
        "$1.50 held by running iterations, about $1.50 an iteration)"
    )
    # A loop's own mean from its row, or nothing before its first recorded iteration.
    assert reservations.loop_mean({"iteration": 4, "dollars": 1.5}) == 0.375
    for row in ({"iteration": 0, "dollars": 1.0}, {"iteration": True, "dollars": 1.0}, {"iteration": 2}):
        assert reservations.loop_mean(row) is None


def test_a_budget_stop_ends_the_row_budget_exhausted_unless_the_loop_finished_its_work():
    # A boundary said the budget is spent: whatever the local loop ended with ...
    assert limits.ends_for_budget(limits.LOCAL_STOP, told_stop=True)
    assert limits.ends_for_budget("MAX_ITERATIONS", told_stop=True)
    assert limits.ends_for_budget(None, told_stop=True)  # the runner left it active or at a gate
    # ... but a loop that finished its work keeps its own outcome.
    assert not limits.ends_for_budget("LOOP_DONE", told_stop=True)
    # A stop made ahead of the cap counts only when it is what ended the loop.
    assert limits.ends_for_budget(limits.LOCAL_STOP, told_stop=False)
    assert not limits.ends_for_budget("STOPPED:user_stop", told_stop=False)
    assert not limits.ends_for_budget(None, told_stop=False)
    assert limits.OUT_OF_BUDGET == "BUDGET_EXHAUSTED:fleet_dollars"
    assert limits.LOCAL_STOP == "STOPPED:fleet_dollars"


def test_the_reset_a_runners_quota_wait_reports():
    now = 1_800_000_000.0
    assert limits.quota_until({"until": now_iso(now + 65), "seconds": 1.0}, now) == now + 65
    assert limits.quota_until({"until": "not a time", "seconds": 30}, now) == now + 30
    assert limits.quota_until({"seconds": -5}, now) == now
    for bad in ({}, {"seconds": math.nan}, {"seconds": "30"}, {"seconds": True}):
        assert limits.quota_until(bad, now) is None


def test_the_reason_a_paused_accounts_loop_is_handed_back():
    why = limits.pause_reason("team", 1_800_000_000.0, "usage limit (HTTP 429)")
    assert why.startswith("account team is paused until 2027-01-15T08:00:00Z (usage limit (HTTP 429)):")
    assert limits.pause_reason("team", 1_800_000_000.0, None).startswith(
        "account team is paused until 2027-01-15T08:00:00Z: the loop waits for the reset"
    )
