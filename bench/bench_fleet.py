"""The fleet's registry on PostgreSQL (issue 20): claims per second and the database's load.

On a throwaway cluster of its own (tests/pgcluster.py) with PostgreSQL's default durability
(fsync and synchronous_commit on), in one run:
  - claims per second with 1, 8 and 64 concurrent processes through the real code path,
    Registry.claim (as a worker calls it, with an allow-list, and without), beside a bare
    ``UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1)`` loop over psycopg with
    the same processes. Each series is measured ``--rounds`` times, the series taking turns
    within each round: the rates shown are each series' best round, and a ratio to the bare rate
    is the median of the rounds' ratios (each round's series ran one after the other, so a
    busy spell of a shared machine weighs on both sides of a ratio). Every row must be claimed exactly once
    (else exit 1); ``--check`` also fails when Registry.claim reaches less than half the bare
    rate at any level;
  - 1,000 running loops as workers drive them: an iteration boundary of each loop (heartbeat,
    progress with the day's spend, one timeline event) every 60 s, and each worker's beat every
    10 s (its row, one renewal of every lease it holds, its account's pause read: registry/leases.py),
    all played ``--speedup`` times
    faster than real time. The figure: the database server's CPU (the postmaster and its
    children, from /proc) per second of the fleet's time, as a share of one core.

    python bench/bench_fleet.py [--claims 4000] [--levels 1,8,64] [--rounds 5] [--loops 1000]
                                [--workers 10] [--simulate 120] [--speedup 10]
                                [--no-fsync] [--check] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "lib"), str(REPO / "tests")]

import pgcluster  # noqa: E402
from loopwright.registry.postgres import PostgresBackend  # noqa: E402  (imports no psycopg itself)

NOW = PostgresBackend.NOW
BARE = (
    "UPDATE fleet_loops SET worker = %s, host = %s, generation = generation + 1, status = 'running', "
    f"lease_expires = {NOW} + %s, claimed_at = {NOW}, updated_at = {NOW} "
    "WHERE id = (SELECT id FROM fleet_loops WHERE status = 'queued' ORDER BY created_at, seq "
    "FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING *"
)
QUEUE = (
    "INSERT INTO fleet_loops (id, name, kind, spec, repo, branch, work_branch, account, tags, status, "
    f"created_at, updated_at) VALUES (%s, %s, 'prompt', %s, %s, 'main', %s, 'default', '[]', 'queued', "
    f"{NOW}, {NOW})"
)
REPO_URL = "https://git.example/acme/app.git"
ALLOW = ["https://git.example/acme/*"]  # the allow-list of the worker series
SPEC = json.dumps({"goal": "make the tests pass " * 4, "limits": {"max_iterations": 50}})
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "shared_buffers": "128MB"}
HOWS = ("registry", "worker", "bare")
NAMES = {
    "registry": "Registry.claim",
    "worker": "Registry.claim, allowed=, accepts= (worker)",
    "bare": "bare UPDATE ... SKIP LOCKED",
}
BEAT_EVERY, BOUNDARY_EVERY = 10.0, 60.0  # seconds of the fleet's time
SPAWN = multiprocessing.get_context("spawn")


# --- the server's CPU ---------------------------------------------------------------------------


def _ticks(pid: int) -> tuple[int, int]:
    """(parent pid, CPU ticks of the process and of its children it has waited for)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return int(fields[1]), sum(int(f) for f in fields[11:15])  # ppid; utime stime cutime cstime


def server_cpu(cluster) -> float:
    """CPU seconds used so far by the postmaster and its live children (backends, writers).
    A backend that ended is in the postmaster's children's time once reaped."""
    pm = int((cluster.data / "postmaster.pid").read_text().split()[0])
    total = _ticks(pm)[1]
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pm:
            try:
                ppid, ticks = _ticks(int(entry))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            total += ticks if ppid == pm else 0
    return total / os.sysconf("SC_CLK_TCK")


def cpu_now() -> float:
    t = os.times()
    return t.user + t.system


# --- claims -------------------------------------------------------------------------------------


def _claim_fn(how: str, url: str, me: str):
    """A claim in the way ``how`` names (a row, or None when none is left), and its closer."""
    import psycopg

    if how == "bare":
        conn = psycopg.connect(url, autocommit=True)
        at: list = []  # where the id and the generation are in a row (found once)

        def bare():
            cur = conn.execute(BARE, (me, "bench", 600.0))
            row = cur.fetchone()
            if row is None:
                return None
            at[:] = at or [[c.name for c in cur.description].index(n) for n in ("id", "generation")]
            return {"id": row[at[0]], "generation": row[at[1]]}

        return bare, conn
    from loopwright.fleet.allow import Allow
    from loopwright.fleet.consent import Verifies
    from loopwright.registry import Registry

    reg = Registry(PostgresBackend(url, max_size=1))  # a worker's pool, one process: one connection
    allow, verifies = Allow(ALLOW), Verifies([])
    allowed = (lambda repo: allow.why_not(repo) is None) if how == "worker" else None
    accepts = (lambda row: verifies.why_not(row.get("spec")) is None) if how == "worker" else None
    return lambda: reg.claim(me, "bench", lease=600.0, allowed=allowed, accepts=accepts), reg


def _claimer(inbox, start, end, out) -> None:
    """One process kept for every claim run: each run it either claims until nothing is left
    (reporting what it got, when, and its CPU) or sits it out. Every process meets the others
    at the start and at the end, connected until the server's CPU has been read (a backend
    that ended meanwhile could be missed)."""
    me = f"w{os.getpid()}"
    while (job := inbox.get()) is not None:
        claim = closer = None
        try:
            claim, closer = _claim_fn(job[0], job[1], me) if job else (None, None)
        except Exception as exc:  # reported by the parent
            out.put({"error": f"{job[0]}: {exc!r}"})
        start.wait(timeout=600)
        try:
            t0, c0, got = time.monotonic(), cpu_now(), []
            while claim is not None and (row := claim()) is not None:
                got.append((row["id"], row["generation"]))
            if claim is not None:
                out.put({"got": got, "t0": t0, "t1": time.monotonic(), "cpu": cpu_now() - c0})
        except Exception as exc:
            out.put({"error": f"{job[0]}: {exc!r}"})
        end.wait(timeout=1800)
        if closer is not None:
            closer.close()


class Claimers:
    """``count`` processes started once (their start-up is no part of any run)."""

    def __init__(self, count: int) -> None:
        self.start, self.end, self.out = SPAWN.Barrier(count + 1), SPAWN.Barrier(count + 1), SPAWN.Queue()
        self.inboxes = [SPAWN.Queue() for _ in range(count)]
        self.procs = [
            SPAWN.Process(target=_claimer, args=(q, self.start, self.end, self.out)) for q in self.inboxes
        ]
        for p in self.procs:
            p.start()

    def run(self, cluster, how: str, procs: int, url: str) -> tuple[list, float]:
        """The first ``procs`` processes drain the queue at ``url``; their results and the
        server's CPU seconds meanwhile."""
        for i, inbox in enumerate(self.inboxes):
            inbox.put((how, url) if i < procs else ())
        self.start.wait(timeout=600)  # every process connected
        s0 = server_cpu(cluster)
        results = [self.out.get(timeout=1800) for _ in range(procs)]
        server = server_cpu(cluster) - s0
        self.end.wait(timeout=600)
        return results, server

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for p in self.procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


def fresh_queue(cluster, rows: int) -> str:
    """A new database with the registry's schema and ``rows`` queued loops; its URL."""
    import psycopg

    from loopwright.registry import open_registry

    url = cluster.url(cluster.create_database())
    open_registry(url).close()
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        names = [f"b-{uuid.uuid4().hex[:12]}" for _ in range(rows)]
        cur.executemany(QUEUE, [(uuid.uuid4().hex, n, SPEC, REPO_URL, f"loopwright/{n}") for n in names])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE fleet_loops")  # the same start for every run: stats, no dead rows
    return url


def claim_run(cluster, claimers: Claimers, how: str, procs: int, rows: int) -> dict:
    """``procs`` processes drain ``rows`` queued loops; the rate and the double claims."""
    import psycopg

    url = fresh_queue(cluster, rows)
    results, server = claimers.run(cluster, how, procs, url)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(errors[0])
    got = [g for r in results for g in r["got"]]
    ids = [i for i, _ in got]
    with psycopg.connect(url) as conn:
        wrong = "SELECT count(*) FROM fleet_loops WHERE status <> 'running' OR generation <> 1"
        left = conn.execute(wrong).fetchone()[0]
    cluster.drop_database(url.rsplit("/", 1)[1])
    wall = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    return {
        "how": how,
        "processes": procs,
        "claims": len(got),
        "per_second": len(got) / wall,
        "double_claims": len(ids) - len(set(ids)) + sum(1 for _, g in got if g != 1),
        "unclaimed": rows - len(set(ids)) + left,
        "server_cpu_us": server / max(len(got), 1) * 1e6,
        "client_cpu_us": sum(r["cpu"] for r in results) / max(len(got), 1) * 1e6,
    }


def claim_series(cluster, levels: list[int], rows: int, rounds: int) -> list[dict]:
    """Every series at every level, ``rounds`` times, the series taking turns (so that a busy
    moment of a shared machine does not fall on one series only): the best round of each, with
    the rates of all its rounds in order."""
    best: dict = {}
    runs = []
    claimers = Claimers(max(levels))
    try:
        for n in levels:
            for r in range(rounds):
                for how in HOWS[r % 3 :] + HOWS[: r % 3]:
                    run = claim_run(cluster, claimers, how, n, rows)
                    runs.append(run)
                    if (how, n) not in best or run["per_second"] > best[how, n]["per_second"]:
                        best[how, n] = run
    finally:
        claimers.close()
    out = []
    for n in levels:
        for how in HOWS:
            mine = [r for r in runs if key(r) == (how, n)]
            out.append(
                dict(
                    best[how, n],
                    double_claims=sum(r["double_claims"] for r in mine),
                    unclaimed=sum(r["unclaimed"] for r in mine),
                    rounds=[round(r["per_second"], 1) for r in mine],
                )
            )
    return out


def key(run: dict) -> tuple:
    return run["how"], run["processes"]


def paired(claims: list[dict], how: str, n: int) -> float:
    """The median over the rounds of ``how``'s rate over the bare rate, at ``n`` processes."""
    rounds = {c["how"]: c["rounds"] for c in claims if c["processes"] == n}
    return statistics.median(a / b for a, b in zip(rounds[how], rounds["bare"]))


# --- the running fleet's load -------------------------------------------------------------------


def schedule(first: int, count: int, total: int, simulate: float) -> list[tuple]:
    """(fleet second, kind, loop index) for loops first..first+count of ``total``: beats and
    iteration boundaries, each loop's spread evenly over its period; and this worker's beats."""
    events = []
    for g in range(first, first + count):
        for kind, every in (("boundary", BOUNDARY_EVERY),):  # leases: the worker's beat renews them
            t = every * g / total
            while t < simulate:
                events.append((t, kind, g - first))
                t += every
    t = BEAT_EVERY * first / total
    while t < simulate:
        events.append((t, "worker", -1))
        t += BEAT_EVERY
    return sorted(events)


def _drive(reg, me: str, loops: list, kind: str, i: int, done: list) -> int:
    """One event of a worker's loops, as slot.py and worker.py write it; the writes it made."""
    if kind == "worker":  # as Worker._beat: every lease in one statement, then its row
        reg.renew_claims(loops, lease=30.0)
        reg.worker_beat(me, "bench", len(loops), len(loops), None, [lid for lid, _ in loops])
        reg.account_pause("default")
        return 2
    loop_id, generation = loops[i]
    reg.heartbeat(loop_id, generation, lease=30.0)
    done[i] += 1
    n = done[i]
    state = {"counters": {"iterations": n, "minutes": n * 1.5, "tokens_in": n * 9000}, "head": "0" * 40}
    fields = {"iteration": n, "minutes": n * 1.5, "tokens": n * 12000, "dollars": n * 0.21, "state": state}
    reg.record_spend(loop_id, generation, 0.21, last_decision="CONTINUE: more to do", **fields)
    reg.add_event(loop_id, generation, "iteration", {"n": n, "head": "0" * 40, "dollars": 0.21})
    return 3


def _beater(url: str, loops: list, first: int, total: int, args: tuple, start, out, done) -> None:
    """One worker process driving its running loops on the fleet's schedule, ``speedup``
    times faster than real time."""
    simulate, speedup = args
    try:
        from loopwright.registry import Registry

        reg = Registry(PostgresBackend(url, max_size=1))
        events = schedule(first, len(loops), total, simulate)
        iterations, me, writes = [0] * len(loops), f"bench-{os.getpid()}", 0
        start.wait(timeout=600)
        t0, c0, late = time.monotonic(), cpu_now(), 0.0
        for at, kind, i in events:
            delay = t0 + at / speedup - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            late = max(late, -delay)
            writes += _drive(reg, me, loops, kind, i, iterations)
        out.put({"ops": writes, "wall": time.monotonic() - t0, "cpu": cpu_now() - c0, "late": late})
        done.wait(timeout=600)  # connected until the parent has read the server's CPU
        reg.close()
    except Exception as exc:
        out.put({"error": repr(exc)})


def claimed_loops(cluster, count: int) -> tuple[str, list]:
    from loopwright.registry import open_registry

    url = fresh_queue(cluster, count)
    reg = open_registry(url)
    loops = []
    while (row := reg.claim("bench-claimer", "bench", lease=3600.0)) is not None:
        loops.append((row["id"], row["generation"]))
    reg.close()
    return url, loops


def beat_run(cluster, total: int, workers: int, simulate: float, speedup: float) -> dict:
    """``total`` running loops on ``workers`` processes; the server's CPU per fleet second."""
    url, loops = claimed_loops(cluster, total)
    start, out, done = SPAWN.Barrier(workers + 1), SPAWN.Queue(), SPAWN.Event()
    share = [(w * total // workers, (w + 1) * total // workers) for w in range(workers)]
    procs = [
        SPAWN.Process(target=_beater, args=(url, loops[a:b], a, total, (simulate, speedup), start, out, done))
        for a, b in share
    ]
    for p in procs:
        p.start()
    start.wait(timeout=600)
    s0, t0 = server_cpu(cluster), time.monotonic()
    results = [out.get(timeout=3600) for _ in procs]
    s1, wall = server_cpu(cluster), time.monotonic() - t0
    done.set()
    for p in procs:
        p.join(timeout=120)
    cluster.drop_database(url.rsplit("/", 1)[1])
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(errors[0])
    ops = sum(r["ops"] for r in results)
    return {
        "loops": total,
        "workers": workers,
        "simulated_seconds": simulate,
        "wall_seconds": wall,
        "speedup": simulate / wall,
        "writes": ops,
        "writes_per_fleet_second": ops / simulate,
        "server_share_of_one_core": (s1 - s0) / simulate,
        "server_cpu_us_per_write": (s1 - s0) / ops * 1e6,
        "workers_share_of_one_core": sum(r["cpu"] for r in results) / simulate,
        "most_late_seconds": max(r["late"] for r in results),
    }


# --- the run ------------------------------------------------------------------------------------


def start_cluster(fast: bool):
    """The throwaway cluster of the tests: default durability unless ``fast``."""
    why = pgcluster.unavailable()
    if why:
        sys.exit(f"bench-fleet: {why}")
    if not fast:
        pgcluster.SETTINGS.update(DURABLE)
    return pgcluster.make_cluster()


def server_facts(cluster) -> dict:
    import psycopg

    with psycopg.connect(cluster.url()) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        fsync = conn.execute("SHOW fsync").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
    return {
        "postgresql": version.split()[0],
        "fsync": fsync,
        "synchronous_commit": sync,
        "cores": os.cpu_count(),
        "load_before": os.getloadavg()[0],
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
    }


def table(result: dict) -> str:
    f, claims, hb = result["server"], result["claims"], result["heartbeats"]
    levels = sorted({c["processes"] for c in claims})
    by = {key(c): c for c in claims}
    lines = [
        f"PostgreSQL {f['postgresql']} (fsync {f['fsync']}, synchronous_commit {f['synchronous_commit']}), "
        f"{f['cores']} cores, load {f['load_before']:.1f} at start and {f['load_after']:.1f} at the end; "
        f"Python {f['python']}, psycopg {f['psycopg']}",
        "",
        f"{'claims per second (best of ' + str(result['rounds']) + ')':36}"
        + "".join(f"{f'{n} proc':>10}" for n in levels),
    ]
    for how in HOWS:
        lines.append(f"{NAMES[how]:36}" + "".join(f"{by[how, n]['per_second']:>10,.0f}" for n in levels))
    for how in HOWS[:2]:
        lines.append(
            f"{'  ' + how + ' / bare (median)':36}"
            + "".join(f"{result['ratios'][how][str(n)]:>10.2f}" for n in levels)
        )
    for field, label in (("server_cpu_us", "server CPU us/claim"), ("client_cpu_us", "client CPU us/claim")):
        for how in HOWS:
            lines.append(f"{label + ', ' + how:36}" + "".join(f"{by[how, n][field]:>10,.0f}" for n in levels))
    lines.append(f"{'double claims (all rounds)':36}{result['double_claims']:>10}")
    lines += [
        "",
        f"{hb['loops']} running loops on {hb['workers']} workers: a worker beat every {BEAT_EVERY:.0f} s, an "
        f"iteration boundary every {BOUNDARY_EVERY:.0f} s ({hb['writes_per_fleet_second']:.0f} writes/s)",
        f"  {hb['simulated_seconds']:.0f} s of the fleet in {hb['wall_seconds']:.1f} s "
        f"({hb['speedup']:.1f}x), at most {hb['most_late_seconds']:.1f} s behind",
        f"  database server: {hb['server_share_of_one_core'] * 100:.1f}% of one core "
        f"({hb['server_cpu_us_per_write']:.0f} us CPU per write)",
        f"  worker processes (client side): {hb['workers_share_of_one_core'] * 100:.1f}% of one core",
    ]
    return "\n".join(lines)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=4000, help="queued loops drained in each run")
    ap.add_argument("--levels", default="1,8,64", help="concurrent claiming processes")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each series at each level (see above)")
    ap.add_argument("--loops", type=int, default=1000, help="running loops of the load section")
    ap.add_argument("--workers", type=int, default=10, help="processes driving the running loops")
    ap.add_argument("--simulate", type=float, default=120.0, help="seconds of the fleet's time")
    ap.add_argument("--speedup", type=float, default=10.0)
    ap.add_argument("--no-fsync", action="store_true", help="the test suite's cluster settings")
    ap.add_argument("--check", action="store_true", help="exit 1 below half the bare claim rate")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        args.levels = [int(n) for n in args.levels.split(",")]
    except ValueError:
        ap.error(f"--levels takes numbers separated by commas, not {args.levels!r}")
    if (
        min(args.levels) < 1
        or args.claims < 1
        or args.rounds < 1
        or args.loops < args.workers
        or args.workers < 1
    ):
        ap.error("--levels, --claims, --rounds and --workers are 1 or more, and --loops at least --workers")
    return args


def main() -> int:
    args = parse()
    cluster = start_cluster(args.no_fsync)
    try:
        facts = server_facts(cluster)
        claims = claim_series(cluster, args.levels, args.claims, args.rounds)
        beats = beat_run(cluster, args.loops, args.workers, args.simulate, args.speedup)
        facts["load_after"] = os.getloadavg()[0]
    finally:
        cluster.close()
    ratios = {h: {str(n): paired(claims, h, n) for n in args.levels} for h in HOWS[:2]}
    result = {
        "server": facts,
        "rounds": args.rounds,
        "claims": claims,
        "ratios": ratios,
        "double_claims": sum(c["double_claims"] for c in claims),
        "unclaimed": sum(c["unclaimed"] for c in claims),
        "heartbeats": beats,
    }
    print(json.dumps(result, indent=2) if args.json else table(result))
    if result["double_claims"] or result["unclaimed"]:
        print(
            f"FAIL: {result['double_claims']} double claims, {result['unclaimed']} rows unclaimed",
            file=sys.stderr,
        )
        return 1
    slow = [f"{h} at {n} ({r:.2f})" for h in HOWS[:2] for n, r in ratios[h].items() if r < 0.5]
    if args.check and slow:
        print(f"FAIL: Registry.claim below half the bare rate: {', '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
