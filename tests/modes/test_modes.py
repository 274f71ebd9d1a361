"""The mode interface: every registered mode keeps the contract, and a mode defined
here, in the test, runs a whole loop through the real shell (start, the Stop hook's
observe → decide → apply, the end) without a line of it outside this file."""

from __future__ import annotations

import json

import pytest

from loopwright import modes
from loopwright.actions import start as starting
from loopwright.core import modeapi, schema
from loopwright.core.modeapi import DIMENSIONS, Mode, PromptParts, Step, Tick
from loopwright.events import stop as stop_event
from loopwright.state import loops

LOOP = {
    "name": "x",
    "mode": "prompt",
    "prompt": "the goal",
    "completion_promise": "DONE",
    "max_iterations": 5,
    "max_minutes": 60,
    "max_dollars": 25.0,
    "task_module": "m",
    "project_dir": "/nowhere",
}
FIRST_STATES = {"task": {"module": "m", "step": "plan", "checkpoint": ""}}


@pytest.mark.parametrize("name", modes.names())
def test_every_registered_mode_keeps_the_contract(name):
    mode = modes.get(name)
    assert isinstance(mode, Mode) and mode.name == name and mode.summary
    assert set(mode.counted) <= set(DIMENSIONS)
    assert all(isinstance(v, (int, float)) and v > 0 for v in mode.defaults.values())
    assert all(isinstance(spec, schema.Spec) for spec in mode.config_fields.values())
    loop = dict(LOOP, mode=name)
    state = FIRST_STATES.get(name)
    assert mode.first_prompt(loop, state).strip()
    tick = Tick(1, "2027-01-15T08:00:00Z")
    step = mode.step(state, None, tick)
    assert isinstance(step, Step)
    parts = PromptParts(status="STATUS-LINE", notes=["a note"], gates="GATE-SECTION")
    text = mode.prompt(loop, step.state, parts, tick)
    assert text.startswith("STATUS-LINE") and "a note" in text and "GATE-SECTION" in text
    assert all(isinstance(p, str) for p in mode.status_parts(loop, {}))
    assert mode.outcome_text(loop, "MAX_ITERATIONS") in (None,) or isinstance(
        mode.outcome_text(loop, "MAX_ITERATIONS"), str
    )


def test_an_unknown_mode_is_one_clear_error():
    with pytest.raises(modes.UnknownMode, match="unknown mode 'nope'; the modes are prompt, task"):
        modes.get("nope")
    with pytest.raises(loops.LoopError, match="unknown mode"):
        starting.validate(starting.StartRequest(prompt="g", mode="nope"))


# --- a mode written here ---------------------------------------------------------------------


class Countdown(Mode):
    """Counts down from a number given at start; done at zero. Not stopped by tokens."""

    name = "countdown"
    summary = "count down to zero, one number per iteration"
    defaults = {"max_iterations": 9, "max_minutes": 5}
    counted = tuple(d for d in DIMENSIONS if d != "tokens")
    config_fields = {"countdown_from": schema.Int(1, 100)}
    state_spec = schema.Obj({"left": schema.Int(0, 100)}, required=("left",))

    def __init__(self):
        self.ended: list[tuple[str, str]] = []

    def begin(self, config, project, stamp):
        start = config.get("countdown_from")
        if not isinstance(start, int) or start < 1:
            raise loops.LoopError("countdown needs countdown_from, a whole number of 1 or more")
        return {"left": start}

    def first_prompt(self, loop, state):
        return f"Say {state['left']}."

    def observe(self, loop):
        return {"seen": True}

    def step(self, state, observation, tick):
        assert observation == {"seen": True}
        left = state["left"] - 1
        if left == 0:
            return Step(
                outcome="LOOP_DONE", reason="the countdown reached zero", state={"left": 0}, completion=False
            )
        return Step(state={"left": left}, completion=False, reason=f"{left} to go", notes=[f"{left} left"])

    def prompt(self, loop, state, parts, tick):
        return "\n".join([parts.status, *parts.notes, f"Say {state['left']}."])

    def status_parts(self, loop, budget):
        return [f"from {loop.get('countdown_from')}"]

    def outcome_text(self, loop, outcome):
        return "lift-off" if outcome == "LOOP_DONE" else None

    def end(self, loop, outcome):
        self.ended.append((loop["name"], outcome))


@pytest.fixture
def countdown(monkeypatch, project):
    mode = Countdown()
    modes.register("countdown", mode)
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(project))
    monkeypatch.setenv("LOOPWRIGHT_CATCH_UP_SECONDS", "0")
    yield mode
    modes.unregister("countdown")


def stop(project, session="S1") -> dict | None:
    event = {
        "session_id": session,
        "transcript_path": str(project / "none.jsonl"),
        "cwd": str(project),
        "hook_event_name": "Stop",
        "stop_hook_active": True,
        "last_assistant_message": "ok",
    }
    return stop_event.handle(json.dumps(event).encode())


def test_a_mode_defined_in_a_test_runs_a_whole_loop(countdown, project):
    state = project / ".loopwright"
    req = starting.StartRequest(
        prompt="count", mode="countdown", session="S1", mode_config={"countdown_from": 3}, max_tokens=1
    )
    paths, loop = starting.start(state, req)
    assert loop["countdown_from"] == 3 and loop["max_iterations"] == 9  # its config key and its defaults
    assert "Say 3." in starting.announcement(loop, state={"left": 3})

    first = stop(project)
    assert first["decision"] == "block" and "2 left" in first["reason"] and "Say 2." in first["reason"]
    assert "from 3" in first["systemMessage"]  # its status part
    second = stop(project)
    assert second["decision"] == "block" and "Say 1." in second["reason"]
    last = stop(project)
    assert "decision" not in last and "ended: LOOP_DONE (lift-off)" in last["systemMessage"]
    assert countdown.ended == [(loop["name"], "LOOP_DONE")]
    cfg = loops.load_config(paths)
    assert cfg["status"] == "ended" and cfg["outcome"] == "LOOP_DONE"
    budget = json.loads(paths.budget.read_text())
    assert budget["mode_state"] == {"left": 0} and budget["iterations_used"] == 3


def test_a_modes_config_and_state_are_checked_against_its_specs(countdown, project):
    state = project / ".loopwright"
    with pytest.raises(loops.LoopError, match="countdown needs countdown_from"):
        starting.start(state, starting.StartRequest(prompt="c", mode="countdown", session="S1"))
    paths, _ = starting.start(
        state,
        starting.StartRequest(prompt="c", mode="countdown", session="S1", mode_config={"countdown_from": 3}),
    )
    budget = json.loads(paths.budget.read_text())
    budget["mode_state"] = {"left": "many"}
    paths.budget.write_text(json.dumps(budget))
    answer = stop(project)
    assert "decision" not in answer and "budget.json.mode_state.left" in answer["systemMessage"]


def test_the_registry_holds_no_mode_by_name_elsewhere():
    """Engine, hooks, actions and CLI look modes up; none of them names one."""
    from conftest import LIB

    names = [n for n in modes.names()]
    hits = []
    for path in (LIB / "loopwright").rglob("*.py"):
        rel = path.relative_to(LIB / "loopwright").as_posix()
        if rel.startswith("modes/"):
            continue
        text = path.read_text()
        for n in names:
            for pattern in (
                f'mode") == "{n}"',
                f"mode') == '{n}'",
                f'mode == "{n}"',
                f'"mode": "{n}"',
                f'mode="{n}"',
                f'"{n}" mode',
            ):
                if pattern in text:
                    hits.append(f"{rel}: {pattern}")
    assert not hits, hits
    assert modeapi.Mode.counted == DIMENSIONS
