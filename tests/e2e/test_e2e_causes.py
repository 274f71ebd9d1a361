"""A failed loop says why (issue 27 part 2): the real Claude Code CLI against the scripted
Messages API answering every call with HTTP 400 "prompt is too long". The runner gives up after
its recoveries, and the API's error is in what `loopwright run` prints, the report, `status`,
progress.json, the journal and the notification, not only in ~/.claude/projects/."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

import fakeapi
from conftest import REPO, lw_env
from e2e_support import journal, loop_dir
from e2e_support import run_headless as run
from fleetkit import lw, lw_here, make_remote, row_of, start_worker, stop_worker
from waiting import wait_for

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


def fleet_events(url: str, name: str) -> str:
    out = lw("fleet", "events", name, "--db", url)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_fleet_loop_whose_model_calls_fail_says_why_in_its_row_list_and_timeline(pg_url, tmp_path):
    remote = make_remote(tmp_path)
    queued = lw_here("submit", "--db", pg_url, "--repo", f"file://{remote}", "--name", "big", "a goal")
    assert queued.returncode == 0, queued.stderr
    with fakeapi.ScriptedServer([], default=fakeapi.prompt_too_long()) as server:
        worker = start_worker(pg_url, remote, tmp_path / "w1", server, tmp_path / "home", "--host", "host-a")
        try:
            row = wait_for(lambda: (r := row_of(pg_url, "big")).get("status") == "ended" and r,
                           "the loop to end", within=240, every=0.5, proc=worker)  # fmt: skip
        finally:
            log = stop_worker(worker)
    assert row["outcome"] == "STOPPED:stall_limit", log
    assert row["last_error"] == CAUSE and f"the client exited (code 1): {CAUSE}" in row["reason"], row
    listed = lw("fleet", "ls", "--db", pg_url)
    assert listed.returncode == 0 and CAUSE in listed.stdout, listed.stdout
    said = fleet_events(pg_url, "big")
    assert "{'" not in said and '{"' not in said, said
    lines = said.splitlines()
    assert all(line.split()[2] == "host-a" for line in lines), said  # every event names its host
    assert lines[0].split(None, 4)[4].startswith("claimed by host-a-")  # the worker's default name
    assert sum(f"client error (exit code 1): {CAUSE}" in line for line in lines) == 4, said
    assert (
        lines[-1]
        .split(None, 4)[4]
        .startswith(f"ended STOPPED:stall_limit: the client exited (code 1): {CAUSE}")
    )
    assert '"event":"client_error"' in log.replace(" ", "")  # and in the worker's own output


def test_a_clone_that_fails_is_in_the_loops_row_and_timeline(pg_url, tmp_path):
    remote = make_remote(tmp_path)
    # Allowed and a repository, but its objects are gone: the clone fails.
    missing = make_remote(tmp_path / "broken")
    for part in (missing / "objects").iterdir():
        if part.name not in ("info", "pack"):
            shutil.rmtree(part)
    queued = lw_here("submit", "--db", pg_url, "--repo", f"file://{missing}", "--name", "lost", "a goal")
    assert queued.returncode == 0, queued.stderr
    with fakeapi.ScriptedServer([]) as server:
        worker = start_worker(pg_url, remote, tmp_path / "w1", server, tmp_path / "home", "--host", "host-a",
                              "--allow-repo", f"file://{missing}")  # fmt: skip
        try:
            said = wait_for(lambda: "worker error" in (s := fleet_events(pg_url, "lost")) and s,
                            "the failure in the timeline", within=120, every=0.5, proc=worker)  # fmt: skip
        finally:
            stop_worker(worker)
    row = row_of(pg_url, "lost")
    assert "git clone failed" in row["last_error"], row
    # Not preparable here: queued again to be retried later (docs/fleet.md, rows that cannot run).
    assert row["status"] == "queued" and row["reason"].startswith("preparing the loop failed 1 of 3 times")
    failed = next(line for line in said.splitlines() if "worker error" in line)
    assert failed.split()[2] == "host-a" and "git clone failed" in failed
    assert "could not prepare it (try 1 of 3; tried again in " in said and server.conversation_requests == []


def test_a_runner_that_cannot_start_says_why_in_the_timeline_not_only_its_log(pg_url, tmp_path):
    # The worker's own --claude is fine; the one its runners end up with is not (the last wins).
    remote = make_remote(tmp_path)
    queued = lw_here("submit", "--db", pg_url, "--repo", f"file://{remote}", "--name", "nostart", "a goal")
    assert queued.returncode == 0, queued.stderr
    missing = "Claude Code's CLI (/nonexistent/claude) was not found"
    with fakeapi.ScriptedServer([]) as server:
        worker = start_worker(pg_url, remote, tmp_path / "w1", server, tmp_path / "home", "--host", "host-a",
                              "--runner-arg=--claude", "--runner-arg=/nonexistent/claude")  # fmt: skip
        try:
            said = wait_for(lambda: missing in (s := fleet_events(pg_url, "nostart")) and s,
                            "the runner's error", within=120, every=0.5, proc=worker)  # fmt: skip
        finally:
            stop_worker(worker)
    failed = next(line for line in said.splitlines() if missing in line)
    assert failed.split()[2] == "host-a" and "the runner exited (code 1)" in failed, said
    listed = lw("fleet", "ls", "--db", pg_url)
    assert missing in listed.stdout and server.conversation_requests == [], listed.stdout
