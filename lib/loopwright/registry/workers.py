"""The fleet's workers as the page shows them: each beats into the database every few seconds
with its slots and the loops it holds. A worker's liveness is judged from ``age`` (seconds
since its last beat, by the database's clock), never from a machine's own clock.

A worker's name is its own while it lives: a worker holds it with a token of its process, and
another process given the same ``--name`` is refused while the holder beat within its
``live_for`` seconds (a few of its beats). A worker that stopped lets go of its name; one that
died holds it until its beats are that old.
"""

from __future__ import annotations

from loopwright.core.attention import (
    ALIVE,
    STALE,
    STALE_AFTER,
    STOPPED,
    STOPPED_AFTER,
    WORKER_STATES,
    worker_state,
)
from loopwright.registry.api import RegistryError
from loopwright.registry.queue import json_text, json_value

# A worker's state (alive, stale, stopped) is core/attention.py's rule, the page's and the
# metrics' alike; re-exported here for the registry's callers.
__all__ = [
    "ALIVE", "STALE", "STALE_AFTER", "STOPPED", "STOPPED_AFTER", "WORKER_STATES", "Workers", "live_for",
    "worker_state",
]  # fmt: skip

LIVE_BEATS = 3  # beats a worker may miss and still hold its name
MIN_LIVE_FOR = 5.0  # seconds, however often it beats
# The row is this worker's to write: it holds the name, nobody does, or its holder is gone.
MINE = (
    "fleet_workers.token IS NULL OR fleet_workers.token = excluded.token "
    "OR fleet_workers.beat_at < {now} - COALESCE(fleet_workers.live_for, 0)"
)
# A beat also publishes what the worker accepts (its --allow-repo and --allow-verify patterns)
# and its lease, for `submit` to refuse a loop no live worker would take.
BEAT = (
    "INSERT INTO fleet_workers (worker, host, slots, used, account, loops, beat_at, started_at, token, "
    "live_for, allow_repo, allow_verify, lease) "
    "VALUES (%s, %s, %s, %s, %s, %s, {now}, {now}, %s, %s, %s, %s, %s) ON CONFLICT (worker) DO UPDATE SET "
    "host = excluded.host, slots = excluded.slots, used = excluded.used, account = excluded.account, "
    "loops = excluded.loops, beat_at = excluded.beat_at, token = excluded.token, "
    "live_for = excluded.live_for, allow_repo = excluded.allow_repo, allow_verify = excluded.allow_verify, "
    "lease = excluded.lease, stopped_at = NULL"  # a worker that beats has not stopped
)
# As a worker starts, the rows of workers long gone go: one that said it stopped a day ago, or
# silent for a week (a worker restarted under a new name each time, as with the default
# <host>-<random>, would otherwise add a row to `fleet workers` and the page for ever).
FORGET_LONG_GONE = (
    "DELETE FROM fleet_workers WHERE (stopped_at IS NOT NULL AND stopped_at >= beat_at "
    "AND {now} - stopped_at > 86400) OR {now} - beat_at > 604800"
)
HOLD = BEAT + ", started_at = excluded.started_at WHERE " + MINE


def live_for(heartbeat: float) -> float:
    """Seconds without a beat after which a worker beating every ``heartbeat`` is gone."""
    return max(MIN_LIVE_FOR, LIVE_BEATS * float(heartbeat))


def _patterns(text) -> list[str] | None:
    """A published list of patterns; None for a worker that published none."""
    value = json_value(text)
    if text is None or value is None:
        return None
    return [p for p in value if isinstance(p, str)] if isinstance(value, list) else []


class Workers:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def hold_worker_name(
        self, worker: str, host: str, slots: int, account, token: str, heartbeat: float
    ) -> None:
        """This process takes the name ``worker`` (its first beat); RegistryError, one line, while
        another live worker holds it."""
        values = (worker, host, slots, 0, account, "[]", token, live_for(heartbeat), None, None, None)
        with self.backend.tx() as tx:
            tx.run(FORGET_LONG_GONE)
            if tx.run(HOLD, values) == 1:
                return
            row = tx.one(
                "SELECT host, {now} - beat_at AS age FROM fleet_workers WHERE worker = %s", (worker,)
            )
        where = f" on {str(row['host'])[:100]} (it beat {float(row['age']):.0f} s ago)" if row else ""
        raise RegistryError(
            f"a worker named {worker} is running{where}: give this one another --name, or stop that one first"
        )

    def worker_beat(
        self,
        worker: str,
        host: str,
        slots: int,
        used: int,
        account,
        loops: list[str],
        token=None,
        heartbeat=None,
        *,
        allow_repo=None,
        allow_verify=None,
        lease=None,
    ) -> bool:
        """This worker is alive now, with ``used`` of its ``slots`` taken by ``loops`` (ids), and
        what it accepts (its --allow-repo and --allow-verify patterns) and its lease, for `submit`.
        With the ``token`` it holds its name by: whether the name is still its own (False: another
        worker took it while this one was away longer than its ``live_for``, and nothing is written)."""
        policy = [None if p is None else json_text(list(p)) for p in (allow_repo, allow_verify)]
        policy.append(None if lease is None else float(lease))
        head = (worker, host, slots, used, account, json_text(list(loops)))
        if token is None:
            with self.backend.tx() as tx:
                tx.run(BEAT, (*head, None, None, *policy))
            return True
        values = (*head, token, live_for(heartbeat or 0), *policy)
        with self.backend.tx() as tx:
            return tx.run(BEAT + " WHERE " + MINE, values) == 1

    def let_go_of_name(self, worker: str, token: str) -> None:
        """A worker that stops lets go of its name: another may take it at once."""
        with self.backend.tx() as tx:
            tx.run("UPDATE fleet_workers SET token = NULL WHERE worker = %s AND token = %s", (worker, token))

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

    def worker_stopped(self, worker: str, token: str | None = None) -> None:
        """This worker is leaving (its loops were handed back): it holds nothing, and `fleet
        workers` shows it stopped rather than stale. With the ``token`` it holds its name by,
        only while the name is still its own (another worker may have taken it meanwhile)."""
        sql = "UPDATE fleet_workers SET used = 0, loops = '[]', stopped_at = {now} WHERE worker = %s"
        with self.backend.tx() as tx:
            if token is None:
                tx.run(sql, (worker,))
            else:
                tx.run(sql + " AND (token IS NULL OR token = %s)", (worker, token))

    def forget_worker(self, worker: str) -> bool:
        """Removes a worker from the list (one that stopped for good); whether it was there."""
        with self.backend.tx() as tx:
            return tx.run("DELETE FROM fleet_workers WHERE worker = %s", (worker,)) == 1
