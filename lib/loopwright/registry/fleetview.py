"""What a monitor reads to show the fleet: the queue's counts, and a mark that changes whenever
something the page shows changes.

A monitor is told of most changes by NOTIFY (queue.py's channels); the mark is its slow poll
for the rest (claims, workers joining or taking a slot, a pause running out) and its only source
on a database without notifications. It leaves out what changes on every heartbeat (a lease's
end, ``updated_at``, a worker's beat time: the page ages beats itself), so that a running fleet
does not look changed every few seconds.
"""

from __future__ import annotations

from loopwright.core import jsoncodec
from loopwright.core.attention import STALE_AFTER, STOPPED_AFTER, failure_sql
from loopwright.registry.listing import listed_row
from loopwright.registry.queue import json_value, loop_row

STATUSES = ("queued", "running", "waiting_gate", "ended")

_COUNT = ", ".join(f"SUM(CASE WHEN status = '{s}' THEN 1 ELSE 0 END) AS {s}" for s in STATUSES)
MARK = (
    "SELECT (SELECT COUNT(*) FROM fleet_loops) AS loops, "
    "(SELECT COALESCE(MAX(seq), 0) FROM fleet_loops) AS newest, "
    f"{_COUNT}, SUM(generation) AS claims, SUM(iteration) AS iterations, SUM(dollars) AS dollars, "
    "COUNT(control) AS controls, COUNT(gate) AS gates, COUNT(outcome) AS outcomes, "
    "(SELECT COALESCE(MAX(id), 0) FROM fleet_events) AS events, "
    "(SELECT COUNT(*) FROM fleet_workers) AS workers, "
    "(SELECT COALESCE(SUM(used), 0) FROM fleet_workers) AS used, "
    "(SELECT COALESCE(SUM(slots), 0) FROM fleet_workers) AS slots, "
    "(SELECT MAX(started_at) FROM fleet_workers) AS started, "
    "(SELECT COUNT(*) FROM fleet_limits) AS limits, "
    "(SELECT MAX(updated_at) FROM fleet_limits) AS limits_at, "
    "(SELECT COUNT(*) FROM account_pauses WHERE until > {now}) AS pauses, "
    "(SELECT MAX(at) FROM account_pauses) AS paused_at, "
    "(SELECT COALESCE(SUM(dollars), 0) FROM fleet_spend) AS spend, "
    # A worker going quiet changes what the page says of it (and of the loops it could take).
    f"(SELECT COUNT(*) FROM fleet_workers WHERE {{now}} - beat_at >= {STALE_AFTER}) AS stale, "
    f"(SELECT COUNT(*) FROM fleet_workers WHERE {{now}} - beat_at >= {STOPPED_AFTER}) AS gone "
    "FROM fleet_loops"
)
FAILED = failure_sql()
COUNTS = (
    f"SELECT status, COUNT(*) AS n, SUM(CASE WHEN status = 'ended' AND {FAILED} THEN 1 ELSE 0 END) AS failed "
    "FROM fleet_loops GROUP BY status"
)
# The loops a page holds, most pressing first, each part read in the order of an index (status,
# created_at): the held ones (oldest first), the newest failures, the queue's head (the loops
# claimed next, and those stuck), then the newest of the rest.
PAGE_PARTS = (
    "WHERE status IN ('waiting_gate', 'running') ORDER BY created_at, seq",
    f"WHERE status = 'ended' AND {FAILED} ORDER BY created_at DESC, seq DESC",
    "WHERE status = 'queued' ORDER BY created_at, seq",
    f"WHERE status = 'ended' AND NOT {FAILED} ORDER BY created_at DESC, seq DESC",
)
FAILURES_SHOWN = 0.2  # of the rows a page holds, at most this share for failures
# Why a queued loop waits depends on its account, tags, repository and verify only
# (core/attention.Queue): the whole queue in a few groups, however many loops it holds beyond
# the ones a page lists. On PostgreSQL the verify is found in the spec's text by a pattern that
# never fails on text that is not JSON (a cast would, and a hand-written row would then break
# the page): a top-level "verify" member follows "{" or "," outside any string (a quote inside
# one is escaped), and its value is a JSON string or a bare word, decoded here.
VERIFY_MEMBER = r'[{,]"verify":\s*("(?:[^"\\]|\\.)*"|[^,}\s]+)'
QUEUED_GROUPS = {
    "postgres": (
        # strpos first: a plain search skips the pattern for the specs with no verify at all.
        "SELECT account, tags, repo, "
        "CASE WHEN strpos(spec, '\"verify\"') > 0 THEN substring(spec from %s) END AS verify, "
        "COUNT(*) AS n FROM fleet_loops "
        "WHERE status = 'queued' GROUP BY 1, 2, 3, 4"
    ),
    # The embedded database (one machine's queue): each spec read and parsed here.
    "sqlite": "SELECT account, tags, repo, spec FROM fleet_loops WHERE status = 'queued'",
}


def _verify_text(spec) -> str | None:
    """The spec's verify as JSON text (as PostgreSQL's pattern finds it), None for none."""
    value = json_value(spec) if isinstance(spec, str) else None
    verify = value.get("verify") if isinstance(value, dict) else None
    return None if verify is None else jsoncodec.dumps(verify).decode()


class FleetView:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def queue_counts(self) -> dict:
        """How many fleet loops are in each status (every status named, 0 when none)."""
        with self.backend.tx() as tx:
            rows = tx.rows("SELECT status, COUNT(*) AS n FROM fleet_loops GROUP BY status")
        counts = dict.fromkeys(STATUSES, 0)
        for row in rows:  # a status someone wrote by hand is counted under its own name
            counts[str(row["status"])] = int(row["n"])
        return counts

    def fleet_counts(self) -> dict:
        """:meth:`queue_counts`, and ``failed``: the ended loops whose outcome is a failure
        (core/attention.py says which)."""
        with self.backend.tx() as tx:
            rows = tx.rows(COUNTS)
        counts = dict.fromkeys((*STATUSES, "failed"), 0)
        for row in rows:
            counts[str(row["status"])] = int(row["n"])
            counts["failed"] += int(row["failed"] or 0)
        return counts

    def queued_groups(self) -> list[dict]:
        """The queue by what decides whether a worker takes a loop: ``account``, ``tags``,
        ``repo`` and ``spec`` (its ``verify`` only), with ``n`` loops each."""
        dialect = self.backend.dialect
        with self.backend.tx() as tx:
            if dialect == "postgres":
                rows = tx.rows(QUEUED_GROUPS[dialect], (VERIFY_MEMBER,))
            else:
                rows = [
                    dict(r, verify=_verify_text(r.pop("spec")), n=1) for r in tx.rows(QUEUED_GROUPS[dialect])
                ]
        groups: dict = {}
        for r in rows:
            verify = json_value(r["verify"]) if isinstance(r["verify"], str) else None
            key = (r["account"], r["tags"], r["repo"], jsoncodec.dumps(verify))
            if key not in groups:
                spec = {"verify": verify} if verify is not None else {}
                groups[key] = {
                    "account": r["account"],
                    "tags": json_value(r["tags"]),
                    "repo": r["repo"],
                    "spec": spec,
                    "n": 0,
                }
            groups[key]["n"] += int(r["n"])
        return list(groups.values())

    def page_loops(self, limit: int = 500) -> list[dict]:
        """At most ``limit`` loops, most pressing first (PAGE_PARTS): every held loop the
        limit has room for, failures up to a fifth of it, then the queue and the rest."""
        out: list[dict] = []
        columns = self.listed_columns()  # before the transaction: the first call reads the table
        with self.backend.tx() as tx:
            if self.backend.dialect == "postgres":
                # One snapshot for every part: under READ COMMITTED each statement reads the
                # table anew, and a loop whose status changed between two parts was listed
                # twice (a gate answered: "needs an answer" and "stuck" at once) or not at all.
                tx.run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            for part in PAGE_PARTS:
                room = limit - len(out)
                if part is PAGE_PARTS[1]:
                    room = min(room, max(1, int(limit * FAILURES_SHOWN)))
                if room > 0:
                    sql = f"SELECT {columns} FROM fleet_loops {part} LIMIT %s"
                    out += [listed_row(r, loop_row) for r in tx.rows(sql, (room,))]
        return out

    def fleet_mark(self) -> tuple:
        """A value that differs whenever what the monitor's page shows of the fleet changed."""
        with self.backend.tx() as tx:
            row = tx.one(MARK)
        return tuple(row.values()) if row else ()
