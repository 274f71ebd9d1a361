"""The wrap-up turn (core/wrapup.py, SPEC §4.11), decided by the pure router: one more
turn for a handoff when a budget runs out, taken before the dollar and token ceilings,
never twice, never for cancel, stop requests or gate stops."""

import pytest

from loopwright import modes
from loopwright.core import router, wrapup
from loopwright.core.rates import table
from loopwright.state.transcript import Cursor, Increment

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HANDOFF = "/p/.loopwright/loops/prompt/handoff.md"
SONNET = "claude-sonnet-4-5"  # $3 per million input tokens


def make_loop(**kw):
    loop = {
        "name": "prompt",
        "mode": "prompt",
        "prompt": "make the tests pass",
        "completion_promise": "DONE",
        "max_iterations": 10,
        "max_minutes": 600,
        "max_tokens": None,
        "max_dollars": 25.0,
        "owner_session": "S",
        "started_at": "2027-01-15T08:00:00Z",
        "status": "active",
    }
    loop.update(kw)
    return loop


def usage(dollars: float) -> dict:
    """Sonnet input tokens that cost ``dollars``."""
    tokens = round(dollars / 3.0 * 1_000_000)
    fields = {"input_tokens": tokens, "output_tokens": 0}
    return {SONNET: dict(fields, cache_creation_input_tokens=0, cache_read_input_tokens=0)}


def stop(loop, budget=None, *, minute=1.0, spend=0.0, message="working", requests=0, **kw):
    budget = budget if budget is not None else router.initial_budget(loop)
    turn = Increment(
        cursor=Cursor(path="/t", offset=10),
        used_tool=True,
        usage=usage(spend) if spend else {},
        requests=requests,
    )
    snap = router.Snapshot(
        mode=modes.for_loop(loop),
        now=T0 + minute * 60,
        session_id="S",
        loop=loop,
        budget=budget,
        turn=turn,
        last_message=message,
        stop_hook_active=True,
        rates=table(None),
        handoff_path=HANDOFF,
        **kw,
    )
    return router.decide(snap)


def test_the_last_iteration_is_followed_by_one_wrap_up_turn_then_the_loop_ends():
    loop = make_loop(max_iterations=2)
    d1 = stop(loop)
    assert d1.action == router.CONTINUE and "WRAP-UP" not in d1.prompt
    d2 = stop(loop, d1.budget, minute=2)
    assert d2.action == router.CONTINUE and d2.outcome is None
    assert "WRAP-UP TURN" in d2.prompt and HANDOFF in d2.prompt and "Start no new work" in d2.prompt
    assert "## How to continue" in d2.prompt and "iteration 2 of 2" in d2.prompt
    assert wrapup.open_record(d2.budget)["outcome"] == router.MAX_ITERATIONS
    assert d2.history["outcome"] == "wrapping-up" and d2.history["wrap_up_for"] == router.MAX_ITERATIONS
    assert "wrap-up turn (MAX_ITERATIONS)" in d2.system_message
    d3 = stop(loop, d2.budget, minute=3)
    assert d3.action == router.STOP and d3.outcome == router.MAX_ITERATIONS
    assert d3.budget["iterations_used"] == 2  # the wrap-up turn is no iteration
    assert d3.history["wrap_up"] is True and d3.history["counted"] is False
    assert wrapup.open_record(d3.budget) is None
    assert d3.budget["router"]["wrap_up"]["ended_at"]


def test_whatever_the_wrap_up_turn_says_the_loop_ends_with_its_first_outcome():
    loop = make_loop(max_iterations=1)
    d1 = stop(loop)
    d2 = stop(loop, d1.budget, minute=2, message="all done\n<promise>DONE</promise>")
    assert d2.outcome == router.MAX_ITERATIONS


def test_a_dollar_ceiling_is_not_crossed_when_iterations_cost_the_same():
    # The example: a $1.00 ceiling and $0.45 turns. Turn 1 works, turn 2 is the
    # wrap-up, $0.90 spent.
    loop = make_loop(max_dollars=1.0)
    d1 = stop(loop, spend=0.45)
    assert d1.action == router.CONTINUE and "WRAP-UP TURN" in d1.prompt
    assert "would not pay for another iteration and a wrap-up turn ($0.90 kept back)" in d1.prompt
    d2 = stop(loop, d1.budget, minute=2, spend=0.45)
    assert d2.outcome == "BUDGET_EXHAUSTED:dollars"
    assert d2.budget["dollars_estimate"] == pytest.approx(0.90)
    assert d2.budget["router"]["wrap_up"]["over"] == []
    assert d2.history["stop_conditions_fired"] == ["cost_budget", "wrap_up_reserve"]


def test_cheap_iterations_run_until_two_of_them_no_longer_fit():
    loop = make_loop(max_dollars=1.0)
    b, spent, turns = None, 0.0, 0
    while True:
        d = stop(loop, b, minute=turns + 1, spend=0.1)
        turns += 1
        spent += 0.1
        if "WRAP-UP TURN" in (d.prompt or ""):
            break
        b = d.budget
    # After 9 turns $0.10 is left, less than the $0.20 two more would cost.
    assert turns == 9
    end = stop(loop, d.budget, minute=turns + 1, spend=0.1)
    assert end.outcome == "BUDGET_EXHAUSTED:dollars" and end.budget["dollars_estimate"] <= 1.0 + 1e-9


def test_a_wrap_up_that_runs_over_is_recorded():
    loop = make_loop(max_dollars=1.0)
    d1 = stop(loop, spend=0.45)
    d2 = stop(loop, d1.budget, minute=2, spend=0.70)
    assert d2.outcome == "BUDGET_EXHAUSTED:dollars"
    over = d2.budget["router"]["wrap_up"]["over"]
    assert len(over) == 1 and "ran past the dollars ceiling" in over[0]
    assert any(j.get("event") == "wrap-up" and j.get("over") == over for j in d2.journal)


def test_a_single_turn_past_the_dollar_ceiling_gets_no_wrap_up_turn():
    loop = make_loop(max_dollars=1.0)
    d = stop(loop, spend=1.20)
    assert d.action == router.STOP and d.outcome == "BUDGET_EXHAUSTED:dollars"
    assert any(j.get("event") == "wrap-up" and "already reached" in j["skipped"] for j in d.journal)


def test_a_token_ceiling_wraps_up_before_it_is_reached():
    loop = make_loop(max_tokens=1000)
    u = {"m": {"input_tokens": 400, "output_tokens": 0}}
    first = router.Snapshot(
        mode=modes.for_loop(loop),
        now=T0 + 60,
        session_id="S",
        loop=loop,
        budget=router.initial_budget(loop),
        turn=Increment(cursor=Cursor(path="/t", offset=1), used_tool=True, usage=u),
        last_message="working",
        stop_hook_active=True,
        handoff_path=HANDOFF,
    )
    d1 = router.decide(first)
    assert (
        "WRAP-UP TURN" in d1.prompt and wrapup.open_record(d1.budget)["outcome"] == "BUDGET_EXHAUSTED:tokens"
    )
    d2 = router.decide(first.replace(budget=d1.budget, now=T0 + 120))
    assert d2.outcome == "BUDGET_EXHAUSTED:tokens" and d2.budget["tokens_in"] == 800


def test_minutes_run_out_then_one_wrap_up_turn():
    loop = make_loop(max_minutes=10)
    d1 = stop(loop, minute=11)
    assert "WRAP-UP TURN" in d1.prompt
    d2 = stop(loop, d1.budget, minute=12)
    assert d2.outcome == "BUDGET_EXHAUSTED:minutes"


def test_cancel_during_the_wrap_up_turn_ends_the_loop_cancelled():
    loop = make_loop(max_iterations=1)
    d1 = stop(loop)
    d2 = stop(loop, d1.budget, minute=2, cancelled=True)
    assert d2.action == router.STOP and d2.outcome == router.CANCELLED


@pytest.mark.parametrize(
    "kw, outcome",
    [
        ({"cancelled": True}, router.CANCELLED),
        ({"stop_request": {"reason": "enough"}}, "STOPPED:enough"),
    ],
)
def test_cancel_and_stop_requests_get_no_wrap_up_turn(kw, outcome):
    loop = make_loop(max_iterations=1)
    d = stop(loop, **kw)
    assert d.action == router.STOP and d.outcome == outcome


def test_a_gate_stop_gets_no_wrap_up_turn():
    loop = make_loop(gate_policy="stop", max_iterations=5)
    b = None
    for i in range(3):
        b = stop(loop, b, minute=i + 1).budget
    d = stop(loop, b, minute=4)  # iteration 4 of 5 crosses 80%: the gate fires, the policy stops
    assert d.action == router.STOP and d.outcome == "GATE_STOP:budget-escalation"


def test_no_wrap_up_ends_at_once():
    loop = make_loop(max_iterations=1, wrap_up=False)
    d = stop(loop)
    assert d.action == router.STOP and d.outcome == router.MAX_ITERATIONS
    loop = make_loop(max_dollars=1.0, wrap_up=False)
    assert stop(loop, spend=0.45).action == router.CONTINUE  # runs on to the ceiling itself


def test_done_on_the_last_iteration_needs_no_wrap_up():
    loop = make_loop(max_iterations=1)
    d = stop(loop, message="<promise>DONE</promise>")
    assert d.outcome == router.LOOP_DONE


def test_the_verify_check_does_not_run_in_the_wrap_up_turn():
    loop = make_loop(max_iterations=1, verify="pytest -q")
    d1 = stop(loop)
    snap = router.Snapshot(
        mode=modes.for_loop(loop),
        now=T0 + 120,
        session_id="S",
        loop=loop,
        budget=d1.budget,
        turn=Increment(cursor=Cursor(path="/t", offset=1), used_tool=True, usage={}),
        last_message="<promise>DONE</promise>",
    )
    assert not router.needs_verification(snap)


def test_the_floor_holds_before_any_iteration_has_a_cost():
    budget = router.initial_budget(make_loop(max_dollars=10.0))
    assert wrapup.reserve(budget, "dollars") == pytest.approx(1.0)  # 10% of the ceiling
    budget["wrap_up_floor"] = 0.3
    assert wrapup.reserve(budget, "dollars") == pytest.approx(3.0)
    budget.update(iterations_used=2, dollars_estimate=1.0)
    assert wrapup.reserve(budget, "dollars") == pytest.approx(1.0)  # twice the $0.50 mean


def test_a_mode_says_what_the_wrap_up_asks_of_the_working_tree():
    loop = make_loop(max_iterations=1)
    d = stop(loop)
    hint = modes.for_loop(loop).wrap_up_hint(loop, None)
    assert hint and hint in d.prompt


def test_a_wrap_up_turn_is_priced_as_two_requests_at_the_dearest_so_far():
    """Issue 26 item 6(c): turns of one $1.125 request against $3.00. The wrap-up turn is two
    requests (the handoff's tool call, then the last word): $2.25, more than the $1.875 left after
    the first turn, so there is no wrap-up turn and the loop ends at $1.125, not $3.38."""
    loop = make_loop(max_dollars=3.0)
    d = stop(loop, spend=1.125, requests=1)
    assert d.action == router.STOP and d.outcome == "BUDGET_EXHAUSTED:dollars"
    assert d.budget["router"]["dearest_request"]["dollars"] == pytest.approx(1.125)
    (skipped,) = [j["skipped"] for j in d.journal if j.get("event") == "wrap-up"]
    assert skipped.startswith("what is left of the dollars ceiling ($1.88) would not pay for a wrap-up turn")
    # Turns of four $0.1875 requests: the same $0.75 a turn, a wrap-up of about $0.375.
    b, turns = None, 0
    while True:
        d = stop(loop, b, minute=turns + 1, spend=0.75, requests=4)
        turns, b = turns + 1, d.budget
        if d.action == router.STOP or "WRAP-UP TURN" in d.prompt:
            break
    assert turns == 3 and "WRAP-UP TURN" in d.prompt  # $0.75 left: less than $0.75 + $0.375
    end = stop(loop, b, minute=5, spend=0.375, requests=2)
    assert end.outcome == "BUDGET_EXHAUSTED:dollars" and end.budget["dollars_estimate"] == pytest.approx(
        2.625
    )


def test_a_turn_dearer_than_the_mean_raises_the_reserve():
    """Later turns carry more context: the next turn is expected to cost what the last one did
    when that is more than the mean (the mean alone, $0.58, would keep back $1.17 of $1.25)."""
    loop = make_loop(max_dollars=3.0)
    d1 = stop(loop, spend=0.25, requests=5)
    d2 = stop(loop, d1.budget, minute=2, spend=0.25, requests=5)
    d3 = stop(loop, d2.budget, minute=3, spend=1.25, requests=5)
    assert "WRAP-UP" not in d2.prompt
    assert wrapup.turn_cost(d3.budget, "dollars") == pytest.approx(1.25)
    assert wrapup.wrap_up_cost(d3.budget, "dollars") == pytest.approx(0.5)  # two $0.25 requests
    assert "WRAP-UP TURN" in d3.prompt and "($1.75 kept back)" in d3.prompt
