"""What the engine does with a mode's Step: uncounted turns, the mode's own gates under
each gate policy, answers handed back, observed counters, and tick ids that make an
uncounted tick's history line safe to commit twice."""

from __future__ import annotations

import pytest
from test_router import make_loop, snap

from loopwright import modes
from loopwright.core import router
from loopwright.core.modeapi import Mode, Step
from loopwright.state import loops
from loopwright.tick import commit

GATE = {
    "name": "backlog-drift",
    "question": "Backlog changed since last iteration. Re-propose the next batch?",
    "options": ["re-propose", "continue", "stop"],
}


class Scripted(Mode):
    """A mode whose next Step is set by the test; it remembers the answers it heard."""

    name = "scripted"
    summary = "a test mode"
    self_counted = ("comments",)

    def __init__(self):
        self.next, self.heard = Step(completion=False), []

    def first_prompt(self, loop, state):
        return "first"

    def step(self, state, observation, tick):
        self.heard.append(list(tick.answers))
        return self.next

    def prompt(self, loop, state, parts, tick):
        return "\n".join([parts.status, parts.gates or "", f"turn {tick.iteration + 1}"])


@pytest.fixture
def mode():
    m = Scripted()
    modes.register("scripted", m)
    yield m
    modes.unregister("scripted")


def test_an_uncounted_turn_adds_time_and_spend_but_no_iteration(mode):
    loop = make_loop(mode="scripted", max_iterations=1)
    mode.next = Step(completion=False, counted=False, state={})
    d = router.decide(snap(loop, usage={"m": {"input_tokens": 100, "output_tokens": 5}}))
    assert d.action == router.CONTINUE  # a counted turn would have hit max_iterations 1
    assert d.budget["iterations_used"] == 0 and d.budget["tokens_in"] == 100
    assert d.history["counted"] is False and d.history["iteration"] == 0
    assert "iteration 1 of 1" in d.prompt


@pytest.mark.parametrize(
    "policy, action", [("ask", router.CONTINUE), ("continue", router.CONTINUE), ("stop", router.STOP)]
)
def test_a_modes_gate_follows_the_gate_policy(mode, policy, action):
    loop = make_loop(mode="scripted", gate_policy=policy)
    mode.next = Step(completion=False, gates=[GATE], state={})
    d = router.decide(snap(loop))
    assert d.action == action
    recorded = [(g["name"], g["answer"], g["by"]) for g in d.history["gates"]]
    expected = {"ask": None, "continue": "continue", "stop": "stop"}[policy]
    assert recorded == [("backlog-drift", expected, "asked" if policy == "ask" else "policy")]
    if policy == "ask":
        assert 'Gate "backlog-drift"' in d.prompt
    if policy == "stop":
        assert d.outcome == "GATE_STOP:backlog-drift"


def test_the_answer_to_a_modes_gate_is_handed_back_to_the_mode(mode):
    loop = make_loop(mode="scripted")
    mode.next = Step(completion=False, gates=[dict(GATE, item="#4")], state={})
    budget = router.decide(snap(loop)).budget
    budget["pending_gates"][0]["answer"] = "re-propose"
    mode.next = Step(completion=False, state={})
    router.decide(snap(loop, budget))
    assert [(a["name"], a["answer"], a.get("item")) for a in mode.heard[-1]] == [
        ("backlog-drift", "re-propose", "#4")
    ]


def test_counters_the_mode_observes_win_over_the_agents_reports(mode):
    loop = make_loop(mode="scripted")
    mode.next = Step(completion=False, state={}, report={"prs": ["#3"], "comments": 2})
    reports = ({"outcome": "success", "comments": 40, "prs": ["#9"], "merges": 1},)
    d = router.decide(snap(loop, reports=reports))
    assert d.budget["comments_pushed"] == 2  # the agent's 40 is ignored: the mode counts comments
    assert d.budget["prs_touched"] == ["#9", "#3"] and d.budget["merges_attempted"] == 1
    assert d.history["comments_pushed_this_iter"] == 2


def test_an_uncounted_ticks_history_line_is_written_once_even_when_replayed(mode, tmp_path):
    state = tmp_path / ".loopwright"
    paths = loops.LoopPaths(state, "scripted")
    paths.dir.mkdir(parents=True)
    loop = make_loop(mode="scripted", name="scripted", project_dir=str(tmp_path))
    mode.next = Step(completion=False, counted=False, state={})
    first = router.decide(snap(loop))
    s = snap(loop)
    for decision in (first, router.decide(snap(loop, first.budget))):  # two uncounted ticks, both iteration 0
        rec = commit.tick_record(loop, decision, s, [], ())
        budget = dict(decision.budget, tick=rec)
        commit.finish(paths, loop, budget, loops.read_state(paths, "ledger"), ())
        commit.finish(paths, loop, budget, loops.read_state(paths, "ledger"), ())  # replayed after a "kill"
    lines = paths.history.read_text().splitlines()
    assert len(lines) == 2
    ledger = loops.read_state(paths, "ledger")
    assert ledger["sessions"]["S"]["iterations"] == 0
