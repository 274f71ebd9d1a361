"""What the registry's stores need of a database: transactions with SQL written once.

SQL is written with ``%s`` placeholders and ``{now}`` for the database's clock in epoch
seconds (the one clock every machine of a fleet agrees on). Each backend turns it into its
own dialect; the stores above never ask which one they talk to.
"""

from __future__ import annotations


class Tx:
    """One transaction's cursor: rows as dicts."""

    def __init__(self, cursor, render) -> None:
        self._cur, self._render = cursor, render

    def rows(self, sql: str, args: tuple = ()) -> list[dict]:
        self._cur.execute(self._render(sql), args)
        if self._cur.description is None:
            return []
        names = [d[0] for d in self._cur.description]
        return [r if isinstance(r, dict) else dict(zip(names, r)) for r in self._cur.fetchall()]

    def one(self, sql: str, args: tuple = ()) -> dict | None:
        rows = self.rows(sql, args)
        return rows[0] if rows else None

    def run(self, sql: str, args: tuple = ()) -> int:
        """Execute; the number of rows changed."""
        self._cur.execute(self._render(sql), args)
        return self._cur.rowcount

    def script(self, sql: str) -> None:
        """Several statements, no arguments (a migration)."""
        for statement in (s.strip() for s in sql.split(";")):
            if statement:
                self._cur.execute(self._render(statement))


class Backend:
    """A database. Subclasses give ``dialect``, ``NOW`` and the transaction."""

    dialect = ""
    NOW = ""
    path: str | None = None
    shown = ""

    def render(self, sql: str) -> str:
        return sql.replace("{now}", self.NOW)

    def tx(self):  # pragma: no cover - interface
        """A context manager: a Tx inside one transaction, committed on success."""
        raise NotImplementedError

    def once(self, sql: str, args: tuple = ()) -> list[dict]:
        """One statement in a transaction of its own; its rows (one round trip where the
        database allows)."""
        with self.tx() as tx:
            return tx.rows(sql, args)

    def row_fault(self, exc: BaseException) -> str | None:
        """What was wrong with the row a statement read or wrote, when ``exc`` is the row's
        fault (a value out of range, a constraint it breaks: that row's writer's doing, the next
        row would do), in one line; None for anything else (the database went away, a bug)."""
        return None

    def notify(self, tx: Tx, channel: str, payload: str = "") -> None:
        """Tell listeners on ``channel`` when ``tx`` commits (nothing where there are none)."""

    def listener(self, channels: tuple[str, ...]):
        """An object whose ``wait(timeout)`` returns the notifications that arrived (a list of
        (channel, payload)), or [] after ``timeout`` seconds. Callers poll as well: a
        notification may be lost, and the embedded database has none."""
        return _NoListener()

    def close(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class _NoListener:
    def __init__(self) -> None:
        import threading

        self._closed = threading.Event()

    def wait(self, timeout: float) -> list:
        self._closed.wait(timeout)
        return []

    def close(self) -> None:
        self._closed.set()
