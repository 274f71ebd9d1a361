"""`make fleet-demo` (tests/fleet_demo.py) runs to its end: two workers on a throwaway PostgreSQL,
three loops through the real Claude Code CLI, one worker killed mid-iteration and its loop
finished by the other. The demo's exit code is its own check; here, also that it says so and
leaves nothing behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import pgcluster
from conftest import REPO

pytestmark = pytest.mark.e2e


def test_the_fleet_demo_fails_a_loop_over_and_cleans_up():
    why = pgcluster.unavailable()
    if why:
        pytest.skip(why)
    out = subprocess.run(
        [sys.executable, str(REPO / "tests" / "fleet_demo.py")], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "three loops LOOP_DONE" in out.stdout and "failed over once" in out.stdout, out.stdout
    assert re.search(r"killing worker-[ab] \(SIGKILL\)", out.stdout), out.stdout
    made = re.findall(r"^(?:demo directory|PostgreSQL cluster): (\S+)", out.stdout, re.M)
    assert len(made) == 2 and not any(Path(p).exists() for p in made), made
