"""A short run of the Stop-hook benchmark, so a slow fast path or a cost that
grows with the transcript fails the suite (the full run is `make bench`)."""

import json
import subprocess
import sys

from conftest import REPO


def test_stop_hook_costs_stay_flat():
    out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_stop.py"), "--runs", "15", "--big-mb", "30", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    med = res["median_ms"]
    # The launcher decides "no loop" without starting Python: far below an interpreter start.
    assert res["ratio_to_bare"]["fast path"] <= 1.3, med
    # The active decision does not grow with the transcript (generous margin for a noisy machine).
    assert med["active 30 MB"] <= 1.5 * med["active 10 KB"], med
