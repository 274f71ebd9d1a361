"""A row never stops or jams the fleet (issue 26 items 3, 4 and 10), through the real `loopwright
worker` against a throwaway PostgreSQL, the real Claude Code CLI and the scripted model: a row
that poisons the claim is set aside while the worker stays up; loops that cannot be prepared
wait, then end STOPPED:prepare_failed, while the loop queued behind them runs on a 1-slot
worker; a second worker given a live worker's name is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

import fakeapi
from fleetkit import git, lw, lw_here, make_remote, row_of, start_worker, stop_worker, worker_log
from waiting import wait_for

pytestmark = pytest.mark.e2e
DONE = fakeapi.text("All done.\n<promise>DONE</promise>")


@pytest.fixture
def remote(tmp_path) -> Path:
    return make_remote(tmp_path)


def submit(url: str, remote: Path, name: str, *words: str) -> None:
    # A mode's loop takes only its own command line's options (a task loop has no promise).
    promise = [] if words[:1] in (("task",), ("work",), ("review",)) else ["--completion-promise", "DONE"]
    out = lw_here("submit", "--db", url, "--repo", f"file://{remote}", "--name", name,
             *promise, "--max-iterations", "3", *words)  # fmt: skip
    assert out.returncode == 0, out.stderr


def sql(url: str, statement: str, args: tuple = ()) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement, args)


def ended(url: str, name: str, worker) -> dict:
    done = lambda: row_of(url, name).get("status") == "ended" and row_of(url, name)  # noqa: E731
    return wait_for(done, f"loop {name} to end", within=240, every=0.5, proc=worker)


def events(url: str, name: str) -> list[dict]:
    out = lw("fleet", "events", name, "--db", url, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_poisoned_row_ahead_of_a_good_one_is_set_aside_and_the_worker_stays_up(pg_url, remote, tmp_path):
    submit(pg_url, remote, "poison", "never runs")
    submit(pg_url, remote, "good", "write the notes")
    # generation + 1 overflowed a 32-bit counter, and the psycopg error stopped every worker.
    sql(pg_url, "UPDATE fleet_loops SET generation = 2147483647 WHERE name = 'poison'")
    with fakeapi.ScriptedServer(default=DONE) as server:
        worker = start_worker(pg_url, remote, tmp_path / "w1", server, tmp_path / "home")
        try:
            good = ended(pg_url, "good", worker)
            assert worker.poll() is None  # up, and looking for more
        finally:
            log = stop_worker(worker)
    assert good["outcome"] == "LOOP_DONE", log
    poison = row_of(pg_url, "poison")
    assert (poison["outcome"], poison["generation"]) == ("STOPPED:bad_row", 2147483647)
    assert "its generation is '2147483647'" in poison["reason"]
    assert [e["kind"] for e in events(pg_url, "poison")] == ["set_aside"]
    shown = lw("fleet", "ls", "--db", pg_url).stdout
    assert any(line.startswith("poison") and "its generation is" in line for line in shown.splitlines())
    assert "Traceback" not in log and '"event":"stopped"' in log.replace(" ", "")


def branch_with_a_state_link(remote: Path, tmp_path: Path) -> None:
    """The branch ``linky`` of ``remote`` commits .loopwright as a symbolic link out of the clone."""
    work = tmp_path / "linky"
    git("clone", "-q", str(remote), str(work))
    os.symlink(str(tmp_path / "elsewhere"), work / ".loopwright")
    git("-C", str(work), "checkout", "-q", "-b", "linky")
    git("-C", str(work), "add", ".loopwright")
    git("-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "link")
    git("-C", str(work), "push", "-q", "origin", "linky")


def test_loops_that_cannot_be_prepared_wait_then_end_and_the_loop_behind_them_runs(pg_url, remote, tmp_path):
    branch_with_a_state_link(remote, tmp_path)
    submit(pg_url, remote, "typo", "--branch", "mian", "on a branch that is not there")
    submit(pg_url, remote, "linked", "--branch", "linky", "on a branch that links .loopwright")
    submit(pg_url, remote, "nomodule", "task", "auto", "nosuch")  # the runner exits at once
    submit(pg_url, remote, "escape", "out of --data")
    sql(pg_url, "UPDATE fleet_loops SET name = '../../escape' WHERE name = 'escape'")  # by SQL
    submit(pg_url, remote, "helpme", "work", "--source", "tasks")
    sql(pg_url, """UPDATE fleet_loops SET spec = '{"args": ["-h"]}' WHERE name = 'helpme'""")  # by SQL
    submit(pg_url, remote, "good", "write the notes")
    bad = ("typo", "linked", "nomodule", "../../escape")
    with fakeapi.ScriptedServer(default=DONE) as server:
        worker = start_worker(
            pg_url, remote, tmp_path / "w1", server, tmp_path / "home", "--prepare-backoff", "0.5"
        )
        try:
            good = ended(pg_url, "good", worker)
            rows = {name: ended(pg_url, name, worker) for name in (*bad, "helpme")}
            assert worker.poll() is None
        finally:
            log = stop_worker(worker)
    assert good["outcome"] == "LOOP_DONE", log
    for name in bad:
        assert rows[name]["outcome"] == "STOPPED:prepare_failed", (name, rows[name])
        assert rows[name]["reason"].startswith("preparing the loop failed 3 of 3 times: ")
        tries = [e["data"]["tries"] for e in events(pg_url, name) if e["kind"] == "prepare_failed"]
        assert tries == [1, 2, 3], name
    assert "the remote has no branch 'mian'" in rows["typo"]["reason"]
    assert "the branch commits .loopwright as a symbolic link" in rows["linked"]["reason"]
    assert "the runner exited (code 1) without running an iteration: " in rows["nomodule"]["reason"]
    assert "loop name '../../escape' is not usable as a directory" in rows["../../escape"]["reason"]
    assert not (tmp_path / "escape").exists() and not (tmp_path / "w1" / "escape").exists()
    assert (
        rows["helpme"]["outcome"] == "STOPPED:bad_spec"
        and "'-h' is not an option" in rows["helpme"]["reason"]
    )
    shown = {line.split()[0]: line for line in lw("fleet", "ls", "--db", pg_url).stdout.splitlines()}
    assert "STOPPED:prepare_failed" in shown["typo"] and "no branch 'mian'" in shown["typo"]
    # Three tries each, not hundreds: a bounded log, and no pile of empty runner logs.
    assert len(log.splitlines()) < 80, log
    assert log.count('"event":"prepare_failed"') == 3 * len(bad)
    logs = list((tmp_path / "w1" / "logs").iterdir())
    assert len(logs) <= 4 and all(p.stat().st_size > 0 for p in logs), logs


def test_a_second_worker_with_a_live_workers_name_is_refused(pg_url, remote, tmp_path):
    from loopwright.registry.workers import MIN_LIVE_FOR

    procs: list[subprocess.Popen] = []

    def worker(tag: str) -> subprocess.Popen:
        procs.append(
            start_worker(pg_url, remote, tmp_path / tag, server, tmp_path / "home", "--name", "night")
        )
        return procs[-1]

    def started(proc) -> None:
        wait_for(lambda: '"started"' in worker_log(proc), "the worker to start", within=60, proc=proc)

    def workers() -> list[dict]:
        return json.loads(lw_here("fleet", "workers", "--db", pg_url, "--json").stdout)

    with fakeapi.ScriptedServer(default=DONE) as server:
        try:
            first = worker("a")
            started(first)
            second = worker("b")
            assert second.wait(timeout=60) == 1
            lines = worker_log(second).splitlines()
            assert len(lines) == 1 and lines[0].startswith(
                "loopwright: error: a worker named night is running on "
            )
            assert lines[0].endswith("s ago): give this one another --name, or stop that one first"), lines
            first.send_signal(signal.SIGKILL)  # it died: its name is free once its last beat is old
            first.wait(timeout=60)
            wait_for(lambda: workers()[0]["age"] > MIN_LIVE_FOR, "the dead worker's beat to age", every=0.5)
            third = worker("c")
            started(third)
            assert [w["worker"] for w in workers()] == ["night"]
            stop_worker(third)
            started(worker("d"))  # a worker that stopped let go of its name at once
        finally:
            for proc in procs:
                stop_worker(proc)
