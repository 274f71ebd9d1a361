"""The task registry's cost grows no worse than linearly with its lines, counted rather than
timed: the Python lines run (a trace function) and the JSON parses made, for the Stop's
rendering and for `loopwright task list`. Counts are the same on any machine, so 4x the lines
may cost at most 4x (with a little room for a log factor, far below the 16x of a quadratic
loop); the CPU time it takes is `make bench`'s (bench/bench_tasks.py)."""

from __future__ import annotations

import json
import sys

from conftest import cli
from loopwright.core import jsoncodec
from loopwright.state import tasks

SIZES = (2_000, 8_000)  # lines; 4x apart
LINEAR = 4 * 1.1  # the most 4x the lines may cost, in lines run


def registry(path, n: int) -> None:
    """``n`` lines: adds, a completion of every third task, a tombstone every tenth."""
    with open(path, "w") as fh:
        i = made = 0
        while made < n:
            i += 1
            task = {"id": f"task-{i}", "type": "task", "text": f"work item {i} with a realistic description"}
            entries = [dict(task, status="open", created="2026-11-22T10:00:00Z")]
            if i % 3 == 0:
                entries.append(dict(entries[0], status="done", completed="2026-11-22T11:00:00Z"))
            if i % 10 == 0:
                entries.append({"id": f"tomb-{i}", "type": "task-tombstone", "target_id": f"task-{i - 1}"})
            for e in entries[: n - made]:
                fh.write(json.dumps(e) + "\n")
                made += 1


def lines_run(fn) -> int:
    """How many Python lines (and calls) ``fn()`` runs: a count, not a clock."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        count += event == "line"
        return local

    def calls(frame, event, arg):
        nonlocal count
        count += 1
        return local

    before = sys.gettrace()
    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(before)
    return count


def test_the_stops_task_rendering_parses_each_line_once_and_grows_linearly(tmp_path, monkeypatch):
    parses = []
    loads = jsoncodec.loads
    monkeypatch.setattr(jsoncodec, "loads", lambda raw: parses.append(1) or loads(raw))
    cost = {}
    for n in SIZES:
        path = tmp_path / f"tasks-{n}.jsonl"
        registry(path, n)
        parses.clear()
        text = tasks.render(tasks.load(path), tasks.DEFAULT_PROMPT_BUDGET)
        assert text.startswith("Tasks:") and len(parses) == n  # one parse per line, one pass
        cost[n] = lines_run(lambda path=path: tasks.render(tasks.load(path), tasks.DEFAULT_PROMPT_BUDGET))
    assert cost[SIZES[1]] <= LINEAR * cost[SIZES[0]], cost


def test_task_list_grows_linearly(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    warm = tmp_path / "warm.jsonl"
    registry(warm, 10)
    # The first run imports the CLI's modules: a one-off cost, kept out of the counts.
    assert cli(project, "task", "list", env={"LOOPWRIGHT_TASKS_FILE": str(warm)}).returncode == 0
    cost, shown = {}, {}
    for n in SIZES:
        path = tmp_path / f"tasks-{n}.jsonl"
        registry(path, n)
        env = {"LOOPWRIGHT_TASKS_FILE": str(path)}
        res = cli(project, "task", "list", env=env)
        assert res.returncode == 0, res.stderr
        shown[n] = len(res.stdout.splitlines())
        cost[n] = lines_run(lambda env=env: cli(project, "task", "list", env=env))
    assert shown[SIZES[1]] > 3 * shown[SIZES[0]]  # it lists them all: the work does grow
    assert cost[SIZES[1]] <= LINEAR * cost[SIZES[0]], cost
