"""The fleet's workers as the page shows them: each beats into the database every few seconds
with its slots and the loops it holds. A worker's liveness is judged from ``age`` (seconds
since its last beat, by the database's clock), never from a machine's own clock."""

from __future__ import annotations

from loopwright.registry.queue import json_text, json_value

BEAT = (
    "INSERT INTO fleet_workers (worker, host, slots, used, account, loops, beat_at, started_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, {now}, {now}) ON CONFLICT (worker) DO UPDATE SET "
    "host = excluded.host, slots = excluded.slots, used = excluded.used, account = excluded.account, "
    "loops = excluded.loops, beat_at = excluded.beat_at"
)


class Workers:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def worker_beat(self, worker: str, host: str, slots: int, used: int, account, loops: list[str]) -> None:
        """This worker is alive now, with ``used`` of its ``slots`` taken by ``loops`` (ids)."""
        with self.backend.tx() as tx:
            tx.run(BEAT, (worker, host, slots, used, account, json_text(list(loops))))

    def workers(self) -> list[dict]:
        """Every worker that beat and was not forgotten, by host."""
        with self.backend.tx() as tx:
            rows = tx.rows(
                "SELECT worker, host, slots, used, account, loops, beat_at, started_at, "
                "{now} - beat_at AS age FROM fleet_workers ORDER BY host, worker"
            )
        return [dict(r, loops=json_value(r["loops"]) or []) for r in rows]

    def forget_worker(self, worker: str) -> bool:
        """Removes a worker from the list (one that stopped for good); whether it was there."""
        with self.backend.tx() as tx:
            return tx.run("DELETE FROM fleet_workers WHERE worker = %s", (worker,)) == 1


# A worker's state, as the monitor's metrics and page show it. A worker beats every 10 s by
# default (its --heartbeat): six missed beats make it stale, ten minutes of silence stopped.
STALE_AFTER = 60.0
STOPPED_AFTER = 600.0
WORKER_STATES = ("alive", "stale", "stopped")


def worker_state(row: dict) -> str:
    """alive, stale or stopped, from ``age`` (seconds since its last beat, by the database's
    clock, as :meth:`Workers.workers` reads it). A row that says the worker stopped (``state``
    or ``stopped_at``, where the schema has them) is stopped whatever its age."""
    if row.get("state") == "stopped" or _number(row.get("stopped_at")) is not None:
        return "stopped"
    age = _number(row.get("age"))
    if age is None or age >= STOPPED_AFTER:
        return "stopped"
    return "stale" if age >= STALE_AFTER else "alive"


def _number(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None
