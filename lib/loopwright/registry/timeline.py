"""A fleet loop's timeline as the queue writes it: every claim (a failover when the worker
before it let its lease run out), release, end, stop or cancel request and gate answer goes in
with the change it records, in the same transaction, with the worker and host it concerns and
the reason. A worker's own events (iterations, its client's errors) follow in causes.py and
the slot's add_event.
"""

from __future__ import annotations

from loopwright.core import jsoncodec

EVENT = "INSERT INTO fleet_events (loop_id, at, generation, kind, data) VALUES (%s, {now}, %s, %s, %s)"
# The one-statement claim (queue.AT_ONCE) with its event: every part of a statement reads the
# rows as they were before it, so ``o`` is the row before the claim (a worker there means its
# lease ran out: a failover).
NOTED_CLAIM = (
    "WITH taken AS ({claim}), noted AS (INSERT INTO fleet_events (loop_id, at, generation, kind, data) "
    "SELECT t.id, t.claimed_at, t.generation, CASE WHEN o.worker IS NULL THEN 'claimed' ELSE 'failover' END, "
    "json_strip_nulls(json_build_object('worker', t.worker, 'host', t.host, 'failovers', t.failovers, "
    "'from_worker', o.worker, 'from_host', CASE WHEN o.worker IS NULL THEN NULL ELSE o.host END))::text "
    "FROM taken t JOIN fleet_loops o ON o.id = t.id) "
    "SELECT * FROM taken"
)


def noted_claim(claim_sql: str) -> str:
    """The claim statement ``claim_sql`` (RETURNING the row) that also records the claim."""
    return NOTED_CLAIM.replace("{claim}", claim_sql)


def add(tx, loop_id: str, generation: int, kind: str, **data) -> None:
    """An event written in ``tx`` (fields that are None left out)."""
    text = jsoncodec.dumps({k: v for k, v in data.items() if v is not None}).decode("utf-8")
    tx.run(EVENT, (loop_id, generation, kind, text))


def holder(tx, loop_id: str) -> dict:
    """The worker and host holding the loop now: read before a change lets go of it."""
    return tx.one("SELECT worker, host FROM fleet_loops WHERE id = %s", (loop_id,)) or {}


def before_claim(row: dict) -> dict:
    """What a claim's event says of the row it takes: the worker whose lease ran out, if any."""
    return {"from_worker": row["worker"], "from_host": row["host"]} if row.get("worker") is not None else {}


def claimed(tx, row: dict, before: dict) -> None:
    """The claim of ``row`` (as taken) recorded: a failover when ``before`` names a worker."""
    kind = "failover" if before else "claimed"
    add(tx, row["id"], row["generation"], kind, worker=row["worker"], host=row["host"],
        failovers=row["failovers"], **before)  # fmt: skip


def requested(tx, row: dict, what: str, reason: str) -> None:
    """A stop or cancel asked of the loop ``row`` (as read before): a loop no worker held ends at
    once (with ``reason``); a running one is told through its worker."""
    idle = row["status"] in ("queued", "waiting_gate")
    add(tx, row["id"], row["generation"], f"{what}_requested", worker=row["worker"], host=row["host"],
        ended=reason if idle else None)  # fmt: skip
