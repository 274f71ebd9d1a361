"""`loopwright submit work --parallel N` (cli/fleet.py, fleet/spec.py, fleet/items.py): N rows
sharing one backlog key, checked where a worker would check a row again; bad input is one line
with exit code 1."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import refused
from loopwright.cli.fleet import submit
from loopwright.fleet import items, spec
from loopwright.fleet.spec import SpecError
from loopwright.registry import open_registry


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "runs.sqlite")


def queue(db, *args):
    return CliRunner().invoke(
        submit, ["--db", db, "--repo", "file:///srv/app.git", *args], catch_exceptions=False
    )


def test_parallel_queues_n_work_loops_with_one_backlog_key(db):
    words = ["work", "--source", "github", "--repo", "acme/widgets"]  # the mode's --repo after --
    out = queue(db, "--name", "grind", "--parallel", "3", "--max-prs", "4", "--", *words)
    assert out.exit_code == 0, out.output
    assert [line.split()[3] for line in out.stdout.splitlines()] == ["grind-1", "grind-2", "grind-3"]
    reg = open_registry(db)
    rows = sorted(reg.fleet_loops(), key=lambda r: r["name"])
    reg.close()
    keys = {r["spec"]["backlog"] for r in rows}
    assert len(keys) == 1 and len(keys.pop()) == 32
    assert {r["kind"] for r in rows} == {"work"}
    assert rows[0]["spec"]["args"] == ["--source", "github", "--repo", "acme/widgets"]
    assert rows[0]["spec"]["limits"] == {"max_prs": 4}
    again = queue(db, "--parallel", "2", "--json", "work")
    drawn = __import__("json").loads(again.stdout)
    assert len(drawn) == 2 and drawn[0]["spec"]["backlog"] != rows[0]["spec"]["backlog"]
    assert all(r["name"].startswith("f-") for r in drawn)


def test_parallel_is_refused_for_other_kinds_taken_names_and_out_of_range_counts(db):
    assert "a prompt loop does not share a backlog" in refused(queue(db, "--parallel", "2", "a goal"))
    assert "a review loop does not share a backlog" in refused(queue(db, "--parallel", "2", "review"))
    assert queue(db, "--name", "grind-2", "work").exit_code == 0
    assert "a fleet loop named grind-2 exists already" in refused(
        queue(db, "--name", "grind", "--parallel", "2", "work")
    )
    assert "the name " + "n" * 62 + "-10 must be" in refused(
        queue(db, "--name", "n" * 62, "--parallel", "10", "work")
    )
    assert queue(db, "--parallel", "65", "work").exit_code == 2  # click's range check
    reg = open_registry(db)
    assert [r["name"] for r in reg.fleet_loops()] == ["grind-2"]
    reg.close()


@pytest.mark.parametrize(
    "kind, row, problem",
    [
        ("work", {"args": [], "backlog": ""}, "the backlog key must be non-empty text"),
        ("work", {"args": [], "backlog": 7}, "the backlog key must be non-empty text"),
        ("work", {"args": [], "backlog": "k\n"}, "line break"),
        ("work", {"args": [], "backlog": "k" * 201}, "the limit is 200"),
        ("task", {"args": [], "backlog": "k"}, "a task loop does not share a backlog"),
        ("prompt", {"goal": "g", "backlog": "k"}, "a prompt loop does not share a backlog"),
    ],
)
def test_a_row_s_backlog_key_is_checked_as_a_worker_would(kind, row, problem):
    with pytest.raises(SpecError, match=problem):
        spec.runner_args(kind, row)


def test_a_row_without_a_key_shares_nothing_and_one_with_a_key_names_it():
    assert spec.backlog_of("work", {"args": []}) is None
    assert spec.backlog_of("work", {"args": [], "backlog": "b1"}) == "b1"
    assert spec.runner_args("work", {"args": ["--source", "github"], "backlog": "b1"}) == [
        "work",
        "--source",
        "github",
    ]


def test_the_items_held_split_into_the_loop_s_and_the_others():
    held = {"#1": "a", "#2": "b", "#3": "a", "#4": "c"}
    assert items.split(held, "a") == (["#1", "#3"], ["#2", "#4"])
    assert items.split({}, "a") == ([], [])
