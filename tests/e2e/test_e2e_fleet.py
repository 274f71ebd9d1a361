"""The fleet end to end: `loopwright submit` queues a loop, `loopwright worker` claims it, drives
it with the real Claude Code CLI against the scripted Messages API in a clone of a local bare
repository, pushes its branch after every iteration and records the loop in the database
(SQLite for one machine, PostgreSQL for many; the same assertions on both)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fakeapi
from fleetkit import beat_of, git, lw, make_remote, row_of, start_worker, stop_worker, worker_log
from waiting import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def remote(tmp_path) -> Path:
    return make_remote(tmp_path)


def test_a_submitted_loop_runs_on_a_worker_and_its_work_is_pushed(registry_url, remote, tmp_path):
    url = str(registry_url)
    queued = lw("submit", "--db", url, "--repo", f"file://{remote}", "--name", "notes",
                "--completion-promise", "DONE", "--max-iterations", "5", "write the notes")  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    replies = [
        fakeapi.bash("echo one > notes.txt", text="Starting the notes."),
        fakeapi.text("Iteration one written."),
        fakeapi.bash("echo two >> notes.txt"),
        fakeapi.text("All done.\n<promise>DONE</promise>"),
    ]
    with fakeapi.ScriptedServer(replies) as server:
        worker = start_worker(url, remote, tmp_path / "w1", server, tmp_path / "home")
        try:
            row = wait_for(lambda: row_of(url, "notes").get("status") == "ended" and row_of(url, "notes"),
                           "the loop to end", within=240, every=0.5, proc=worker)  # fmt: skip
        finally:
            log = stop_worker(worker)
    assert row["outcome"] == "LOOP_DONE", log
    assert row["iteration"] == 2 and row["worker"] is None and row["generation"] == 1
    assert row["dollars"] > 0 and row["tokens"] > 0
    notes = git("--git-dir", str(remote), "show", "loopwright/notes:notes.txt")
    assert notes.splitlines() == ["one", "two"]  # every iteration's work is on the pushed branch
    assert ".loopwright" not in git(
        "--git-dir", str(remote), "ls-tree", "-r", "--name-only", "loopwright/notes"
    )
    events = json.loads(lw("fleet", "events", "notes", "--db", url, "--json").stdout)
    assert [e["data"]["iteration"] for e in events if e["kind"] == "iteration"] == [1, 2]
    assert '"event":"stopped"' in log.replace(" ", "")  # the worker drained and left cleanly


def test_a_worker_refuses_a_repository_outside_its_allow_list(registry_url, remote, tmp_path):
    url = str(registry_url)
    other = tmp_path / "elsewhere" / "x.git"
    other.parent.mkdir()
    git("clone", "-q", "--bare", str(remote), str(other))
    assert lw("submit", "--db", url, "--repo", f"file://{other}", "--name", "far", "goal").returncode == 0
    with fakeapi.ScriptedServer([]) as server:
        worker = start_worker(url, remote, tmp_path / "w1", server, tmp_path / "home")
        try:
            wait_for(lambda: '"refused"' in worker_log(worker), "the refusal", within=60, proc=worker)
            # Each beat follows a look at the queue: two more beats, two more looks at the row.
            first = beat_of(url)
            wait_for(lambda: beat_of(url) >= first + 2, "two more beats", within=60, every=0.2, proc=worker)
        finally:
            log = stop_worker(worker)
    assert row_of(url, "far")["status"] == "queued" and server.conversation_requests == []
    assert log.count('"refused"') == 1  # said once, not at every poll
