"""A failed loop says why (issue 27 part 2): the real Claude Code CLI against the scripted
Messages API answering every call with HTTP 400 "prompt is too long". The runner gives up after
its recoveries, and the API's error is in what `loopwright run` prints, the report, `status`,
progress.json, the journal and the notification, not only in ~/.claude/projects/."""

from __future__ import annotations

import json
import subprocess

import pytest

import fakeapi
from conftest import REPO, lw_env
from e2e_support import journal, loop_dir
from e2e_support import run_headless as run

pytestmark = pytest.mark.e2e

CAUSE = "API error 400 invalid_request: Prompt is too long"


def test_a_run_whose_model_calls_fail_ends_saying_why(project, tmp_path):
    home, note = tmp_path / "home", tmp_path / "note.json"
    home.mkdir()
    script = [fakeapi.text("Iteration one.")]
    with fakeapi.ScriptedServer(script, default=fakeapi.prompt_too_long()) as server:
        out, _ = run(project, home, server, "a goal", "--name", "big", "--notify", f"command:cat > {note}",
                     as_json=False)  # fmt: skip
    assert out.returncode == 3, out.stdout + out.stderr  # stalled: the runner gave up
    said = out.stdout.splitlines()
    assert any(line.startswith("loopwright run: client exit: code 1 · error " + CAUSE) for line in said), said
    ended = next(line for line in said if line.startswith("loopwright run: ended"))
    assert "STOPPED:stall_limit" in ended and f"the client exited (code 1): {CAUSE}" in ended, ended

    report = (loop_dir(project, "big") / "report.md").read_text()
    assert f"- Why: the client exited (code 1): {CAUSE}; already recovered 3 times" in report, report
    assert "the runner gave up bringing its Claude Code client back" in report
    progress = json.loads((loop_dir(project, "big") / "progress.json").read_text())
    assert progress["last_error"] == CAUSE
    errors = [e for e in journal(project, "big") if e["event"] == "client_error"]
    assert len(errors) == 4 and errors[-1]["error"] == CAUSE and errors[-1]["code"] == 1

    status = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), "status", "big"],
        capture_output=True, text=True, env=lw_env(), timeout=60,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert "ended STOPPED:stall_limit" in status.stdout and CAUSE in status.stdout, status.stdout
    told = json.loads(note.read_text())
    assert told["event"] == "loop_ended" and told["last_error"] == CAUSE and CAUSE in told["reason"]
