"""What a monitor reads to show the fleet: the queue's counts, and a mark that changes whenever
something the page shows changes.

A monitor is told of most changes by NOTIFY (queue.py's channels); the mark is its slow poll
for the rest (claims, workers joining or taking a slot, a pause running out) and its only source
on a database without notifications. It leaves out what changes on every heartbeat (a lease's
end, ``updated_at``, a worker's beat time: the page ages beats itself), so that a running fleet
does not look changed every few seconds.
"""

from __future__ import annotations

from loopwright.core.jsonhead import object_head

# What a list reads of each row (`fleet ls`, the page): a row's text is whatever its writer put
# there, so no column is read whole. The spec's first characters hold its limits and its goal's
# first line (json_text writes the goal after the limits); other text columns are read whole
# up to a size no loopwright writes. A column read in part is named in the row's ``cut``.
LIST_SPEC = 4000
LIST_TEXT = 16_384
TEXT_TYPES = ("text", "character varying", "character")

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
    "(SELECT COALESCE(SUM(dollars), 0) FROM fleet_spend) AS spend "
    "FROM fleet_loops"
)


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

    def fleet_mark(self) -> tuple:
        """A value that differs whenever what the monitor's page shows of the fleet changed."""
        with self.backend.tx() as tx:
            row = tx.one(MARK)
        return tuple(row.values()) if row else ()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def listed_row(row: dict, decode) -> dict:
    """A row as a list read it (see LIST_SPEC), through ``decode`` (queue.loop_row): a column
    cut short is named in ``cut``; a JSON column cut short reads as None, except the spec, whose
    first members are kept (jsonhead.object_head)."""
    cut = [
        k for k, v in row.items() if isinstance(v, str) and len(v) > (LIST_SPEC if k == "spec" else LIST_TEXT)
    ]
    head = row.get("spec") if "spec" in cut else None
    out = decode({k: (v[:LIST_TEXT] if k in cut and k != "spec" else v) for k, v in row.items()})
    if head is not None:
        out["spec"] = object_head(head[:LIST_SPEC])
    out["cut"] = cut
    return out


class Listing:
    """The columns a list reads, each bounded: found once per registry from the table itself,
    so that a column added later is listed too."""

    def listed_columns(self) -> str:
        memo = self.__dict__.get("_listed_columns")
        if memo is None:
            memo = self.__dict__["_listed_columns"] = ", ".join(self._bounded(*c) for c in self._columns())
        return memo

    def _columns(self) -> list[tuple[str, bool]]:
        """(name, whether it may hold text) of each fleet_loops column."""
        with self.backend.tx() as tx:
            if self.backend.dialect == "postgres":
                rows = tx.rows(
                    "SELECT column_name AS name, data_type AS type FROM information_schema.columns "
                    "WHERE table_name = 'fleet_loops' AND table_schema = current_schema() "
                    "ORDER BY ordinal_position"
                )
                return [(r["name"], r["type"] in TEXT_TYPES) for r in rows]
            return [(r["name"], True) for r in tx.rows("PRAGMA table_info(fleet_loops)")]  # any column may

    def _bounded(self, name: str, text: bool) -> str:
        col = _quoted(name)
        if not text:
            return col
        size = (LIST_SPEC if name == "spec" else LIST_TEXT) + 1  # one more: to know it was cut
        if self.backend.dialect == "postgres":
            return f"substr({col}, 1, {size}) AS {col}"
        part = f"substr({col}, 1, {size})"
        return f"CASE WHEN typeof({col}) IN ('text', 'blob') THEN {part} ELSE {col} END AS {col}"
