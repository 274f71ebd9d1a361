"""A short run of the Stop-hook benchmark, so a slow fast path or a cost that
grows with the transcript fails the suite (the full run is `make bench`)."""

import json
import subprocess
import sys

from conftest import REPO


def test_stop_hook_costs_stay_flat():
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_stop.py"), "--runs", "15", "--big-mb", "30", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    med = res["median_ms"]
    # The launcher decides "no loop" without starting Python: far below an interpreter start
    # (a margin for a noisy machine; `make bench` checks the tighter targets). That it also
    # decides another session's Stop without Python is shown exactly by test_launcher.py:
    # under load three small processes are no cheaper than one interpreter start.
    assert res["ratio_to_bare"]["fast path"] <= 0.5, med
    # A prompt loop's Stop loads nothing of task mode and no run-time dependency.
    assert all(ok for name, ok in res["checks"].items() if name.startswith("a prompt-mode Stop")), res[
        "checks"
    ]
    # The active decision does not grow with the transcript: reading the whole 30 MB would
    # cost ten times as much. Best runs, with room for a machine under load, where even
    # best runs of the same work differ by 2x.
    best = res["min_ms"]
    assert best["active 30 MB"] <= 3 * best["active 10 KB"], best


def test_task_registry_costs_grow_no_worse_than_linearly():
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_tasks.py"), "--lines", "40000", "--runs", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    # 4x the lines; allow 1.5x slack over linear for a noisy shared machine.
    assert res["growth_4x"]["router_render_ms"] <= 6.0, res
    assert res["growth_4x"]["task_list_ms"] <= 6.0, res
