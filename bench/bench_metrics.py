"""What a Prometheus scrape of `loopwright serve`'s /metrics costs with a large fleet in the
registry, on the embedded SQLite file and on a throwaway PostgreSQL cluster (tests/pgcluster.py):

  - the first scrape, which reads every iteration event of the timeline once (a monitor that
    just started);
  - then ``--scrapes`` scrapes, each after ``--new`` more iteration events, as if ``--interval``
    seconds apart (events a minute old have settled): median and p95.

    python bench/bench_metrics.py [--loops 10000] [--events 10] [--scrapes 50] [--new 100]
                                  [--interval 15] [--check] [--json]

``--check`` exits 1 when a later scrape's p95 is over 100 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "lib"), str(REPO / "tests")]

import pgcluster  # noqa: E402
from loopwright.registry import open_registry  # noqa: E402
from loopwright.registry.fleetnumbers import SETTLE_SECONDS  # noqa: E402
from loopwright.serve.metrics import Numbers  # noqa: E402

TARGET_P95_MS = 100.0
STATUSES = ("ended",) * 8 + ("running",) * 8 + ("queued",) * 3 + ("waiting_gate",)
OUTCOMES = ("LOOP_DONE", "LOOP_DONE", "MAX_ITERATIONS", "STOPPED:stall_limit", "BUDGET_EXHAUSTED:dollars")
LOOP = (
    "INSERT INTO fleet_loops (id, name, kind, spec, repo, work_branch, account, status, outcome, "
    "generation, failovers, iteration, dollars, created_at, updated_at) VALUES "
    "(%s, %s, 'prompt', '{\"goal\": \"g\"}', 'https://example.com/a.git', %s, %s, %s, %s, %s, %s, %s, %s, "
    "{now}, {now})"
)
EVENT = (
    "INSERT INTO fleet_events (loop_id, at, generation, kind, data) "
    "VALUES (%s, {now} - %s, 1, 'iteration', %s)"
)


def line(n: int, seconds: int) -> str:
    """An iteration event's line as a worker records it, ``seconds`` long (under an hour)."""
    ended = f"2026-01-01T00:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"
    return json.dumps({"iteration": n, "outcome": "continued", "started_at": "2026-01-01T00:00:00Z",
                       "ended_at": ended, "tokens_in_this_iter": 1200, "dollars_this_iter": 0.05,
                       "commit": "0123456789ab"})  # fmt: skip


def fill(reg, loops: int, events: int) -> list[str]:
    """``loops`` loops in every status over 8 accounts, ``events`` iteration events for each one
    that ran (an hour old: settled), 100 workers, spend and caps; the running loops' ids."""
    running = []
    with reg.backend.tx() as tx:
        for i in range(loops):
            status, lid = STATUSES[i % len(STATUSES)], uuid.uuid4().hex
            ran = status != "queued"
            outcome = OUTCOMES[i % len(OUTCOMES)] if status == "ended" else None
            again = int(ran and i % 7 == 0)  # a loop in seven failed over once
            args = (lid, f"l{i}", f"loopwright/l{i}", f"team-{i % 8}", status, outcome, int(ran) + again,
                    again, events if ran else 0, 0.05 * events if ran else 0.0)  # fmt: skip
            tx.run(LOOP, args)
            for n in range(1, events + 1 if ran else 1):
                tx.run(EVENT, (lid, 3600.0, line(n, 20 + (i * 37 + n * 11) % 900)))
            if status == "running":
                running.append(lid)
    for w in range(100):
        reg.worker_beat(f"w{w}", f"host-{w}", 40, 40, None, [])
    reg.set_limits("fleet", max_dollars_per_day=5000)
    for a in range(8):
        reg.set_limits(f"account:team-{a}", max_dollars_per_day=700)
    return running


def measure(reg, running: list[str], scrapes: int, new: int, interval: float) -> dict:
    """The first scrape, then ``scrapes`` more, each after ``new`` events; time passes between
    them as if they were ``interval`` seconds apart (an event settles after SETTLE_SECONDS)."""
    numbers = Numbers(reg, [])
    started = time.perf_counter()
    size = len(numbers.render())
    first = time.perf_counter() - started
    times, batches = [], [numbers.fleet_tail.mark]  # the last event id of each batch
    young_scrapes = int(SETTLE_SECONDS // interval) + 1
    for s in range(scrapes):
        with reg.backend.tx() as tx:
            for k in range(new):
                tx.run(EVENT, (running[(s * new + k) % len(running)], 0.0, line(99, 60)))
            batches.append(tx.one("SELECT MAX(id) AS id FROM fleet_events")["id"])
            if len(batches) > young_scrapes + 1:  # the batch written a minute ago by now has settled
                lo, hi = batches[-young_scrapes - 2], batches[-young_scrapes - 1]
                tx.run(
                    "UPDATE fleet_events SET at = at - %s WHERE id > %s AND id <= %s",
                    (SETTLE_SECONDS * 2, lo, hi),
                )
        started = time.perf_counter()
        numbers.render()
        times.append(time.perf_counter() - started)
    times.sort()
    return {
        "first_ms": round(first * 1000, 1),
        "median_ms": round(statistics.median(times) * 1000, 1),
        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)] * 1000, 1),
        "bytes": size,
    }


def run(url: str, args) -> dict:
    reg = open_registry(url)
    try:
        t0 = time.perf_counter()
        running = fill(reg, args.loops, args.events)
        out = measure(reg, running, args.scrapes, args.new, args.interval)
        out["fill_s"] = round(time.perf_counter() - t0, 1)
        return out
    finally:
        reg.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loops", type=int, default=10_000)
    ap.add_argument("--events", type=int, default=10, help="iteration events per loop that ran")
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--new", type=int, default=100, help="new iteration events before each scrape")
    ap.add_argument("--interval", type=float, default=15.0, help="seconds between scrapes, as simulated")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = run(str(Path(tmp) / "registry.sqlite"), args)
    why = pgcluster.unavailable()
    if why is None:
        cluster = pgcluster.make_cluster()
        try:
            results["postgres"] = run(cluster.url(cluster.create_database()), args)
        finally:
            cluster.close()
    else:
        print(f"bench_metrics: no PostgreSQL ({why}): SQLite only", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for db, r in results.items():
            print(f"{db:<9} {args.loops} loops, {args.events} events each: first scrape {r['first_ms']} ms, "
                  f"then median {r['median_ms']} ms, p95 {r['p95_ms']} ms ({r['bytes']} bytes)")  # fmt: skip
    slow = [db for db, r in results.items() if r["p95_ms"] > TARGET_P95_MS]
    return 1 if args.check and slow else 0


if __name__ == "__main__":
    sys.exit(main())
