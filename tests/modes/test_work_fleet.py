"""A work loop that shares its backlog with other fleet loops (`submit work --parallel N`,
modes/work/fleet.py): it picks only the items its worker reserved for it, waits a turn for an
item nobody holds yet, counts no handed-over item as drift, fails closed on a missing or bad
list, and learns the list's path only through its own signed loop.json (`run --fleet-items`)."""

from __future__ import annotations

import json

import pytest

from conftest import cli, hook_stop
from loopwright.actions import fleetitems
from loopwright.core.errors import UserError
from loopwright.core.modeapi import Tick
from loopwright.events import slash
from loopwright.modes.work import fleet, mode, source
from loopwright.state import loops


def item(n, busy=None):
    return {
        "id": f"#{n}",
        "title": f"issue {n}",
        "body": "## Acceptance Criteria\n- works\n",
        "depends_on": [],
        "in_progress": busy,
        "url": None,
    }


def shared(items, mine, others=()) -> source.View:
    """The view a fleet loop's Stop reads: the backlog with its share applied."""
    share = {"mine": list(mine), "others": list(others)}
    view = source.View(items=items)
    fleet.apply(view.items, share)
    view.fleet = share
    return view


def run(state, view, iteration=2):
    return mode.MODE.step(state, view, Tick(iteration, "2027-01-01T00:00:00Z"))


def test_items_of_other_loops_and_items_nobody_holds_are_marked_and_others_kept():
    items = [item(1), item(2), item(3, busy="assigned to bob"), item(4)]
    fleet.apply(items, {"mine": ["#2"], "others": ["#1"]})
    assert [i["in_progress"] for i in items] == [fleet.ELSEWHERE, None, "assigned to bob", fleet.NOT_YET]
    assert [bool(i.get("fleet_unreserved")) for i in items] == [False, False, False, True]


def test_a_fleet_loop_picks_only_its_own_item():
    step = run({"turn": "survey"}, shared([item(1), item(2), item(3)], mine=["#2"], others=["#1"]), 1)
    assert step.handover["item"]["id"] == "#2" and step.outcome is None
    assert "not picked: #1, in progress (claimed by another fleet loop)." in step.notes
    assert "not picked: #3, in progress (not reserved for this loop yet)." in step.notes


def test_with_every_item_held_elsewhere_the_backlog_is_empty_for_this_loop():
    step = run(
        {"turn": "work", "handled": ["#1"]},
        shared([item(1, busy="open pull request #9"), item(2)], ["#1"], ["#2"]),
    )
    assert step.outcome == "BACKLOG_EMPTY"


def test_a_fleet_loop_waits_a_turn_for_an_item_nobody_holds_yet_and_gives_up_after_the_limit():
    view = lambda: shared([item(1, busy="open pull request #9"), item(2)], mine=["#1"])  # noqa: E731
    st = {"turn": "work", "handled": ["#1"], "current": "#1"}
    for n in range(1, mode.FLEET_WAITS_LIMIT + 1):
        step = run(st, view())
        assert step.outcome is None and step.handover == {"turn": "survey"}
        assert any("has not reserved this loop's next item yet (#2" in note for note in step.notes)
        st = step.state
        assert st["fleet_waits"] == n
    last = run(st, view())
    assert (last.outcome, last.fired) == ("EXTERNAL_UNREACHABLE", ["fleet_unreserved"])
    assert "reserved no item for this loop" in last.reason
    # Reserved at last: the loop goes on, and the count starts again.
    picked = run(st, shared([item(1, busy="open pull request #9"), item(2)], mine=["#1", "#2"]))
    assert picked.handover["item"]["id"] == "#2" and "fleet_waits" not in picked.state


def test_items_the_fleet_hands_over_are_no_drift_but_a_spare_someone_closed_is():
    first = run({"turn": "survey"}, shared([item(1), item(2), item(3)], mine=["#1"]), 1)
    assert first.handover["item"]["id"] == "#1"
    pr = "open pull request #9"
    second = run(first.state, shared([item(1, busy=pr), item(2), item(3)], mine=["#1", "#2", "#3"]))
    assert second.handover["item"]["id"] == "#2" and not second.gates
    # #3 closed by someone (it leaves the backlog), #4 reserved for the loop meanwhile.
    left = [item(1, busy=pr), item(2, busy=pr), item(4)]
    third = run(second.state, shared(left, mine=["#1", "#2", "#3", "#4"]))
    assert [g["name"] for g in third.gates] == ["backlog-drift"]
    assert third.gates[0]["detail"] == "the backlog changed since the last iteration: gone #3."


@pytest.mark.parametrize(
    "content, problem",
    [
        (None, "is missing"),
        ("{not json", "cannot be read"),
        ('{"mine": "#1", "others": []}', "is not the worker's list"),
        ('{"mine": [1], "others": []}', "is not the worker's list"),
        ('["#1"]', "is not the worker's list"),
    ],
)
def test_a_missing_or_bad_list_gives_no_item_at_all(tmp_path, project, content, problem):
    path = tmp_path / "items.json"
    if content is not None:
        path.write_text(content)
    loop = {
        "name": "work",
        "project_dir": str(project),
        "work": {"source": "tasks", "fleet_items": str(path)},
    }
    view = source.read(loop)
    assert view.items == [] and view.fleet is None
    assert (
        view.problem.startswith(f"the fleet's list of this loop's items ({path}) ")
        and problem in view.problem
    )


# --- through the real Stop hook, over the task registry ------------------------------------------


def start(project):
    raw = json.dumps({"prompt": "/loopwright:work --loop", "session_id": "S1", "cwd": str(project)})
    return slash.handle(raw.encode())


def test_the_list_s_path_comes_from_the_signed_loop_json_and_the_stop_picks_from_it(project, state, tmp_path):
    for text in ("write the parser", "test the parser", "document the parser"):
        cli(project, "task", "add", text)
    start(project)
    listed = tmp_path / "worker" / "items.json"
    listed.parent.mkdir()
    listed.write_text(json.dumps({"mine": ["task-2"], "others": ["task-1"]}))
    fleetitems.attach(state, "work", str(listed))
    cfg = loops.load_config(loops.LoopPaths(state, "work"))  # signed: the loop trusts it
    assert cfg["work"]["fleet_items"] == str(listed)
    answer = hook_stop(project, "S1", "ok")
    assert "Work item for this iteration: task-2" in answer["reason"]
    assert "not picked: task-1, in progress (claimed by another fleet loop)" in answer["reason"]
    assert "not picked: task-3, in progress (not reserved for this loop yet)" in answer["reason"]
    # What the worker reads to reserve: the whole backlog in order, and what the loop took.
    budget = loops.read_state(loops.LoopPaths(state, "work"), "budget")
    assert mode.MODE.fleet_share(cfg, budget["mode_state"]) == (["task-1", "task-2", "task-3"], ["task-2"])
    listed.unlink()  # fail closed: no list, no item; twice in a row ends the loop
    once = hook_stop(project, "S1", "ok")["reason"]
    assert (
        f"the backlog could not be read (the fleet's list of this loop's items ({listed}) is missing)" in once
    )
    end = hook_stop(project, "S1", "ok")
    assert "EXTERNAL_UNREACHABLE" in end["systemMessage"]


def test_only_a_loop_of_a_shared_backlog_that_starts_now_takes_a_list(project, state, tmp_path):
    cli(project, "task", "add", "write the parser")
    start(project)
    hook_stop(project, "S1", "ok")
    hook_stop(project, "S1", "ok")  # an iteration counted: not a loop that starts now
    with pytest.raises(UserError, match="has run already"):
        fleetitems.attach(state, "work", str(tmp_path / "items.json"))
    out = cli(project, "start", "--name", "plain", "a goal")
    assert out.returncode == 0, out.stderr
    with pytest.raises(UserError, match="does not share a backlog"):
        fleetitems.attach(state, "plain", str(tmp_path / "items.json"))
