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


def test_a_usage_limit_is_a_429_the_client_gave_up_on():
    assert r.hit_usage_limit({"type": "result", "is_error": True, "api_error_status": 429})
    assert not r.hit_usage_limit({"type": "result", "is_error": True, "api_error_status": 500})
    assert not r.hit_usage_limit(None)


def test_the_wait_uses_the_reset_time_when_given_else_doubles():
    now = 1_760_000_000.0
    assert r.quota_wait("Claude AI usage limit reached|1760000600", 0, now) == 605.0
    assert r.quota_wait("limit|1759999000", 0, now) == r.QUOTA_BASE  # a reset in the past: backoff
    assert [r.quota_wait("rate limited", n, now, base=10, cap=60) for n in range(4)] == [10, 20, 40, 60]


def test_paused_time_is_not_counted():
    from loopwright.core import budget
    from loopwright.core.clock import parse_iso

    start = "2026-11-22T10:00:00Z"
    hour_later = parse_iso(start) + 3600
    assert budget.minutes_elapsed({"started_at": start}, hour_later) == 60.0
    assert budget.minutes_elapsed({"started_at": start, "clock_paused_seconds": 600.0}, hour_later) == 50.0
