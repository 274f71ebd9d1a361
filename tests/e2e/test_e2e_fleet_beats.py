"""A worker's heartbeat costs the database one renewal of its leases however many loops it drives
(registry/leases.py, Worker._renew): a real worker drives three loops whose model replies are
held (each loop mid-iteration, so nothing but beats is written), on a PostgreSQL that logs every
statement of the test's database. Between two of the worker's beats the database sees one
renewal for all three loops, and no loop renews its own lease."""

from __future__ import annotations

import threading

import pytest

import fakeapi
from fleetkit import lw_here, make_remote, start_worker, stop_worker
from waiting import wait_for

pytestmark = pytest.mark.e2e

WITHIN = 240  # bound on any one wait: generous, the machine may be busy
LOOPS = ("ant", "bee", "cod")
WORKER_ROW = "INSERT INTO fleet_workers"  # each beat of the worker writes its row once
RENEWAL = "unnest("  # the one statement that renews every lease of the worker
PER_LOOP = "RETURNING control, lease_expires"  # a loop renewing its own lease (Queue.heartbeat)


def test_one_statement_per_worker_beat_renews_the_leases_of_all_its_loops(pg_cluster, pg_url, tmp_path):
    pg_cluster.admin(f"ALTER DATABASE {pg_url.rsplit('/', 1)[1]} SET log_statement = 'all'")
    remote = make_remote(tmp_path)
    for name in LOOPS:
        out = lw_here("submit", "--db", pg_url, "--repo", f"file://{remote}", "--name", name,
                 "--completion-promise", "DONE", "--max-iterations", "3", f"grow the {name}")  # fmt: skip
        assert out.returncode == 0, out.stderr
    release = threading.Event()

    def held(request):  # each loop's first turn waits until the test ends
        return fakeapi.hang(WITHIN * 2, release=release)

    with fakeapi.ScriptedServer(default=held) as server:
        proc = start_worker(pg_url, remote, tmp_path / "data", server, tmp_path / "home", "--slots", "3")
        try:
            wait_for(lambda: len(server.conversation_requests) >= len(LOOPS), "every loop mid-iteration",
                     within=WITHIN, every=0.5, proc=proc)  # fmt: skip
            start = len(pg_cluster.log())
            wait_for(lambda: pg_cluster.log()[start:].count(WORKER_ROW) >= 5, "five beats of the worker",
                     within=WITHIN, every=0.5, proc=proc)  # fmt: skip
            logged = pg_cluster.log()[start:]
        finally:
            release.set()
            stop_worker(proc)
    # Four beat intervals: from the first of the five beats to the fifth (each beat renews, then
    # writes the worker's row).
    window = logged[logged.index(WORKER_ROW) : _nth(logged, WORKER_ROW, 5) + 1]
    assert window.count(PER_LOOP) == 0, window[-3000:]
    assert window.count(RENEWAL) == 4, window[-3000:]


def _nth(text: str, part: str, n: int) -> int:
    at = -1
    for _ in range(n):
        at = text.index(part, at + 1)
    return at
