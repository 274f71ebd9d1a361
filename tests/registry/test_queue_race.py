"""The claim race (issue 20): 64 processes claim from 10,000 queued loops on one PostgreSQL
until none is left, and every loop is claimed exactly once: by the database (generation 1
for each) and by what the processes got (all ids, none twice)."""

from __future__ import annotations

import multiprocessing
import uuid

import pytest

import racers
from loopwright.registry import open_registry

pytestmark = pytest.mark.slow

PROCESSES = 64
LOOPS = 10_000


def _claim_all(url: str, start, out) -> None:
    """One worker process: a registry of one connection, claiming until nothing is left."""
    from loopwright.registry import Registry
    from loopwright.registry.postgres import PostgresBackend

    try:
        reg = Registry(PostgresBackend(url, max_size=1))
        start.wait(timeout=300)  # all connected: the claims start together
        got = []
        while True:
            row = reg.claim(f"w{multiprocessing.current_process().pid}", "race", lease=600)
            if row is None:
                break
            got.append((row["id"], row["generation"]))
        reg.close()
        out.put(got)
    except Exception as exc:  # the test shows what went wrong
        out.put(repr(exc))


def _queue(url: str) -> set[str]:
    import psycopg

    ids = [uuid.uuid4().hex for _ in range(LOOPS)]
    sql = (
        "INSERT INTO fleet_loops (id, name, kind, spec, repo, work_branch, account, status, "
        "created_at, updated_at) VALUES (%s, %s, 'prompt', '{}', 'r', %s, 'default', 'queued', "
        "extract(epoch from clock_timestamp()), extract(epoch from clock_timestamp()))"
    )
    with psycopg.connect(url) as conn, conn.cursor() as cur:  # one transaction
        cur.executemany(sql, [(i, f"r{n}", f"loopwright/r{n}") for n, i in enumerate(ids)])
    return set(ids)


def test_64_processes_claim_10000_loops_each_exactly_once(pg_url):
    open_registry(pg_url).close()  # the schema, before the rows
    ids = _queue(pg_url)
    racing = racers.context(__name__)
    start, out = racing.Barrier(PROCESSES), racing.Queue()
    procs = [racing.Process(target=_claim_all, args=(pg_url, start, out)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=120)
    errors = [r for r in results if isinstance(r, str)]
    assert not errors, errors[:3]
    claimed = [i for got in results for i, _ in got]
    twice = len(claimed) - len(set(claimed))
    assert twice == 0, f"{twice} claims of loops claimed already"
    assert len(ids - set(claimed)) == 0 and len(set(claimed)) == LOOPS, "loops left unclaimed or unknown"
    assert {g for got in results for _, g in got} == {1}
    reg = open_registry(pg_url)
    try:
        with reg.backend.tx() as tx:
            rows = tx.rows(
                "SELECT status, generation, count(*) AS n FROM fleet_loops GROUP BY status, generation"
            )
    finally:
        reg.close()
    assert rows == [{"status": "running", "generation": 1, "n": LOOPS}]
    assert sum(1 for got in results if got) > 1  # the processes did race
