"""A worker's state (alive, stale, stopped) from its row: one rule, registry.workers.worker_state,
for `fleet workers`, the page and the metrics; the same on SQLite and PostgreSQL."""

from __future__ import annotations

from loopwright.registry.workers import worker_state


def beat(reg, worker: str, lease=6.0) -> None:
    reg.worker_beat(worker, "alpha", 2, 1, None, ["l1"], allow_repo=["https://example.com/*"], lease=lease)


def age(reg, worker: str, seconds: float) -> None:
    """Its last beat ``seconds`` earlier, as a silent worker's would be."""
    with reg.backend.tx() as tx:
        tx.run("UPDATE fleet_workers SET beat_at = beat_at - %s WHERE worker = %s", (seconds, worker))


def states(reg) -> dict:
    return {w["worker"]: worker_state(w) for w in reg.workers()}


def test_a_worker_is_alive_within_its_lease_stale_after_and_stopped_when_it_says_so(reg):
    beat(reg, "w1")
    beat(reg, "w2")
    beat(reg, "w3")
    age(reg, "w2", 7)  # past its 6 s lease: its claims are running out
    reg.worker_stopped("w3")
    assert states(reg) == {"w1": "alive", "w2": "stale", "w3": "stopped"}
    (w3,) = [w for w in reg.workers() if w["worker"] == "w3"]
    assert (w3["used"], w3["loops"]) == (0, [])  # it holds nothing once it left
    beat(reg, "w3")  # started again under the same name
    assert states(reg)["w3"] == "alive"


def test_the_rule_reads_the_databases_clock_given_or_the_rows_age():
    row = {"beat_at": 1000.0, "stopped_at": None, "lease": 30.0, "age": 5.0}
    assert worker_state(row) == "alive"
    assert worker_state(row, now=1031.0) == "stale"
    assert worker_state(dict(row, lease=None), now=1029.0) == "alive"  # the worker's default 30 s
    assert worker_state(dict(row, stopped_at=999.0)) == "alive"  # a stop before its last beat
    assert worker_state(dict(row, stopped_at=1000.0), now=2000.0) == "stopped"
    assert worker_state({"beat_at": "x", "age": None}) == "stopped"  # a row nobody can read is no live worker


def test_workers_long_gone_are_forgotten_as_another_starts(reg):
    """A day after a worker said it stopped, or a week after its last beat, its row goes when
    a worker starts: restarts under new names do not fill `fleet workers` and the page."""
    for name in ("left-long-ago", "left-lately", "silent-a-week", "silent-a-day", "alive"):
        beat(reg, name)
    for name in ("left-long-ago", "left-lately"):
        reg.worker_stopped(name)
    with reg.backend.tx() as tx:
        sql = (
            "UPDATE fleet_workers SET beat_at = beat_at - %s, stopped_at = stopped_at - %s WHERE worker = %s"
        )
        tx.run(sql, (90_000, 90_000, "left-long-ago"))
        tx.run(sql, (3_600, 3_600, "left-lately"))
    age(reg, "silent-a-week", 8 * 86_400)
    age(reg, "silent-a-day", 86_400)
    reg.hold_worker_name("new-one", "beta", 1, None, "token-1", 10.0)
    assert sorted(w["worker"] for w in reg.workers()) == [
        "alive", "left-lately", "new-one", "silent-a-day",
    ]  # fmt: skip
