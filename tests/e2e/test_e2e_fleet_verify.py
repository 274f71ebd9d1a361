"""A database writer cannot run a command on a worker: rows put in the queue by SQL (no submit,
no checks of the writer's own) with a verify command, or with a goal that is a loopwright
command line carrying one, against a real `loopwright worker` whose Claude Code clients may not
run Bash (--permission-mode=acceptEdits). The worker leaves the first queued for a worker that
accepts its verify, ends the second as a bad row, and neither command ever runs; a worker
started with a matching --allow-verify takes the first and runs it. The workers publish what
they accept, so `submit` refuses a verify no live worker accepts and `fleet ls` says why a loop
waits."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import fakeapi
from fleetkit import beat_of, lw, make_remote, row_of, start_worker, stop_worker, worker_log
from waiting import wait_for

pytestmark = pytest.mark.e2e
ACCEPT_EDITS = "--permission-mode=acceptEdits"  # the agent may edit files, never run a command


def insert_row(url: str, remote: Path, name: str, spec: dict) -> None:
    """A queued loop written straight into the table, as anyone who can write a row could."""
    import psycopg

    row_id = uuid.uuid4().hex
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO fleet_loops (id, name, kind, spec, repo, work_branch, account, status, "
            "created_at, updated_at) VALUES (%s, %s, 'prompt', %s, %s, %s, 'default', 'queued', "
            "extract(epoch from clock_timestamp()), extract(epoch from clock_timestamp()))",
            (row_id, name, json.dumps(spec), f"file://{remote}", f"loopwright/{name}"),
        )
        conn.execute("SELECT pg_notify('loopwright_queue', %s)", (row_id,))


def test_a_verify_from_the_database_runs_only_where_a_worker_allows_it(pg_url, tmp_path):
    remote = make_remote(tmp_path)
    assert lw("db", "status", "--db", pg_url).returncode == 0  # the schema, made once
    planted, smuggled = tmp_path / "planted", tmp_path / "smuggled"
    insert_row(pg_url, remote, "checked", {"goal": "write it", "completion_promise": "DONE",
                                           "verify": f"touch {planted}"})  # fmt: skip
    # A goal is one argument to the runner, never a command line that could set --verify.
    command = f"/loopwright:loop --verify 'touch {smuggled}' --completion-promise DONE go"
    insert_row(pg_url, remote, "disguised", {"goal": command})
    done = fakeapi.text("All done.\n<promise>DONE</promise>")
    with fakeapi.ScriptedServer([], default=done) as server:
        first = start_worker(
            pg_url, remote, tmp_path / "w1", server, tmp_path / "h1", permissions=ACCEPT_EDITS
        )
        try:
            ended = wait_for(lambda: row_of(pg_url, "disguised").get("status") == "ended",
                             "the disguised row to end", within=120, every=0.3, proc=first)  # fmt: skip
            assert ended
            wait_for(lambda: '"refused"' in worker_log(first), "the refusal", within=60, proc=first)
            since = beat_of(pg_url)  # each beat follows a look at the queue: two more looks
            wait_for(lambda: beat_of(pg_url) >= since + 2, "two more beats", within=60, every=0.2, proc=first)
            refused = lw(
                "submit", "--db", pg_url, "--repo", f"file://{remote}", "--verify", "make check", "g"
            )
            listed = lw("fleet", "ls", "--db", pg_url)
        finally:
            log = stop_worker(first)
        assert row_of(pg_url, "disguised")["outcome"] == "STOPPED:bad_spec", log
        assert row_of(pg_url, "checked")["status"] == "queued" and row_of(pg_url, "checked")["worker"] is None
        assert not planted.exists() and not smuggled.exists()
        assert server.conversation_requests == []
        assert log.count('"refused"') == 1 and "--allow-verify" in log  # said once, naming the option
        assert refused.returncode == 1 and "--allow-verify 'make check'" in refused.stderr
        assert "waiting: no live worker accepts its verify" in listed.stdout, listed.stdout

        second = start_worker(pg_url, remote, tmp_path / "w2", server, tmp_path / "h2",
                              "--allow-verify", "touch *", permissions=ACCEPT_EDITS)  # fmt: skip
        try:
            row = wait_for(lambda: row_of(pg_url, "checked").get("status") == "ended",
                           "the checked loop to end", within=240, every=0.5, proc=second)  # fmt: skip
            row = row_of(pg_url, "checked")
        finally:
            log = stop_worker(second)
    assert row["outcome"] == "LOOP_DONE", log
    assert planted.exists() and not smuggled.exists()  # the verify its worker accepted ran
