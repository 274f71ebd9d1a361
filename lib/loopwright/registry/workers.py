"""The fleet's workers as the page shows them: each beats into the database every few seconds
with its slots and the loops it holds. A worker's liveness is judged from ``age`` (seconds
since its last beat, by the database's clock), never from a machine's own clock."""

from __future__ import annotations

from loopwright.registry.queue import json_text, json_value

ALIVE, STALE, STOPPED = "alive", "stale", "stopped"
DEFAULT_LEASE = 30.0  # a worker that does not publish its lease: `loopwright worker`'s default

BEAT = (
    "INSERT INTO fleet_workers (worker, host, slots, used, account, loops, allow_repo, allow_verify, lease, "
    "beat_at, started_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, {now}, {now}) "
    "ON CONFLICT (worker) DO UPDATE SET host = excluded.host, slots = excluded.slots, used = excluded.used, "
    "account = excluded.account, loops = excluded.loops, allow_repo = excluded.allow_repo, "
    "allow_verify = excluded.allow_verify, lease = excluded.lease, beat_at = excluded.beat_at"
)


def _patterns(text) -> list[str] | None:
    """A published list of patterns; None for a worker that published none."""
    value = json_value(text)
    if text is None or value is None:
        return None
    return [p for p in value if isinstance(p, str)] if isinstance(value, list) else []


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def worker_state(row: dict, now: float | None = None) -> str:
    """``alive``, ``stale`` or ``stopped``: the one rule `fleet workers`, the page and the metrics
    use. Stopped: the worker said so as it exited (``stopped_at`` at or after its last beat; a
    worker started again under the same name beats after it). Alive: its last beat is within its
    lease (three of its heartbeats by default), so the claims it holds still stand. Stale: older;
    its loops are failing over to other workers. ``now`` is the database's clock (the time the
    row was read); without it, the row's ``age`` (seconds since its beat, by that same clock)."""
    beat, stopped = _number(row.get("beat_at")), _number(row.get("stopped_at"))
    if stopped is not None and (beat is None or stopped >= beat):
        return STOPPED
    age = _number(row.get("age")) if now is None or beat is None else float(now) - beat
    lease = _number(row.get("lease")) or DEFAULT_LEASE
    return ALIVE if age is not None and age <= max(lease, 1.0) else STALE


class Workers:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def worker_beat(
        self, worker: str, host: str, slots: int, used: int, account, loops: list[str], *,
        allow_repo=None, allow_verify=None, lease=None,
    ) -> None:  # fmt: skip
        """This worker is alive now, with ``used`` of its ``slots`` taken by ``loops`` (ids); what
        it accepts (its --allow-repo and --allow-verify patterns) and its lease, for `submit`."""
        policy = [None if p is None else json_text(list(p)) for p in (allow_repo, allow_verify)]
        lease = None if lease is None else float(lease)
        with self.backend.tx() as tx:
            tx.run(BEAT, (worker, host, slots, used, account, json_text(list(loops)), *policy, lease))

    def workers(self) -> list[dict]:
        """Every worker that beat and was not forgotten, by host."""
        with self.backend.tx() as tx:
            rows = tx.rows(
                "SELECT worker, host, slots, used, account, loops, allow_repo, allow_verify, lease, beat_at, "
                "started_at, stopped_at, {now} - beat_at AS age FROM fleet_workers ORDER BY host, worker"
            )
        return [
            dict(
                r,
                loops=json_value(r["loops"]) or [],
                allow_repo=_patterns(r["allow_repo"]),
                allow_verify=_patterns(r["allow_verify"]),
            )
            for r in rows
        ]

    def worker_stopped(self, worker: str) -> None:
        """This worker is leaving (its loops were handed back): it holds nothing, and `fleet
        workers` shows it stopped rather than stale."""
        with self.backend.tx() as tx:
            tx.run(
                "UPDATE fleet_workers SET used = 0, loops = '[]', stopped_at = {now} WHERE worker = %s",
                (worker,),
            )

    def forget_worker(self, worker: str) -> bool:
        """Removes a worker from the list (one that stopped for good); whether it was there."""
        with self.backend.tx() as tx:
            return tx.run("DELETE FROM fleet_workers WHERE worker = %s", (worker,)) == 1
