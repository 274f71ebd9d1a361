"""An iteration's record in the commit that pushes it (lib/loopwright/fleet/ledger.py): written as
git trailers, read back only for its own loop and within bounds, and recovered by a takeover once,
never lowering what the database holds, whatever else the branch's writers put there."""

from __future__ import annotations

import math

import pytest

from loopwright.fleet import ledger

LOOP = "0123456789abcdef0123456789abcdef"
SONNET = "claude-sonnet-4-5"


def usage(inp=0, out=0, cw=0, cr=0) -> dict:
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cache_creation_input_tokens": cw,
        "cache_read_input_tokens": cr,
    }


BEFORE = {"tokens_in": 100, "tokens_out": 10, "tokens_by_model": {SONNET: usage(100, 10, 5)}}
BUDGET = {
    "tokens_in": 62_600,
    "tokens_out": 12_510,
    "minutes_elapsed": 3.5,
    "tokens_by_model": {SONNET: usage(62_600, 12_510, 5, 40), "claude-haiku-4-5": usage(7, 0)},
}


def message(rec: dict, subject: str = "loopwright osprey: iteration 2") -> str:
    return f"{subject}\n\n{ledger.trailers(rec)}\n"


def test_a_push_carries_what_it_adds_and_reads_back_the_same():
    rec = ledger.record(LOOP, 2, BUDGET, BEFORE, 0.375)
    assert rec == {
        "loop": LOOP,
        "iteration": 2,
        "tokens_in": 62_500,
        "tokens_out": 12_500,
        "dollars": 0.375,
        "minutes": 3.5,
        "usage": {SONNET: usage(62_500, 12_500, 0, 40), "claude-haiku-4-5": usage(7)},
    }
    text = message(rec)
    assert "\nLoopwright-Iteration: 2\n" in text and "\nLoopwright-Dollars: 0.375\n" in text
    assert ledger.parse(text, LOOP) == rec
    assert ledger.parse(text, "another-loop") is None  # a record counts only for its own loop
    assert ledger.parse("loopwright osprey: iteration 2", LOOP) is None


@pytest.mark.parametrize(
    "change",
    [
        {"Iteration": "0"},
        {"Iteration": "-3"},
        {"Iteration": "2.5"},
        {"Iteration": "٣"},  # a digit, but not an ASCII one
        {"Iteration": str(ledger.MAX_ITERATION + 1)},
        {"Dollars": "nan"},
        {"Dollars": "inf"},
        {"Dollars": "-1"},
        {"Dollars": "1e9"},
        {"Dollars": "lots"},
        {"Tokens-In": "1e3"},
        {"Tokens-Out": str(10**13)},
        {"Minutes": "-0.5"},
        {"Usage": "[]"},
        {"Usage": '{"m": {"input_tokens": -1}}'},
        {"Usage": '{"m": {"input_tokens": 1.5}}'},
        {"Usage": '{"": {}}'},
        {"Usage": "{" + ",".join(f'"m{n}": {{}}' for n in range(20)) + "}"},
        {"Usage": "not json"},
    ],
)
def test_a_record_out_of_shape_or_bounds_is_no_record(change):
    rec = ledger.record(LOOP, 2, BUDGET, BEFORE, 0.375)
    fields = dict(line.split(": ", 1) for line in ledger.trailers(rec).splitlines())
    fields.update({f"Loopwright-{key}": value for key, value in change.items()})
    assert ledger.parse("subject\n\n" + "\n".join(f"{k}: {v}" for k, v in fields.items()), LOOP) is None


def test_only_the_last_paragraph_counts_and_the_first_of_each_key():
    rec = ledger.record(LOOP, 2, BUDGET, BEFORE, 0.375)
    quoted = f"subject\n\n{ledger.trailers(rec)}\n\nA later paragraph of prose."
    assert ledger.parse(quoted, LOOP) is None
    doubled = message(rec).rstrip() + "\nLoopwright-Dollars: 0.001\n"
    assert ledger.parse(doubled, LOOP)["dollars"] == 0.375


def rec(iteration, dollars=0.375, tokens=(62_500, 12_500), minutes=1.0, models=None) -> dict:
    return {
        "loop": LOOP,
        "iteration": iteration,
        "tokens_in": tokens[0],
        "tokens_out": tokens[1],
        "dollars": dollars,
        "minutes": minutes,
        "usage": models if models is not None else {SONNET: usage(*tokens)},
    }


ROW = {"iteration": 1, "dollars": 0.75, "tokens": 150_000, "minutes": 1.0}


def test_a_takeover_recovers_the_iteration_pushed_after_the_last_record_once():
    found = ledger.recover(ROW, [rec(2, minutes=2.0), None], after_head=True)
    assert found == {
        "iteration": 2,
        "iterations": [2],
        "tokens_in": 62_500,
        "tokens_out": 12_500,
        "dollars": 0.375,
        "minutes": 2.0,
        "usage": {SONNET: usage(62_500, 12_500)},
    }
    # Recorded: the row holds iteration 2 (and the branch's tip as its head): nothing again.
    assert ledger.recover(dict(ROW, iteration=2), [rec(2)], after_head=False) is None
    assert ledger.recover(ROW, [], after_head=True) is None
    # A last push after a wrap-up turn adds spend to the iteration the row has already.
    wrap = ledger.recover(ROW, [rec(1, dollars=0.25)], after_head=True)
    assert (wrap["iteration"], wrap["dollars"]) == (1, 0.25)
    # Without a recorded head (the branch was rewritten), only iterations past the row's count.
    assert ledger.recover(ROW, [rec(1), rec(0 + 1)], after_head=False) is None


def test_forged_records_never_lower_what_is_recovered_and_stay_within_the_loops_bounds():
    honest = rec(2)
    low = rec(2, dollars=0.0, tokens=(0, 0), models={})
    high = rec(2, dollars=5.0, tokens=(1, 10**6))
    # Two records of one iteration count once, by the larger of each value.
    found = ledger.recover(ROW, [low, honest], after_head=True)
    assert (found["dollars"], found["tokens_in"], found["tokens_out"]) == (0.375, 62_500, 12_500)
    found = ledger.recover(ROW, [honest, high], after_head=True)
    assert (found["dollars"], found["tokens_in"], found["tokens_out"]) == (5.0, 62_500, 10**6)
    # No more than the loop's own dollar ceiling and iteration limit, however many records.
    many = [rec(n, dollars=90_000.0) for n in range(2, 40)]
    found = ledger.recover(ROW, many, after_head=True, most=8, most_dollars=10.0)
    assert (found["iteration"], found["dollars"]) == (8, 10.0)
    assert ledger.recover(dict(ROW, iteration="x"), [rec(1)], after_head=False)["iteration"] == 1


def test_the_carried_counters_take_what_was_recovered():
    carried = {"iterations_used": 1, "tokens_in": 62_500, "tokens_out": 12_500,
               "minutes_elapsed": 1.0, "dollars_estimate": 0.375,
               "tokens_by_model": {SONNET: usage(62_500, 12_500, 0, 3)}}  # fmt: skip
    found = ledger.recover(
        ROW, [rec(2, models={SONNET: usage(62_500, 12_500, 2, 4), "h": usage(1)})], after_head=True
    )
    out = ledger.counters(carried, found)
    assert out["iterations_used"] == 2 and out["minutes_elapsed"] == 1.0
    assert (out["tokens_in"], out["tokens_out"]) == (125_000, 25_000)
    assert out["tokens_by_model"] == {SONNET: usage(125_000, 25_000, 2, 7), "h": usage(1)}
    assert (out["cache_creation_input_tokens"], out["cache_read_input_tokens"]) == (2, 4)
    assert math.isclose(out["dollars_estimate"], 0.75)
    assert carried["iterations_used"] == 1  # the row's own counters are left as they were
    # Counters anyone could have written start from nothing where they are not numbers.
    odd = ledger.counters({"tokens_in": "many", "tokens_by_model": {SONNET: "x"}}, found)
    assert odd["tokens_in"] == 62_500 and odd["tokens_by_model"][SONNET] == usage(62_500, 12_500, 2, 4)
