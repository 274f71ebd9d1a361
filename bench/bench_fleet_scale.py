"""The fleet at scale (issue 27 part 6): thousands of running loops on a hundred workers, with a
queue behind them, on a throwaway PostgreSQL cluster of its own (tests/pgcluster.py, default
durability: fsync and synchronous_commit on).

For each size in ``--sizes`` (running loops), with ``--queued`` more loops waiting and
``--workers`` simulated workers holding the running ones (spread over ``--procs`` processes, each
worker with its own connection as a real worker's pool):
  - every worker beats every 10 s as Worker._beat does: one renewal of every lease it holds
    (registry/leases.py), its row, its account's pause read;
  - every running loop reaches an iteration boundary every ``--iteration`` seconds (heartbeat,
    progress with the day's spend, one timeline event: fleet/slot.py's _sync);
  - one more worker claims from the queue meanwhile, ``--claim-rate`` claims per second of the
    fleet's time, through Registry.claim as a worker calls it (its latency, p50 and p95);
  - a real `loopwright serve --db` answers ``GET /api/fleet`` every ``--api-every`` seconds of
    real time (its p50 and p95; 0: no calls, the fleet's own load alone);
all played ``--speedup`` times faster than real time. The figures: the database server's CPU
(the postmaster and its children, from /proc) per second of the fleet's time as a share of one
core, the writes per second asked for, and the load average of the machine at the time.

    python bench/bench_fleet_scale.py [--sizes 1000,5000,10000,20000] [--queued 10000]
        [--workers 100] [--procs 10] [--iteration 300] [--api-every 1] [--simulate 60] [--speedup 2]
        [--per-loop-beats]
        [--check] [--json]

``--check`` exits 1 when the server uses 25% of one core or more at 10,000 running loops.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_fleet as bf  # noqa: E402  (puts lib/ and tests/ on the path)
from bench_fleet_page import Monitor, quantiles  # noqa: E402

BEAT = bf.BEAT_EVERY
TARGET_SHARE, TARGET_LOOPS = 0.25, 10_000
LEASE = 3600.0  # long: a simulation that falls behind must not let a lease run out


def fleet_db(cluster, running: int, queued: int, workers: int) -> tuple[str, list]:
    """A database with ``running`` loops held by ``workers`` workers (round robin) and
    ``queued`` more queued; its URL and each worker's [(loop id, generation)]."""
    import psycopg

    url = bf.fresh_queue(cluster, running + queued)
    hold = (
        "UPDATE fleet_loops f SET status = 'running', generation = 1, worker = 'sim-' || (r.n %% %s), "
        f"host = 'sim', lease_expires = {bf.NOW} + %s, claimed_at = {bf.NOW} FROM (SELECT id, "
        "row_number() OVER (ORDER BY created_at, seq) - 1 AS n FROM fleet_loops LIMIT %s) r WHERE f.id = r.id"
    )
    held: list[list] = [[] for _ in range(workers)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(hold, (workers, LEASE, running))
        for loop_id, worker in conn.execute("SELECT id, worker FROM fleet_loops WHERE status = 'running'"):
            held[int(worker[4:])].append((loop_id, 1))
        conn.execute("VACUUM ANALYZE fleet_loops")
    return url, held


def plan(workers: list[int], held: list, total: int, args: tuple) -> list[tuple]:
    """(fleet second, kind, worker, loop index) for the given workers: their beats and their
    loops' boundaries, each spread evenly over its period."""
    simulate, iteration, count = args
    events, g = [], 0
    for w in workers:
        t = BEAT * w / count
        while t < simulate:
            events.append((t, "worker", w, -1))
            t += BEAT
        for i in range(len(held[w])):
            t = iteration * ((w + i * count) % total) / total
            while t < simulate:
                events.append((t, "boundary", w, i))
                t += iteration
            g += 1
    return sorted(events)


def _sim(url: str, mine: list[int], held: list, settings: tuple, start, out, done) -> None:
    """One process driving the workers ``mine``, each on its own connection."""
    from loopwright.registry import Registry
    from loopwright.registry.postgres import PostgresBackend

    simulate, iteration, speedup, count, per_loop = settings
    try:
        regs = {w: Registry(PostgresBackend(url, max_size=1)) for w in mine}
        total = sum(len(h) for h in held)
        events = plan(mine, held, total, (simulate, iteration, count))
        done_iters = {w: [0] * len(held[w]) for w in mine}
        start.wait(timeout=600)
        t0, c0, late, writes, rows = time.monotonic(), bf.cpu_now(), 0.0, 0, 0
        for at, kind, w, i in events:
            delay = t0 + at / speedup - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            late = max(late, -delay)
            if kind == "worker" and per_loop:  # as each loop beat before (for comparison)
                for loop_id, gen in held[w]:
                    regs[w].heartbeat(loop_id, gen, lease=LEASE)
                    regs[w].account_pause("default")
                rows += len(held[w])
                regs[w].worker_beat(
                    f"sim-{w}", "sim", len(held[w]), len(held[w]), None, [x for x, _ in held[w]]
                )
                writes += len(held[w]) + 1
            elif kind == "worker":  # as Worker._beat
                rows += len(regs[w].renew_claims(held[w], lease=LEASE))
                regs[w].worker_beat(
                    f"sim-{w}", "sim", len(held[w]), len(held[w]), None, [x for x, _ in held[w]]
                )
                regs[w].account_pause("default")
                writes += 2
            else:
                writes += bf._drive(regs[w], f"sim-{w}", held[w], "boundary", i, done_iters[w])
        out.put({"writes": writes, "renewed": rows, "cpu": bf.cpu_now() - c0, "late": late})
        done.wait(timeout=600)
        for reg in regs.values():
            reg.close()
    except Exception as exc:
        out.put({"error": repr(exc)})


def _claimer(url: str, settings: tuple, start, out, done) -> None:
    """One more worker claiming from the queue at a steady pace; each claim's latency."""
    from loopwright.fleet.allow import Allow
    from loopwright.fleet.consent import Verifies
    from loopwright.registry import Registry
    from loopwright.registry.postgres import PostgresBackend

    simulate, rate, speedup = settings
    try:
        reg = Registry(PostgresBackend(url))
        allow, verifies = Allow(bf.ALLOW), Verifies([])
        start.wait(timeout=600)
        t0, times, n = time.monotonic(), [], 0
        while n / rate < simulate:
            delay = t0 + n / rate / speedup - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            began = time.perf_counter()
            reg.claim(
                "claimer", "sim", lease=LEASE, allowed=lambda r: allow.why_not(r) is None,
                accepts=lambda row: verifies.why_not(row.get("spec")) is None,
            )  # fmt: skip
            times.append(time.perf_counter() - began)
            n += 1
        out.put({"claims": times})
        done.wait(timeout=600)
        reg.close()
    except Exception as exc:
        out.put({"error": repr(exc)})


def _api_calls(mon: Monitor, until: float, every: float, times: list) -> None:
    while every > 0 and time.monotonic() < until:
        began = time.perf_counter()
        mon.get("/api/fleet")
        times.append(time.perf_counter() - began)
        time.sleep(max(0.0, every - (time.perf_counter() - began)))


def scale_run(cluster, running: int, args) -> dict:
    url, held = fleet_db(cluster, running, args.queued, args.workers)
    procs_n = min(args.procs, args.workers)
    groups = [list(range(p, args.workers, procs_n)) for p in range(procs_n)]
    start, out, done = bf.SPAWN.Barrier(procs_n + 2), bf.SPAWN.Queue(), bf.SPAWN.Event()
    settings = (args.simulate, args.iteration, args.speedup, args.workers, args.per_loop_beats)
    procs = [bf.SPAWN.Process(target=_sim, args=(url, g, held, settings, start, out, done)) for g in groups]
    claim_settings = (args.simulate, args.claim_rate, args.speedup)
    procs.append(bf.SPAWN.Process(target=_claimer, args=(url, claim_settings, start, out, done)))
    for p in procs:
        p.start()
    with tempfile.TemporaryDirectory(prefix="lw-scale-") as tmp:
        mon = Monitor(url, Path(tmp))
        try:
            mon.get("/api/fleet")  # its first build is no page's later load
            api: list = []
            start.wait(timeout=600)
            s0, t0, load0 = bf.server_cpu(cluster), time.monotonic(), os.getloadavg()[0]
            until = t0 + args.simulate / args.speedup
            caller = threading.Thread(target=_api_calls, args=(mon, until, args.api_every, api))
            caller.start()
            results = [out.get(timeout=3600) for _ in procs]
            s1, wall = bf.server_cpu(cluster), time.monotonic() - t0
            caller.join()
        finally:
            mon.close()
    done.set()
    for p in procs:
        p.join(timeout=120)
    cluster.drop_database(url.rsplit("/", 1)[1])
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(errors[0])
    sims = [r for r in results if "writes" in r]
    claims = next(r["claims"] for r in results if "claims" in r)
    writes = sum(r["writes"] for r in sims) + len(claims)
    return {
        "running": running,
        "queued": args.queued,
        "workers": args.workers,
        "iteration_seconds": args.iteration,
        "simulated_seconds": args.simulate,
        "wall_seconds": round(wall, 1),
        "most_late_seconds": round(max(r["late"] for r in sims), 2),
        "writes_per_second": round(writes / args.simulate, 1),
        "leases_renewed_per_second": round(sum(r["renewed"] for r in sims) / args.simulate, 1),
        "server_share_of_one_core": round((s1 - s0) / args.simulate, 4),
        "server_cpu_us_per_write": round((s1 - s0) / max(writes, 1) * 1e6),
        "claim": quantiles(claims),
        "api_fleet": quantiles(api) if api else None,
        "load_start": round(load0, 1),
        "load_end": round(os.getloadavg()[0], 1),
    }


def table(result: dict) -> str:
    f = result["server"]
    lines = [
        f"PostgreSQL {f['postgresql']} (fsync {f['fsync']}, synchronous_commit {f['synchronous_commit']}), "
        f"{f['cores']} cores; {result['runs'][0]['workers']} workers, {result['runs'][0]['queued']} queued, "
        f"a boundary every {result['runs'][0]['iteration_seconds']:.0f} s per loop",
        f"{'running':>8} {'server':>8} {'writes/s':>9} {'us/write':>9} {'renew/s':>8} "
        f"{'claim p50/p95 ms':>17} {'api p50/p95 ms':>15} {'behind s':>9} {'load':>10}",
    ]
    for r in result["runs"]:
        api = r["api_fleet"] or {"median_ms": 0, "p95_ms": 0}
        lines.append(
            f"{r['running']:>8} {r['server_share_of_one_core'] * 100:>7.1f}% {r['writes_per_second']:>9.0f} "
            f"{r['server_cpu_us_per_write']:>9} {r['leases_renewed_per_second']:>8.0f} "
            f"{r['claim']['median_ms']:>8.1f}/{r['claim']['p95_ms']:<8.1f} "
            f"{api['median_ms']:>7.0f}/{api['p95_ms']:<7.0f} {r['most_late_seconds']:>9.1f} "
            f"{r['load_start']:>4.1f}-{r['load_end']:<4.1f}"
        )
    return "\n".join(lines)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000", help="running loops of each run, separated by commas")
    ap.add_argument("--queued", type=int, default=10_000, help="loops queued behind them")
    ap.add_argument("--workers", type=int, default=100, help="simulated workers holding the running loops")
    ap.add_argument("--procs", type=int, default=10, help="processes the simulated workers are spread over")
    ap.add_argument("--iteration", type=float, default=300.0, help="seconds between a loop's boundaries")
    ap.add_argument("--claim-rate", type=float, default=5.0, help="claims per second of the fleet's time")
    ap.add_argument("--api-every", type=float, default=1.0, help="seconds between /api/fleet calls, 0: none")
    ap.add_argument("--simulate", type=float, default=60.0, help="seconds of the fleet's time")
    ap.add_argument("--speedup", type=float, default=2.0)
    ap.add_argument(
        "--per-loop-beats", action="store_true", help="each loop renews its own lease, as before issue 27"
    )
    ap.add_argument("--no-fsync", action="store_true", help="the test suite's cluster settings")
    ap.add_argument("--check", action="store_true", help="exit 1 at 25%% of one core or more at 10,000 loops")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        args.sizes = [int(n) for n in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes takes numbers separated by commas, not {args.sizes!r}")
    if min(args.sizes) < args.workers or args.workers < 1 or args.procs < 1 or args.queued < 1:
        ap.error("--workers, --procs and --queued are 1 or more, and each size at least --workers")
    return args


def main() -> int:
    args = parse()
    cluster = bf.start_cluster(args.no_fsync)
    try:
        facts = bf.server_facts(cluster)
        runs = [scale_run(cluster, n, args) for n in args.sizes]
    finally:
        cluster.close()
    result = {"server": facts, "runs": runs}
    print(json.dumps(result, indent=2) if args.json else table(result))
    over = [r for r in runs if r["running"] >= TARGET_LOOPS and r["server_share_of_one_core"] >= TARGET_SHARE]
    if args.check and over:
        share = over[0]["server_share_of_one_core"] * 100
        print(
            f"FAIL: the server at {share:.0f}% of one core at {over[0]['running']} running loops",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
