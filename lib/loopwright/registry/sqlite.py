"""The embedded registry: one SQLite file in WAL mode, for one machine."""

from __future__ import annotations

import contextlib
import sqlite3
import threading

from loopwright.registry.api import RegistryError
from loopwright.registry.backend import Backend, Tx


class SQLiteBackend(Backend):
    dialect = "sqlite"
    NOW = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(self, path: str) -> None:
        try:
            self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as exc:
            raise RegistryError(f"cannot open the registry {path}: {exc}; check the path and its permissions")
        self.path = self.shown = path
        self.lock = threading.RLock()  # one connection, shared by the server's threads

    def render(self, sql: str) -> str:
        return super().render(sql).replace("%s", "?")

    @contextlib.contextmanager
    def tx(self):
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")  # writers queue here: a claim is exclusive
            try:
                yield Tx(self.db.cursor(), self.render)
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def row_fault(self, exc: BaseException) -> str | None:
        # A constraint the row breaks, or a value SQLite cannot hold (a 64-bit overflow).
        if isinstance(exc, (sqlite3.IntegrityError, sqlite3.DataError, OverflowError)):
            return f"{type(exc).__name__}: {str(exc).strip()[:200]}"
        return None

    def close(self) -> None:
        self.db.close()
