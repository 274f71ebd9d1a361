"""The fleet in numbers, for the monitor's metrics (serve/metrics.py): a few aggregate reads per
scrape, whatever the fleet's size, and its iterations' durations read from the timeline once.

Every total is a sum or a count over rows, so it survives a restart of the monitor and agrees
between two monitors: claims are the loops' generations (each claim adds one), iterations their
recorded iterations, failovers their failovers. The durations come from the timeline's iteration
events, read forward from a high-water mark, so a scrape reads only the events that are new."""

from __future__ import annotations

import threading

from loopwright.core.attention import went_quiet
from loopwright.core.durations import NO_ITERATION, Histogram, iteration_of
from loopwright.registry import reservations
from loopwright.registry.limits import day_of, scopes_of
from loopwright.registry.queue import json_value
from loopwright.registry.workers import WORKER_STATES, worker_state

# One read of the loops: by status, account and (for the ended ones) outcome, with the sums.
BY_STATUS = (
    "SELECT status, account, CASE WHEN status = 'ended' THEN outcome END AS outcome, COUNT(*) AS n, "
    "SUM(iteration) AS iterations, SUM(generation) AS claims, SUM(failovers) AS failovers "
    "FROM fleet_loops GROUP BY status, account, CASE WHEN status = 'ended' THEN outcome END"
)
SPEND = "SELECT scope, dollars FROM fleet_spend WHERE day = %s"
CAPS = "SELECT scope, max_dollars_per_day FROM fleet_limits WHERE max_dollars_per_day IS NOT NULL"
# An event's transaction has surely committed this long after its row was written (a session
# idle in a transaction is ended after 15 s: registry/postgres.py). Until then an event with a
# lower id may still appear, so the high-water mark stops before the first younger event.
SETTLE_SECONDS = 60.0
EVENTS_BATCH = 5000
MAX_EVENT_TEXT = 256 * 1024  # an iteration's line is a few KiB; a longer one is not parsed
# Every event past the mark: its age, and the text of an iteration's line the tail has not read yet
# (past ``seen``). A young event's reading is kept, so a scrape parses each line once.
READ = f"id > %s AND length(data) <= {MAX_EVENT_TEXT}"
EVENTS = (
    f"SELECT id, {{now}} - at AS age, CASE WHEN kind <> 'iteration' THEN 0 WHEN {READ} THEN 1 ELSE 2 END "
    f"AS what, CASE WHEN kind = 'iteration' AND {READ} THEN data END AS data FROM fleet_events "
    "WHERE id > %s ORDER BY id LIMIT %s"
)
LATE = (
    f"SELECT id, CASE WHEN length(data) <= {MAX_EVENT_TEXT} THEN data END AS data FROM fleet_events "
    "WHERE id IN ({ids})"
)


def _num(value) -> float:
    """A number the database summed (a Decimal from PostgreSQL's bigint sums, None for none);
    0 for one below 0 or none at all (whoever writes a row can write any value)."""
    try:
        number = float(value or 0)
    except (TypeError, ValueError):
        return 0.0
    return number if number >= 0 else 0.0


def fleet_numbers(registry) -> dict:
    """The fleet now: loops by (status, account) with the totals over them, ended loops by
    outcome, today's spend, the daily caps and what running loops hold against them by scope,
    and the workers by state with the slots of the live ones."""
    with registry.backend.tx() as tx:
        groups = tx.rows(BY_STATUS)
        day = day_of(tx.one("SELECT {now} AS now")["now"])
        spend = tx.rows(SPEND, (day,))
        caps = tx.rows(CAPS)
        running = reservations.by_scope(tx, scopes_of)
    workers = registry.workers()
    states = dict.fromkeys(WORKER_STATES, 0)
    quiet = sum(1 for w in workers if went_quiet(w))
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
        "ended": _ended(groups),
        "spend": {str(r["scope"]): _num(r["dollars"]) for r in spend},
        "caps": {str(r["scope"]): _num(r["max_dollars_per_day"]) for r in caps},
        # What running loops hold against each dollar cap (and the fleet's, capped or not).
        "held": {
            s: _num((running.get(s) or {}).get("held")) for s in {"fleet", *(str(r["scope"]) for r in caps)}
        },
        "workers": states,
        "quiet": quiet,
        "slots": slots,
        "slots_used": used,
    }


def _ended(groups: list[dict]) -> dict:
    """Ended loops by outcome ("" for none recorded)."""
    out: dict = {}
    for g in groups:
        if g["status"] == "ended":
            outcome = "" if g["outcome"] is None else str(g["outcome"])
            out[outcome] = out.get(outcome, 0) + int(g["n"])
    return out


class IterationTail:
    """The durations of every fleet iteration in the timeline: the settled ones summed here and
    never read again (up to ``mark``, the high-water mark), the young ones' readings kept by id
    (``young``) and summed afresh at each scrape, until they settle."""

    def __init__(self) -> None:
        self.mark = 0  # every event up to it is in ``settled``
        self.seen = 0  # every event up to it past the mark has its reading in ``young``
        self.settled = Histogram()
        self.young: dict[int, object] = {}  # event id -> iteration_of its line
        self._lock = threading.Lock()

    def read(self, registry) -> Histogram:
        with self._lock:
            after, settling = self.mark, True
            while True:
                rows = registry.backend.once(EVENTS, (self.seen, self.seen, after, EVENTS_BATCH))
                readings = self._readings(registry, rows)
                for row in rows:
                    settling = settling and _num(row["age"]) >= SETTLE_SECONDS
                    reading = readings.get(row["id"], NO_ITERATION)
                    if settling:
                        self.settled.add_iteration(reading)
                        self.mark = row["id"]
                        self.young.pop(row["id"], None)
                    else:
                        self.young[row["id"]] = reading
                    self.seen = max(self.seen, row["id"])
                if len(rows) < EVENTS_BATCH:
                    break
                after = rows[-1]["id"]
            young = Histogram()
            for reading in self.young.values():
                young.add_iteration(reading)
            return self.settled.plus(young)

    def _readings(self, registry, rows: list[dict]) -> dict:
        """Each row's iteration_of: read from its text, kept from an earlier scrape, or (an
        iteration event that came in below ``seen``: committed late) read now."""
        out, late = {}, []
        for row in rows:
            if row["what"] == 1:
                out[row["id"]] = iteration_of(json_value(row["data"]))
            elif row["id"] in self.young:
                out[row["id"]] = self.young[row["id"]]
            elif row["what"] == 2 and row["id"] <= self.seen:
                late.append(int(row["id"]))
        if late:
            sql = LATE.replace("{ids}", ", ".join(str(i) for i in late))
            for row in registry.backend.once(sql):
                out[row["id"]] = iteration_of(json_value(row["data"]))
        return out
