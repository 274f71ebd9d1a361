"""A worker's leases, renewed together: one statement per worker beat, however many loops it holds.

A claim is still a lease with a generation (registry/queue.py), but its renewal belongs to the
worker: every ``heartbeat`` seconds the worker names the (loop, generation) pairs it holds and
one UPDATE renews each whose generation is still that one and whose claim still stands. A claim
another worker took since (a newer generation), or one released or ended, is not renewed and is
left out of the answer: the worker tells that loop's slot its claim is gone. The database's work
per beat interval grows with workers, not loops; a worker that dies stops renewing all of its
leases at once, so they run out together. The renewal writes the lease alone (not updated_at):
a loop's row changes only at its boundaries, and a monitor sees no news in a renewal.
"""

from __future__ import annotations

from loopwright.registry.queue import HELD

# The pairs come as two arrays (PostgreSQL) or a VALUES list (SQLite): one statement either way.
RENEW_PG = (
    "UPDATE fleet_loops SET lease_expires = {now} + %s "
    "FROM unnest(%s::text[], %s::integer[]) AS c(id, generation) "
    "WHERE fleet_loops.id = c.id AND fleet_loops.generation = c.generation AND " + HELD + " "
    "RETURNING fleet_loops.id, fleet_loops.control"
)
RENEW_SQLITE = (
    "UPDATE fleet_loops SET lease_expires = {now} + %s WHERE (id, generation) IN (VALUES {pairs}) "
    "AND " + HELD + " RETURNING id, control"
)
MAX_PAIRS = 500  # pairs per statement on SQLite (its limit on parameters); a worker holds few


class Leases:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def renew_claims(self, claims, lease=30.0) -> dict[str, str | None]:
        """Renews for ``lease`` seconds more each claim in ``claims`` ((loop id, generation)
        pairs) that still stands; {loop id: its pending control (stop, cancel or None)} for
        those. A pair missing from the answer is a claim this worker no longer holds."""
        pairs = [(str(i), int(g)) for i, g in claims]
        if not pairs:
            return {}
        if self.backend.dialect == "postgres":
            ids, gens = [i for i, _ in pairs], [g for _, g in pairs]
            rows = self.backend.once(RENEW_PG, (float(lease), ids, gens))
            return {r["id"]: r["control"] for r in rows}
        held: dict[str, str | None] = {}
        for at in range(0, len(pairs), MAX_PAIRS):
            part = pairs[at : at + MAX_PAIRS]
            sql = RENEW_SQLITE.replace("{pairs}", ", ".join("(%s, %s)" for _ in part))
            rows = self.backend.once(sql, (float(lease), *(v for p in part for v in p)))
            held.update({r["id"]: r["control"] for r in rows})
        return held
