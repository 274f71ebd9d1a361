"""The fleet's workers as the page shows them: each beats into the database every few seconds
with its slots and the loops it holds. A worker's liveness is judged from ``age`` (seconds
since its last beat, by the database's clock), never from a machine's own clock."""

from __future__ import annotations

from loopwright.registry.queue import json_text, json_value

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
                "SELECT worker, host, slots, used, account, loops, allow_repo, allow_verify, lease, "
                "beat_at, started_at, {now} - beat_at AS age FROM fleet_workers ORDER BY host, worker"
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

    def forget_worker(self, worker: str) -> bool:
        """Removes a worker from the list (one that stopped for good); whether it was there."""
        with self.backend.tx() as tx:
            return tx.run("DELETE FROM fleet_workers WHERE worker = %s", (worker,)) == 1
