"""`make demo` (tests/demo.py): one loop through the real Claude Code CLI, ending with a `status`
that shows the loop as this user's (not UNTRUSTED), and nothing left behind: its directory is
removed and no process it started is still running, after a run to the end and after Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from proctree import SIGINT_DEFAULT, homed_under
from waiting import wait_for

pytestmark = pytest.mark.e2e


def demo(tmp_path, **extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "LOOPWRIGHT"))}
    env.update(TMPDIR=str(tmp_path), PYTHONUNBUFFERED="1", **extra)  # its directory under this test's
    out = tmp_path / "demo.out"
    with open(out, "wb") as fh:
        proc = subprocess.Popen(
            [*SIGINT_DEFAULT, sys.executable, str(REPO / "tests" / "demo.py")],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
        )
    proc.out = out
    return proc


def made(tmp_path) -> list[Path]:
    return sorted(tmp_path.glob("loopwright-demo-*"))


def test_the_demo_ends_with_its_loop_trusted_and_leaves_nothing(tmp_path):
    proc = demo(tmp_path)
    assert proc.wait(timeout=600) == 0, proc.out.read_text()
    text = proc.out.read_text()
    status = text[text.index("$ loopwright status") :]
    assert re.search(r"\n    prompt: ended LOOP_DONE after 3/5 iterations\n", status), status
    assert "UNTRUSTED" not in text
    (work,) = re.findall(r"^demo directory: (\S+)$", text, re.M)
    assert not Path(work).exists() and made(tmp_path) == []
    assert homed_under(work) == []
    assert text.rstrip().endswith(f"cleaned up: {work} removed, no process of the demo left")


def test_ctrl_c_cleans_up_too(tmp_path):
    # Its second model call is held: Claude Code is surely running when the Ctrl-C comes (the
    # whole demo takes about a second of the client's time, and what a demo leaves running
    # until its end, a resident Stop server, would be found as well).
    proc = demo(tmp_path, DEMO_HOLD_SECONDS="120")
    try:
        work = wait_for(lambda: made(tmp_path), "the demo's directory", proc=proc)[0]
        wait_for(lambda: homed_under(work), "Claude Code running in the demo", proc=proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, proc.out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "interrupted: cleaning up" in proc.out.read_text()
    assert not work.exists() and homed_under(work) == []
