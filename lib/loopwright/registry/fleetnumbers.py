"""The fleet in numbers, for the monitor's metrics (serve/metrics.py): a few aggregate reads per
scrape, whatever the fleet's size, and its iterations' durations read from the timeline once.

Every total is a sum or a count over rows, so it survives a restart of the monitor and agrees
between two monitors: claims are the loops' generations (each claim adds one), iterations their
recorded iterations, failovers their failovers. The durations come from the timeline's iteration
events, read forward from a high-water mark, so a scrape reads only the events that are new."""

from __future__ import annotations

import threading

from loopwright.core.durations import Histogram
from loopwright.registry.limits import day_of
from loopwright.registry.queue import json_value
from loopwright.registry.workers import WORKER_STATES, worker_state

BY_STATUS = (
    "SELECT status, account, COUNT(*) AS n, SUM(iteration) AS iterations, SUM(generation) AS claims, "
    "SUM(failovers) AS failovers FROM fleet_loops GROUP BY status, account"
)
ENDED = "SELECT outcome, COUNT(*) AS n FROM fleet_loops WHERE status = 'ended' GROUP BY outcome"
SPEND = "SELECT scope, dollars FROM fleet_spend WHERE day = %s"
CAPS = "SELECT scope, max_dollars_per_day FROM fleet_limits WHERE max_dollars_per_day IS NOT NULL"
# An event's transaction has surely committed this long after its row was written (a session
# idle in a transaction is ended after 15 s: registry/postgres.py). Until then an event with a
# lower id may still appear, so the high-water mark stops before the first younger event.
SETTLE_SECONDS = 60.0
EVENTS_BATCH = 5000
MAX_EVENT_TEXT = 256 * 1024  # an iteration's line is a few KiB; a longer one is not parsed
EVENTS = (
    "SELECT id, {now} - at AS age, CASE WHEN kind = 'iteration' AND length(data) <= "
    f"{MAX_EVENT_TEXT} THEN data END AS data FROM fleet_events WHERE id > %s ORDER BY id LIMIT %s"
)


def _num(value) -> float:
    """A number the database summed (a Decimal from PostgreSQL's bigint sums, None for none)."""
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def fleet_numbers(registry) -> dict:
    """The fleet now: loops by (status, account) with the totals over them, ended loops by
    outcome, today's spend and the daily caps by scope, and the workers by state with the
    slots of the live ones."""
    with registry.backend.tx() as tx:
        groups = tx.rows(BY_STATUS)
        ended = tx.rows(ENDED)
        day = day_of(tx.one("SELECT {now} AS now")["now"])
        spend = tx.rows(SPEND, (day,))
        caps = tx.rows(CAPS)
    workers = registry.workers()
    states = dict.fromkeys(WORKER_STATES, 0)
    slots = used = 0
    for w in workers:
        state = worker_state(w)
        states[state] += 1
        if state == "alive":
            slots, used = slots + int(_num(w.get("slots"))), used + int(_num(w.get("used")))
    return {
        "loops": [(str(g["status"]), str(g["account"]), int(g["n"])) for g in groups],
        "iterations": sum(_num(g["iterations"]) for g in groups),
        "claims": sum(_num(g["claims"]) for g in groups),
        "failovers": sum(_num(g["failovers"]) for g in groups),
        "gates": sum(int(g["n"]) for g in groups if g["status"] == "waiting_gate"),
        "ended": [(str(r["outcome"]) if r["outcome"] is not None else "", int(r["n"])) for r in ended],
        "spend": {str(r["scope"]): _num(r["dollars"]) for r in spend},
        "caps": {str(r["scope"]): _num(r["max_dollars_per_day"]) for r in caps},
        "workers": states,
        "slots": slots,
        "slots_used": used,
    }


class IterationTail:
    """The durations of every fleet iteration in the timeline: the settled ones kept here and
    read once (past ``mark``, the high-water mark), the young ones read again at each scrape."""

    def __init__(self) -> None:
        self.mark = 0
        self.settled = Histogram()
        self._lock = threading.Lock()

    def read(self, registry) -> Histogram:
        with self._lock:
            young, after, settling = Histogram(), self.mark, True
            while True:
                rows = registry.backend.once(EVENTS, (after, EVENTS_BATCH))
                for row in rows:
                    settling = settling and _num(row["age"]) >= SETTLE_SECONDS
                    into = self.settled if settling else young
                    if row["data"] is not None:
                        into.add_line(json_value(row["data"]))
                    if settling:
                        self.mark = row["id"]
                if len(rows) < EVENTS_BATCH:
                    return self.settled.plus(young)
                after = rows[-1]["id"]
