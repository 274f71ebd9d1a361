"""The fleet end to end: `loopwright submit` queues a loop, `loopwright worker` claims it, drives
it with the real Claude Code CLI against the scripted Messages API in a clone of a local bare
repository, pushes its branch after every iteration and records the loop in the database
(SQLite for one machine, PostgreSQL for many; the same assertions on both)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psutil
import pytest

import fakeapi
import hostileurls
from fleetkit import (
    beat_of,
    git,
    lw,
    lw_here,
    make_remote,
    row_of,
    start_worker,
    stop_worker,
    worker_log,
    working_in,
)
from waiting import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def remote(tmp_path) -> Path:
    return make_remote(tmp_path)


def test_a_submitted_loop_runs_on_a_worker_and_its_work_is_pushed(registry_url, remote, tmp_path):
    url = str(registry_url)
    queued = lw_here("submit", "--db", url, "--repo", f"file://{remote}", "--name", "notes",
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


def test_submit_wait_follows_a_real_worker_whose_log_a_person_reads(registry_url, remote, tmp_path):
    """Issue 27 part 4 through the real worker: `submit --wait` prints the loop's timeline and
    exits 0 for LOOP_DONE, as `run` does; the worker's log is readable lines by default; `fleet
    workers` shows it alive, then stopped once it left."""
    import re

    url = str(registry_url)
    replies = [fakeapi.bash("echo one > notes.txt"), fakeapi.text("Done.\n<promise>DONE</promise>")]
    with fakeapi.ScriptedServer(replies) as server:
        worker = start_worker(url, remote, tmp_path / "w1", server, tmp_path / "home", "--log-format", "text")
        try:
            wait_for(lambda: beat_of(url) > 0, "the worker's first beat", within=60, proc=worker)
            states = lw("fleet", "workers", "--db", url).stdout.splitlines()
            waited = lw_here("submit", "--db", url, "--repo", f"file://{remote}", "--name", "waited",
                        "--completion-promise", "DONE", "--wait", "write the notes")  # fmt: skip
        finally:
            log = stop_worker(worker)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    out = waited.stdout.splitlines()
    assert out[0].startswith("queued fleet loop waited (prompt) into ")
    assert any(" iteration 1: " in line for line in out), out
    assert out[-1].startswith("waited: ended LOOP_DONE after 1 iteration"), out
    assert [line.split()[1] for line in states[1:]] == ["alive"], states
    after = lw("fleet", "workers", "--db", url).stdout.splitlines()
    assert [line.split()[1] for line in after[1:]] == ["stopped"], after
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
    assert re.search(stamp + r"started worker \S+ on \S+: 1 slot, repositories file://", log), log
    canonical = str(remote).removesuffix(".git")  # as the allow-list reads it
    assert re.search(stamp + rf"claimed waited \(repo file://{canonical}\) gen 1\n", log), log
    assert re.search(stamp + r"ended waited: LOOP_DONE", log) and re.search(
        stamp + r"stopped worker ", log
    ), log
    assert "{" not in log, log  # no JSON line


def test_a_worker_refuses_a_repository_outside_its_allow_list(registry_url, remote, tmp_path):
    url = str(registry_url)
    other = tmp_path / "elsewhere" / "x.git"
    other.parent.mkdir()
    git("clone", "-q", "--bare", str(remote), str(other))
    assert (
        lw_here("submit", "--db", url, "--repo", f"file://{other}", "--name", "far", "goal").returncode == 0
    )
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


def _queue_by_sql(url: str, repos: list[str]) -> dict[str, str]:
    """Rows written straight into the database, as anyone who can write to it could (no
    submit to refuse them): name → repository."""
    import psycopg

    from loopwright.registry import open_registry

    open_registry(url).close()  # the schema
    rows = {f"h-{n:02d}": repo for n, repo in enumerate(repos)}
    sql = (
        "INSERT INTO fleet_loops (id, name, kind, spec, repo, work_branch, account, status, created_at, "
        "updated_at) VALUES (%s, %s, 'prompt', %s, %s, %s, 'default', 'queued', "
        "extract(epoch from clock_timestamp()), extract(epoch from clock_timestamp()))"
    )
    spec = json.dumps({"goal": "hostile", "limits": {}})
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.executemany(sql, [(uuid.uuid4().hex, n, spec, r, f"loopwright/{n}") for n, r in rows.items()])
    return rows


def test_a_worker_given_hostile_urls_by_sql_connects_to_no_disguised_host(pg_url, tmp_path):
    """Issue 26: every URL of the hostile table, written into the database directly. The worker
    refuses each (once) but the redirect, whose 302 git does not follow; no listener on a
    disguised host, nor the redirect's target, ever sees a connection; nothing is cloned."""
    scene = hostileurls.Scene(tmp_path)
    rows = _queue_by_sql(pg_url, list(scene.urls.values()))
    redirect = scene.render("http://127.0.0.1:{redirect}/acme/x")
    refused = {r for r in rows.values() if r != redirect}
    data = tmp_path / "w1"
    allow = [f"--allow-repo={p}" for p in scene.allow]
    try:
        with fakeapi.ScriptedServer([]) as server:
            worker = start_worker(pg_url, scene.allowed / "repo.git", data, server, tmp_path / "home", *allow)
            try:

                def said() -> set[str]:
                    lines = [json.loads(x) for x in worker_log(worker).splitlines() if x.startswith("{")]
                    return {e["repo"] for e in lines if e["event"] == "refused"}

                def settled() -> bool:  # or a disguised host was reached: the test fails below
                    return bool(said() >= refused and scene.redirector.requests or scene.connected())

                wait_for(settled, "the refusals and the 302", within=120, every=0.2, proc=worker)
                first = beat_of(pg_url)  # each beat follows a look at the queue: two more looks
                wait_for(
                    lambda: beat_of(pg_url) >= first + 2, "two more beats", within=60, every=0.2, proc=worker
                )
            finally:
                log = stop_worker(worker)
        assert scene.connected() == {}, log[-2000:]
    finally:
        scene.close()
    events = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
    refusals = [e["repo"] for e in events if e["event"] == "refused"]
    assert sorted(refusals) == sorted(refused), "each refused URL is logged exactly once"
    assert not [e for e in events if e["event"] == "claimed"], log
    import psycopg

    with psycopg.connect(pg_url) as conn:
        status = dict(conn.execute("SELECT repo, status FROM fleet_loops").fetchall())
    assert {status[r] for r in refused} == {"queued"}
    assert server.conversation_requests == []
    assert [p.name for p in (data / "work").iterdir()] == [], "nothing was cloned"


def _running(command: str) -> list:
    return [
        p for p in psutil.process_iter(["cmdline", "status"])
        if command in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]  # fmt: skip


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _subjects(remote: Path, branch: str) -> list[str]:
    return git("--git-dir", str(remote), "log", "--format=%s", "--reverse", f"main..{branch}").splitlines()


def test_a_cancel_ends_a_running_loop_at_once_without_finishing_its_turn(registry_url, remote, tmp_path):
    """`fleet cancel` while the agent's tool call runs: the worker ends the loop CANCELLED at
    once (not when the turn would have ended), its client and the tool it ran are stopped, what
    the turn left is on the loop's branch, and the worker says "ended" once, with the reason.
    The loop that ran before it ends with one commit per iteration, no empty one after them."""
    url = str(registry_url)
    began = tmp_path / "the-slow-call-began"
    for name, goal in (("quick", "write the notes"), ("slow", "take your time")):
        queued = lw_here("submit", "--db", url, "--repo", f"file://{remote}", "--name", name,
                         "--completion-promise", "DONE", "--max-iterations", "5", goal)  # fmt: skip
        assert queued.returncode == 0, queued.stderr
    replies = [
        fakeapi.bash("echo one > notes.txt"),
        fakeapi.text("One written."),
        fakeapi.bash("echo two >> notes.txt"),
        fakeapi.text("Done.\n<promise>DONE</promise>"),
        fakeapi.bash(f"echo started > slow.txt; touch {began}; sleep 97; echo late >> slow.txt"),
        fakeapi.text("Finished, slowly."),
    ]
    with fakeapi.ScriptedServer(replies) as server:
        notified = tmp_path / "notified.jsonl"  # the worker's --notify reaches each loop's runner
        hook = f"command:(cat; echo) >> {notified}"
        worker = start_worker(url, remote, tmp_path / "w1", server, tmp_path / "home", f"--notify={hook}")
        try:
            wait_for(began.exists, "the slow tool call to begin", within=240, every=0.2, proc=worker)

            def done_told():
                text = notified.read_text() if notified.exists() else ""
                return "LOOP_DONE" in text and text

            told = wait_for(done_told, "the quick loop's end to be told", within=60, every=0.2, proc=worker)
            asked = lw("fleet", "cancel", "slow", "--db", url)
            row = wait_for(lambda: row_of(url, "slow").get("status") == "ended" and row_of(url, "slow"),
                           "the cancelled loop to end", within=45, every=0.2, proc=worker)  # fmt: skip
            # The tool call is gone with its client (a killed process its new parent has not
            # reaped yet is a zombie: it runs no more).
            wait_for(
                lambda: not _running("sleep 97"), "the cut-short tool call to end", within=20, proc=worker
            )
        finally:
            log = stop_worker(worker)
    assert asked.returncode == 0, asked.stderr
    assert any(json.loads(line).get("outcome") == "LOOP_DONE" for line in told.splitlines() if line.strip())
    assert (row["outcome"], row["iteration"]) == ("CANCELLED", 0), log
    ended = [json.loads(line) for line in log.splitlines() if '"event":"ended"' in line.replace(" ", "")]
    assert [(e["loop"], e["outcome"]) for e in ended] == [("quick", "LOOP_DONE"), ("slow", "CANCELLED")], log
    assert ended[1]["reason"] == "cancelled from the fleet"
    assert git("--git-dir", str(remote), "show", "loopwright/slow:slow.txt") == "started"  # never "late"
    # One commit per iteration pushed (a fast one may share its push with the next), none after
    quick = [
        int(s.rsplit("iteration ", 1)[1].removesuffix(" (last)"))
        for s in _subjects(remote, "loopwright/quick")
    ]
    assert quick == sorted(set(quick)) and quick[-1] == 2, quick


def test_a_filter_the_agent_writes_into_git_config_never_runs_in_the_workers_git(
    registry_url, remote, tmp_path
):
    """The agent adds a clean filter to the clone's .git/config and names it in .gitattributes:
    the worker's own `git add` (at the iteration's commit) would run it, as the worker's user,
    whatever permission mode the agent had. The worker puts the config back first and says so."""
    url = str(registry_url)
    marker, evil = tmp_path / "ran", tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho ran >> "{marker}"\ncat\n')
    evil.chmod(0o755)
    plant = f"git config filter.evil.clean {evil} && echo '* filter=evil' > .gitattributes && echo x > x.txt"
    queued = lw_here("submit", "--db", url, "--repo", f"file://{remote}", "--name", "planted",
                     "--completion-promise", "DONE", "--max-iterations", "3", "tidy up")  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    replies = [fakeapi.bash(plant), fakeapi.text("Done.\n<promise>DONE</promise>")]
    with fakeapi.ScriptedServer(replies) as server:
        worker = start_worker(url, remote, tmp_path / "w1", server, tmp_path / "home")
        try:
            row = wait_for(lambda: row_of(url, "planted").get("status") == "ended" and row_of(url, "planted"),
                           "the loop to end", within=240, every=0.5, proc=worker)  # fmt: skip
        finally:
            log = stop_worker(worker)
    assert row["outcome"] == "LOOP_DONE", log
    assert not marker.exists(), "the agent's filter ran in the worker's git"
    assert "put back .git/config as the worker cloned it" in log, log
    assert git("--git-dir", str(remote), "show", "loopwright/planted:x.txt") == "x"  # the work is pushed


def test_a_worker_killed_outright_takes_its_runners_and_their_clients_along(registry_url, remote, tmp_path):
    """SIGKILL to the worker only (the OOM killer's way): its runner is told by the kernel and
    stops its Claude Code client and the tool it runs; nothing goes on in the clone unwatched
    while the loop fails over elsewhere."""
    url = str(registry_url)
    began = tmp_path / "the-slow-call-began"
    queued = lw_here("submit", "--db", url, "--repo", f"file://{remote}", "--name", "orphan",
                     "--completion-promise", "DONE", "--max-iterations", "3", "take your time")  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    replies = [fakeapi.bash(f"touch {began}; sleep 98"), fakeapi.text("Done.\n<promise>DONE</promise>")]
    with fakeapi.ScriptedServer(replies) as server:
        worker = start_worker(url, remote, tmp_path / "w1", server, tmp_path / "home")
        try:
            wait_for(began.exists, "the slow tool call to begin", within=240, every=0.2, proc=worker)
            clone = tmp_path / "w1" / "work" / "orphan"
            assert working_in(clone), "the runner and its client work in the clone"
            worker.kill()
            worker.wait()

            def left():  # a resident Stop server may stay: it answers Stops, and none come
                return [p for p in working_in(clone) if "stop_local.py" not in _cmdline(p)] + _running(
                    "sleep 98"
                )

            wait_for(lambda: not left(), "the orphaned runner, client and tool call to end", within=30)
        finally:
            stop_worker(worker)
