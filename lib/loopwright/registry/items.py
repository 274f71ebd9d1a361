"""The items of a backlog several fleet loops share (`submit work --parallel N`): which loop works
which item, as rows unique by (backlog, item). An item is claimed once across the fleet by this
key, never by a label race on GitHub.

A loop's worker reserves its next items before the loop can pick them: the loop's Stop hook never
talks to the database, it reads the list its worker wrote (fleet/items.py). A 'reserved' item goes
back when its loop ends (release_items; and a reserver takes over the reservations of a loop whose
row says ended, so a loop ended while no worker drove it frees its items too). A 'done' item, one
the loop took, stays the loop's for good: work begun on it is never begun again elsewhere. Every
write names the claim's generation (queue.fenced): a worker that lost the loop reserves nothing.
"""

from __future__ import annotations

from loopwright.registry.queue import fenced

RESERVED, DONE = "reserved", "done"
MAX_KEY = 300  # characters of a backlog key or an item id
MAX_CANDIDATES = 10_000
MAX_WANT = 64
CHUNK = 500  # ids per IN (…) list
ITEMS_LOCK = 0x6974656D  # "item": with the backlog's hash, the advisory lock of one backlog's reservers
# The loop holding a row is gone: ended, or no such loop.
HOLDER_GONE = (
    "NOT EXISTS (SELECT 1 FROM fleet_loops l WHERE l.id = fleet_items.loop_id AND l.status <> 'ended')"
)
HOLDERS = (
    f"SELECT item, loop_id, state, CASE WHEN {HOLDER_GONE} THEN 1 ELSE 0 END AS gone "
    "FROM fleet_items WHERE backlog = %s"
)
INSERT = (
    "INSERT INTO fleet_items (backlog, item, loop_id, state, at) VALUES (%s, %s, %s, 'reserved', {now}) "
    "ON CONFLICT (backlog, item) DO NOTHING"
)
TAKE_OVER = (
    "UPDATE fleet_items SET loop_id = %s, at = {now} WHERE backlog = %s AND item = %s AND loop_id = %s "
    f"AND state = 'reserved' AND {HOLDER_GONE}"
)


def _text(value, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_KEY or not value.isprintable():
        raise ValueError(f"{what} must be printable text of 1-{MAX_KEY} characters, not {value!r}")
    return value


def _items(items) -> list[str]:
    """The ids, checked, each once, in the order given."""
    if not isinstance(items, (list, tuple)) or len(items) > MAX_CANDIDATES:
        raise ValueError(f"items come as a list of at most {MAX_CANDIDATES}")
    return list(dict.fromkeys(_text(i, "an item") for i in items))


class Items:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def reserve(self, loop_id: str, generation: int, backlog: str, candidates, want: int) -> list[str]:
        """Reserves items of ``backlog`` for the loop from ``candidates`` (the items it could take
        next, in the order it takes them), skipping those another loop holds or took, until the
        loop holds ``want`` of the candidates not taken yet; every item the loop holds after
        (reserved or done). Fenced: LeaseLost when this claim no longer stands."""
        _text(backlog, "a backlog key")
        items = _items(candidates)
        if type(want) is not int or not 0 <= want <= MAX_WANT:
            raise ValueError(f"want must be a whole number from 0 to {MAX_WANT}")
        with self.backend.tx() as tx:
            fenced(tx, loop_id, generation)
            self._lock_backlog(tx, backlog)
            rows = {r["item"]: r for r in tx.rows(HOLDERS, (backlog,))}
            mine = {i for i, r in rows.items() if r["loop_id"] == loop_id and r["state"] == RESERVED}
            held = sum(1 for i in items if i in mine)
            for item in items:
                if held >= want:
                    break
                row = rows.get(item)
                if row is None:
                    held += tx.run(INSERT, (backlog, item, loop_id))
                elif row["loop_id"] != loop_id and row["state"] == RESERVED and row["gone"]:
                    held += tx.run(TAKE_OVER, (loop_id, backlog, item, row["loop_id"]))
            return self._of(tx, backlog, loop_id)

    def _lock_backlog(self, tx, backlog: str) -> None:
        """One reserver of a backlog at a time, so two never wait on each other's rows (a
        deadlock): on PostgreSQL a lock for the transaction; SQLite's writes are one at a time."""
        if self.backend.dialect == "postgres":
            tx.rows("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (ITEMS_LOCK, backlog))

    @staticmethod
    def _of(tx, backlog: str, loop_id: str) -> list[str]:
        rows = tx.rows(
            "SELECT item FROM fleet_items WHERE backlog = %s AND loop_id = %s ORDER BY at, item",
            (backlog, loop_id),
        )
        return [r["item"] for r in rows]

    def held(self, backlog: str) -> dict[str, str]:
        """Every item of ``backlog`` a loop holds or took: item -> the loop's id."""
        _text(backlog, "a backlog key")
        with self.backend.tx() as tx:
            rows = tx.rows(
                "SELECT item, loop_id FROM fleet_items WHERE backlog = %s ORDER BY item", (backlog,)
            )
        return {r["item"]: r["loop_id"] for r in rows}

    def item_states(self, backlog: str) -> list[dict]:
        """The rows of ``backlog`` (item, loop_id, state, at), by item."""
        _text(backlog, "a backlog key")
        with self.backend.tx() as tx:
            return tx.rows(
                "SELECT item, loop_id, state, at FROM fleet_items WHERE backlog = %s ORDER BY item",
                (backlog,),
            )

    def mark_done(self, loop_id: str, generation: int, backlog: str, items) -> int:
        """The loop took ``items`` (those it holds): they stay its own for good, and no longer
        count among the items reserved ahead for it. How many changed. Fenced."""
        _text(backlog, "a backlog key")
        items = _items(items)
        changed = 0
        with self.backend.tx() as tx:
            fenced(tx, loop_id, generation)
            for at in range(0, len(items), CHUNK):
                part = items[at : at + CHUNK]
                changed += tx.run(
                    "UPDATE fleet_items SET state = 'done', at = {now} WHERE backlog = %s AND loop_id = %s "
                    f"AND state = 'reserved' AND item IN ({', '.join('%s' for _ in part)})",
                    (backlog, loop_id, *part),
                )
        return changed

    def release_items(self, loop_id: str) -> int:
        """The items reserved for a loop that ended go back to the backlog (those it took stay
        its own); nothing while the loop has not ended. How many went back."""
        with self.backend.tx() as tx:
            return tx.run(
                f"DELETE FROM fleet_items WHERE loop_id = %s AND state = 'reserved' AND {HOLDER_GONE}",
                (loop_id,),
            )
