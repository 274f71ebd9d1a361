"""The runner's decisions after its client went away, and its exit codes."""

from __future__ import annotations

import pytest

from loopwright.core import recovery as r


def test_an_ended_loop_ends_the_run():
    assert r.after_client(False, [], 3, r.Counts(), "exited")[0] == r.END


def test_a_waiting_gate_hands_over_to_the_user():
    action, why = r.after_client(True, ["budget-escalation"], 3, r.Counts(), "exited")
    assert action == r.WAIT_FOR_USER and "budget-escalation" in why


def test_recoveries_are_bounded_per_iteration_and_in_all():
    counts = r.Counts()
    for _ in range(3):
        assert r.after_client(True, [], 4, counts, "stalled")[0] == r.RESUME
        counts.add(4)
    assert r.after_client(True, [], 4, counts, "stalled") == (
        r.GIVE_UP,
        "stalled; already recovered 3 times in iteration 4",
    )
    assert r.after_client(True, [], 5, counts, "stalled")[0] == r.RESUME  # a new iteration
    for it in range(5, 12):
        counts.add(it)
    assert counts.total == 10 and r.after_client(True, [], 20, counts, "x")[0] == r.GIVE_UP


@pytest.mark.parametrize(
    "outcome, code",
    [
        ("LOOP_DONE", 0),
        ("MAX_ITERATIONS", 2),
        ("BUDGET_EXHAUSTED:dollars", 2),
        ("STOPPED:stall_limit", 3),
        ("STOPPED:timeout", 4),
        ("CANCELLED", 4),
        ("GATE_STOP:repeated-failure", 4),
        ("DEPENDENCY_CYCLE", 6),
        (None, 1),
    ],
)
def test_exit_codes(outcome, code):
    assert r.exit_code(outcome) == code


def test_waiting_is_its_own_code():
    assert r.exit_code(None, waiting=True) == 5
