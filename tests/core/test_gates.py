"""Budgets and gates in the router: 100% stops, the 80% escalation gate and its
batching, policies, answers, repeated failure, external outage."""

import pytest

from loopwright import modes
from loopwright.core import budget as budgets
from loopwright.core import gates, modeapi, router
from loopwright.core.rates import table
from loopwright.state.transcript import Cursor, Increment

T0 = 1_800_000_000.0


def make_loop(**kw):
    loop = {
        "name": "prompt",
        "mode": "prompt",
        "prompt": "goal",
        "completion_promise": "DONE",
        "max_iterations": 5,
        "max_minutes": 60,
        "max_tokens": None,
        "max_dollars": 25.0,
        "max_prs": None,
        "owner_session": "S",
        "started_at": "2027-01-15T08:00:00Z",
        "status": "active",
        "gate_policy": "ask",
        # These tests are about the rules before a wrap-up turn; tests/core/test_wrapup.py has it.
        "wrap_up": False,
    }
    loop.update(kw)
    return loop


def tick(loop, budget=None, *, minute=1.0, usage=None, reports=(), message="working", mode=None):
    budget = budget if budget is not None else router.initial_budget(loop)
    turn = Increment(cursor=Cursor(path="/t", offset=1), used_tool=True, usage=usage or {})
    snap = router.Snapshot(
        mode=mode or modes.for_loop(loop),
        now=T0 + minute * 60,
        session_id="S",
        loop=loop,
        budget=budget,
        turn=turn,
        last_message=message,
        stop_hook_active=True,
        reports=tuple(reports),
        rates=table(None),
    )
    return router.decide(snap)


def run(loop, n, **kw):
    d, b = None, None
    for i in range(n):
        d = tick(
            loop, b, minute=kw.get("minute", 1.0 + i * 0.01), **{k: v for k, v in kw.items() if k != "minute"}
        )
        b = d.budget
    return d


def test_iteration_gate_fires_at_80_percent_with_the_seed_wording():
    loop = make_loop()
    decisions = []
    b = None
    for _ in range(4):
        d = tick(loop, b)
        decisions.append(d)
        b = d.budget
    assert [x.action for x in decisions] == [router.CONTINUE] * 4
    assert "Gate" not in decisions[2].prompt
    gate = b["pending_gates"][0]
    assert gate["question"] == "Approaching iterations (4/5). Continue, raise ceiling, or stop?"
    assert gate["options"] == ["continue", "raise", "stop"]
    assert 'Gate "budget-escalation"' in decisions[3].prompt and "AskUserQuestion" in decisions[3].prompt
    assert decisions[3].history["gates"] == [
        {
            "name": "budget-escalation",
            "question": gate["question"],
            "answer": None,
            "at": decisions[3].history["ended_at"],
            "by": "asked",
        }
    ]


def test_several_budgets_crossing_in_one_tick_make_one_combined_gate():
    loop = make_loop(max_dollars=1.0)
    b = router.initial_budget(loop)
    b["iterations_used"] = 3
    usage = {
        "claude-sonnet-4-5": {
            "input_tokens": 0,
            "output_tokens": 56_000,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    }
    d = tick(loop, b, minute=49, usage=usage)
    (gate,) = d.budget["pending_gates"]
    assert gate["question"] == (
        "Approaching iterations (4/5), minutes (49/60), and dollars ($0.84/$1.00). "
        "Continue, raise ceiling(s), or stop?"
    )


def test_a_100_percent_stop_suppresses_the_gate_in_the_same_tick():
    loop = make_loop()
    b = router.initial_budget(loop)
    b["iterations_used"] = 4
    d = tick(loop, b, minute=49)
    assert d.outcome == router.MAX_ITERATIONS
    assert d.history["gates"] == [] and d.budget["pending_gates"] == []
    assert d.history["stop_conditions_fired"] == ["iteration_budget"]


def test_dollar_ceiling_stops_with_the_cost_message():
    loop = make_loop(max_dollars=0.5, max_iterations=100)
    usage = {
        "claude-sonnet-4-5": {
            "input_tokens": 100_000,
            "output_tokens": 20_000,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    }
    d = tick(loop, usage=usage)
    assert d.outcome == "BUDGET_EXHAUSTED:dollars"
    assert d.reason == "Cost budget reached: $0.60 / $0.50"
    assert d.history["stop_conditions_fired"] == ["cost_budget"]


def test_zero_dollars_disables_the_stop_but_tracks_spend():
    loop = make_loop(max_dollars=0, max_iterations=100)
    usage = {
        "claude-opus-4-1": {
            "input_tokens": 10_000_000,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    }
    d = tick(loop, usage=usage)
    assert d.action == router.CONTINUE and d.budget["dollars_estimate"] == pytest.approx(150.0)
    assert d.budget["rate_table_source"] == "built-in default"


def test_token_ceiling():
    loop = make_loop(max_tokens=1000, max_iterations=100)
    usage = {
        "m": {
            "input_tokens": 900,
            "output_tokens": 100,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    }
    assert tick(loop, usage=usage).outcome == "BUDGET_EXHAUSTED:tokens"


def answer(budget, name, value, **extra):
    gate = gates.validate_answer(budget["pending_gates"], name, value)
    gate.update(answer=value, answered_by="user", **extra)
    return budget


def test_continue_answer_is_recorded_verbatim_and_not_reused():
    loop = make_loop(max_iterations=10)
    d = run(loop, 8)  # iteration 8 crosses 80% of 10
    assert d.budget["pending_gates"]
    d2 = tick(loop, answer(d.budget, "budget-escalation", "continue"))
    assert d2.action == router.CONTINUE and "Gate" not in d2.prompt
    assert d2.history["gates"][0]["answer"] == "continue" and d2.history["gates"][0]["by"] == "user"
    assert d2.budget["gates_log"][0]["question"].startswith("Approaching iterations (8/10)")
    assert d2.budget["pending_gates"] == []


def test_stop_answer_halts_with_gate_stop():
    loop = make_loop(max_iterations=10)
    d = run(loop, 8)
    d2 = tick(loop, answer(d.budget, "budget-escalation", "stop"))
    assert d2.outcome == "GATE_STOP:budget-escalation"
    assert d2.history["stop_conditions_fired"] == ["prior_gate_stop"]


def test_raise_answer_raises_only_the_tripped_ceiling():
    loop = make_loop(max_iterations=10)
    d = run(loop, 8)
    d2 = tick(loop, answer(d.budget, "budget-escalation", "raise"))
    assert d2.budget["max_iterations"] == 15 and d2.budget["max_minutes"] == 60
    assert "max_iterations 10 → 15" in d2.prompt
    d3 = tick(
        loop, answer(run(loop, 8).budget, "budget-escalation", "raise", raise_to={"max_iterations": 40})
    )
    assert d3.budget["max_iterations"] == 40


def test_unanswered_gate_is_asked_again_then_the_loop_pauses():
    loop = make_loop(max_iterations=20)
    d = run(loop, 16)
    actions = []
    for _ in range(3):
        d = tick(loop, d.budget)
        actions.append(d.action)
    assert actions == [router.CONTINUE, router.CONTINUE, router.PAUSE]
    assert "waiting for your answer" in d.system_message


def test_gate_policy_continue_and_stop():
    d = run(make_loop(gate_policy="continue"), 4)
    assert d.action == router.CONTINUE and d.budget["pending_gates"] == []
    assert d.history["gates"][0] == {**d.history["gates"][0], "answer": "continue", "by": "policy"}
    d = run(make_loop(gate_policy="stop"), 4)
    assert d.outcome == "GATE_STOP:budget-escalation"


def test_gates_are_not_debounced_after_a_raise():
    loop = make_loop(max_iterations=5, gate_policy="continue")
    b = None
    fired = 0
    for i in range(12):
        d = tick(loop, b)
        fired += sum(1 for g in d.history["gates"] if g["name"] == "budget-escalation")
        b = d.budget
        if d.action == router.STOP:
            break
        if i == 4:
            pass
    assert fired == 1  # crossed once; the continue policy never reuses it
    assert d.outcome == router.MAX_ITERATIONS


def failure(root="tests failing in module X", item="#44"):
    return {"outcome": "failure", "root_cause": root, "item": item}


def test_repeated_failure_fires_its_gate_with_the_signature_verbatim():
    loop = make_loop(max_iterations=50)
    d = tick(loop, reports=[failure()])
    assert not d.budget["pending_gates"]
    d = tick(loop, d.budget, reports=[failure(root="Tests  failing in module X")])
    (gate,) = d.budget["pending_gates"]
    # The signature matches across whitespace and case; the question quotes this iteration's words verbatim.
    assert (
        gate["question"]
        == "Issue #44 failed twice with: Tests  failing in module X. Skip, retry once more, or stop the loop?"
    )
    assert gate["options"] == ["skip", "retry", "stop"]


def test_different_failures_do_not_fire():
    loop = make_loop(max_iterations=50)
    d = tick(loop, reports=[failure()])
    d = tick(loop, d.budget, reports=[failure(root="lint errors")])
    assert not d.budget["pending_gates"]


def test_external_outage_twice_in_a_row_stops():
    loop = make_loop(max_iterations=50)
    outage = {"outcome": "failure", "root_cause": "qmd down", "external_error": "qmd-unreachable"}
    d = tick(loop, reports=[outage])
    assert d.action == router.CONTINUE and d.budget["qmd_failures_consecutive"] == 1
    d = tick(loop, d.budget, reports=[{"outcome": "success"}])
    assert d.budget["qmd_failures_consecutive"] == 0
    d = tick(loop, d.budget, reports=[{"outcome": "failure", "root_cause": "x", "exit_code": 78}])
    d = tick(loop, d.budget, reports=[outage])
    assert d.outcome == router.EXTERNAL_UNREACHABLE
    assert d.history["stop_conditions_fired"] == ["qmd_unreachable"]


def test_reports_fold_into_counters_and_history():
    loop = make_loop(max_prs=3, max_iterations=50)
    d = tick(
        loop,
        reports=[
            {"outcome": "success", "prs": ["#1", "#2"], "comments": 4, "merges": 1, "agents": 3},
            {"outcome": "success", "prs": ["#2"]},
        ],
    )
    assert d.budget["prs_touched"] == ["#1", "#2"] and d.budget["comments_pushed"] == 4
    assert (
        d.history["prs_touched_this_iter"] == ["#1", "#2"] and d.history["agents_dispatched_this_iter"] == 3
    )
    d = tick(loop, d.budget, reports=[{"outcome": "success", "prs": ["#3"]}])
    assert d.outcome == "BUDGET_EXHAUSTED:prs"


class Watcher(modeapi.Mode):
    """A mode that records PRs but is not stopped by their count (as a PR review loop is)."""

    name = "watcher"
    counted = tuple(d for d in modeapi.DIMENSIONS if d != "prs")

    def prompt(self, loop, state, parts, tick):
        return parts.status


def test_a_mode_that_does_not_count_prs_is_never_stopped_by_them():
    loop = make_loop(mode="watcher", max_prs=1, max_iterations=50)
    d = tick(loop, reports=[{"outcome": "success", "prs": ["#142"]}], mode=Watcher())
    d = tick(loop, d.budget, reports=[{"outcome": "success", "prs": ["#142", "#143"]}], mode=Watcher())
    assert d.action == router.CONTINUE and d.budget["prs_touched"] == ["#142", "#143"]


def test_answer_validation_messages():
    pending = [gates.budget_escalation({"iterations_used": 4, "max_iterations": 5}, ["iterations"])]
    with pytest.raises(ValueError, match="not an option"):
        gates.validate_answer(pending, "budget-escalation", "maybe")
    with pytest.raises(ValueError, match="no gate force-unlock is waiting"):
        gates.validate_answer(pending, "force-unlock", "yes")


def test_raised_ceiling_grows_by_half():
    assert budgets.raised(10, "iterations") == 15
    assert budgets.raised(1, "iterations") == 2
    assert budgets.raised(25.0, "dollars") == 37.5
