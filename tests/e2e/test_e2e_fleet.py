"""The fleet end to end: `loopwright submit` queues a loop, `loopwright worker` claims it, drives
it with the real Claude Code CLI against the scripted Messages API in a clone of a local bare
repository, pushes its branch after every iteration and records the loop in the database
(SQLite for one machine, PostgreSQL for many; the same assertions on both)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import claude_cli
import fakeapi
from conftest import KEY_HOME, REPO
from waiting import wait_for

pytestmark = pytest.mark.e2e

LW = str(REPO / "bin" / "loopwright")


def git(*args, cwd=None) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


@pytest.fixture
def remote(tmp_path) -> Path:
    """A bare repository with one commit on main."""
    bare, seed = tmp_path / "remote.git", tmp_path / "seed"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    git("init", "-q", "-b", "main", str(seed))
    (seed / "README.md").write_text("# demo\n")
    git("-C", str(seed), "add", "README.md")
    git("-C", str(seed), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    git("-C", str(seed), "push", "-q", str(bare), "main")
    return bare


def lw(*args, env=None) -> subprocess.CompletedProcess:
    base = dict(os.environ, LOOPWRIGHT_PYTHON=sys.executable, XDG_CONFIG_HOME=KEY_HOME)
    return subprocess.run(
        [LW, *args], capture_output=True, text=True, timeout=60, env={**base, **(env or {})}
    )


def start_worker(url: str, remote: Path, data: Path, server, home: Path, *extra: str) -> subprocess.Popen:
    """A worker whose output goes to ``data``.log (read with worker_log)."""
    home.mkdir(exist_ok=True)
    argv = [
        LW, "worker", "--db", url, "--slots", "1", "--allow-repo", f"file://{remote}",
        "--data", str(data), "--lease", "6", "--heartbeat", "1", "--poll", "0.5",
        "--claude", claude_cli.claude_binary(), "--claude-arg=--dangerously-skip-permissions",
        "--runner-arg=--poll-seconds", "--runner-arg=0.5", "--runner-arg=--stall-polls", "--runner-arg=1000",
        *extra,
    ]  # fmt: skip
    env = claude_cli.offline_env(
        server.url, home, {"LOOPWRIGHT_PYTHON": sys.executable, "XDG_CONFIG_HOME": KEY_HOME}
    )
    with open(f"{data}.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    proc.log = Path(f"{data}.log")
    return proc


def worker_log(proc: subprocess.Popen) -> str:
    return proc.log.read_text(errors="replace")


def row_of(url: str, name: str) -> dict:
    out = lw("fleet", "ls", "--db", url, "--json")
    assert out.returncode == 0, out.stderr
    return next((r for r in json.loads(out.stdout) if r["name"] == name), {})


def beat_of(url: str) -> float:
    """When the (one) worker last beat, by the database's clock."""
    out = lw("fleet", "workers", "--db", url, "--json")
    assert out.returncode == 0, out.stderr
    return max((w["beat_at"] for w in json.loads(out.stdout)), default=0.0)


def stop_worker(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return worker_log(proc)


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
