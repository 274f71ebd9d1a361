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
    # The launcher decides "no loop" without starting Python: far below an interpreter start.
    assert res["ratio_to_bare"]["fast path"] <= 1.3, med
    # The active decision does not grow with the transcript (generous margin for a noisy machine).
    assert med["active 30 MB"] <= 1.5 * med["active 10 KB"], med


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
