"""What the fleet's page puts first (core/attention.py): which outcomes are failures and their
cause, workers alive, stale or stopped, why a queued loop is stuck, which loops a worker holds;
and the ceilings a gate's ``raise`` makes (core/raising.py)."""

from __future__ import annotations

import re

import pytest

from loopwright.core import attention, raising

NOW = 1_800_000_000.0


def test_failures_are_every_ending_but_the_goal_met_and_a_persons_own_stop():
    for ok in ("LOOP_DONE", "CANCELLED", "STOPPED:user_stop", "GATE_STOP:budget-escalation"):
        assert not attention.failed(ok), ok
    for bad in ("MAX_ITERATIONS", "BUDGET_EXHAUSTED:dollars", "STOPPED:stall_limit", "STOPPED:prepare_failed",
                "STOPPED:failover_limit", "EXTERNAL_UNREACHABLE", None, "", 7):  # fmt: skip
        assert attention.failed(bad), bad


def test_a_cause_is_the_outcome_then_the_reason_then_the_clients_last_error():
    row = {"outcome": "STOPPED:stall_limit", "reason": "the client exited (code 1)",
           "last_error": "HTTP 400: prompt is too long"}  # fmt: skip
    assert (
        attention.cause(row)
        == "STOPPED:stall_limit: the client exited (code 1): HTTP 400: prompt is too long"
    )
    assert attention.cause({"outcome": None, "reason": 5}) == "ended"


def test_a_worker_is_alive_stale_or_stopped_by_the_age_of_its_last_beat():
    assert attention.worker_state({"age": 3}) == "alive"
    assert attention.worker_state({"age": attention.STALE_AFTER}) == "stale"
    assert attention.worker_state({"age": attention.STOPPED_AFTER + 1}) == "stopped"
    assert attention.worker_state({"age": "soon"}) == "stopped"  # a row someone wrote by hand
    assert attention.worker_state({"age": 1, "state": "stopped"}) == "stopped"


def worker(name, age=2.0, account=None):
    return {"worker": name, "host": name, "age": age, "account": account, "slots": 1, "used": 0}


def queued(name, account="default", tags=()):
    return {"id": name, "name": name, "status": "queued", "account": account, "tags": list(tags)}


def why(row, workers=(), pauses=(), limits=(), accepts=None):
    return attention.Queue(list(workers), list(pauses), list(limits), NOW, accepts).reason(row)


def test_why_a_queued_loop_is_stuck():
    alive = [worker("a")]
    assert why(queued("q"), alive) is None
    assert why(queued("q")) == "no live worker: none has started"
    assert why(queued("q"), [worker("a", age=400)]).startswith("no live worker: none has beaten")
    only = why(queued("q"), [worker("a", account="acme")])
    assert only == "no live worker takes account default's loops (they take acme)"
    pause = {"account": "default", "until": NOW + 3600, "reason": "usage limit (429)"}
    assert why(queued("q"), alive, [pause]).startswith("account default is paused until ")
    assert why(queued("q"), alive, [dict(pause, until=NOW - 1)]) is None  # a pause that ran out
    spent = {"scope": "fleet", "max_dollars_per_day": 50, "spent_today": 50.5}
    assert (
        why(queued("q"), alive, limits=[spent])
        == "the fleet's daily budget of $50.00 is spent ($50.50 today)"
    )
    full = {"scope": "tag:docs", "max_running": 2, "running": 2}
    assert (
        why(queued("q", tags=["docs"]), alive, limits=[full])
        == "tag docs's cap of 2 running loops is reached"
    )
    assert why(queued("q"), alive, limits=[full]) is None
    refuse = lambda w, row: "its repository is not on the worker's allow-list"  # noqa: E731
    assert why(queued("q"), alive, accepts=refuse).startswith("no live worker accepts it: its repository")
    assert (
        why(dict(queued("q"), waiting_reason="no worker runs --verify"), alive) == "no worker runs --verify"
    )


def test_a_budget_held_by_running_loops_leaves_no_room_for_a_claim():
    """A claim holds two iterations at the loop's own mean cost (else the fleet's) beside what
    the running loops hold: when that passes the cap, the loop waits and says so."""
    alive = [worker("a")]
    cap = {"scope": "fleet", "max_dollars_per_day": 10, "spent_today": 6.0, "held": 2.5, "held_unknown": 0}

    def reason(row, lim, mean):
        return attention.Queue(alive, [], [lim], NOW, mean=mean).reason(row)

    assert reason(queued("q"), cap, mean=0.7) is None  # 6 + 2.5 + 2 x 0.70 = 9.90 fits
    assert (
        reason(queued("q"), cap, mean=0.8)
        == "the fleet's daily budget of $10.00 has no room for another loop: $6.00 spent today, $2.50 held"
        " by running loops, about $0.80 an iteration"
    )
    ran = dict(queued("q"), iteration=4, dollars=1.0)  # its own mean, $0.25, decides
    assert reason(ran, cap, mean=0.8) is None
    unknown = dict(cap, held_unknown=1)  # a hold of unknown cost counts as this loop's own two
    assert reason(queued("q"), cap, mean=0.4) is None
    assert reason(queued("q"), unknown, mean=0.4).startswith("the fleet's daily budget of $10.00 has no room")
    assert reason(queued("q"), dict(cap, held_unknown=0), mean=None) is None
    assert reason(queued("q"), unknown, mean=None) == (
        "the fleet's daily budget of $10.00: a running loop's cost is not known yet, and it runs one at a"
        " time until it is"
    )
    assert reason(queued("q"), dict(cap, held="lots"), mean=0.8) is None  # a value of the wrong type: none


def test_attention_counts_and_holdings():
    rows = [
        {"id": "g", "name": "g", "status": "waiting_gate"},
        {"id": "f", "name": "f", "status": "ended", "outcome": "MAX_ITERATIONS", "reason": "10 of 10"},
        {"id": "d", "name": "d", "status": "ended", "outcome": "LOOP_DONE"},
        {"id": "r", "name": "r", "status": "running", "worker": "w1"},
        queued("q", account="acme"),
        queued("ok"),
    ]
    workers = [worker("w1"), worker("w2", age=120), worker("w3", age=5000)]
    pauses = [{"account": "acme", "until": NOW + 60}]
    seen = attention.attention(rows, workers, attention.Queue(workers, pauses, [], NOW))
    assert seen["counts"] == {"gates": 1, "failed": 1, "stuck": 1, "workers": 2}
    assert seen["failed"] == {"f": "MAX_ITERATIONS: 10 of 10"} and list(seen["stuck"]) == ["q"]
    assert seen["workers"] == {"w1": "alive", "w2": "stale", "w3": "stopped"}
    assert seen["holds"] == {"w1": ["r"], "w2": [], "w3": []}


def gated(limits, dims=("dollars",), **used):
    row = {"spec": {"goal": "g", "limits": limits}, "dollars": 4.1, "iteration": 3, **used}
    gate = {"name": "budget-escalation", "options": ["continue", "raise", "stop"], "dimensions": list(dims)}
    return row, gate


def test_raise_sets_the_new_ceiling_or_half_as_much_again():
    row, gate = gated({"max_dollars": 5, "max_iterations": 10})
    assert raising.raised(row, gate, {"max_dollars": 9}) == (
        {"max_dollars": 9, "max_iterations": 10},
        {"max_dollars": [5, 9]},
    )
    assert raising.raised(row, gate, None)[1] == {"max_dollars": [5, 7.5]}
    row, gate = gated({"max_iterations": 4}, dims=("iterations",), iteration=4)
    assert raising.raised(row, gate, {})[1] == {"max_iterations": [4, 6]}


@pytest.mark.parametrize(
    ("limits", "raise_to", "words"),
    [
        ({"max_dollars": 5}, {"max_dollars": 5}, "above the ceiling it has ($5.00)"),
        ({"max_dollars": 5}, {"max_dollars": "9"}, "must be a number"),
        ({"max_dollars": 5}, {"max_dollars": True}, "must be a number"),
        ({"max_dollars": 5}, {"max_iterations": 9}, "not a ceiling this gate asks about: give max_dollars"),
        ({}, {"max_dollars": 4}, "above what the loop used already ($4.10)"),
        ({}, None, "give the new ceiling (max_dollars)"),
    ],
)
def test_a_raise_that_cannot_be_made_says_why(limits, raise_to, words):
    row, gate = gated(limits)
    with pytest.raises(raising.RaiseError, match=re.escape(words)):
        raising.raised(row, gate, raise_to)


def test_only_the_budget_gate_raises():
    row, gate = gated({"max_dollars": 5})
    with pytest.raises(raising.RaiseError, match="only gate budget-escalation"):
        raising.raised(row, dict(gate, name="judge"), {"max_dollars": 9})
