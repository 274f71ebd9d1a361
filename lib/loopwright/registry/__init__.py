"""The run registry: the monitor's runs and, on a shared database, the fleet's queue.

:func:`open_registry` is the one place that chooses the database: a ``postgresql://`` URL
(``--db`` or ``$LOOPWRIGHT_DATABASE_URL``) means PostgreSQL, a path or nothing the embedded
SQLite file. Everything else asks the returned :class:`Registry` and never which it is.
"""

from __future__ import annotations

from loopwright.registry import migrate
from loopwright.registry.api import Busy, LeaseLost, RegistryError
from loopwright.registry.causes import Causes
from loopwright.registry.faults import Faults
from loopwright.registry.fleetview import FleetView
from loopwright.registry.gateanswers import GateAnswers
from loopwright.registry.items import Items
from loopwright.registry.leases import Leases
from loopwright.registry.limits import Limits
from loopwright.registry.listing import Listing
from loopwright.registry.queue import Queue
from loopwright.registry.runs import LIVE, Runs
from loopwright.registry.url import ENV, chosen
from loopwright.registry.workers import Workers

__all__ = ["ENV", "LIVE", "Busy", "LeaseLost", "Registry", "RegistryError", "open_registry"]


class Registry(Runs, Queue, Leases, Workers, Limits, FleetView, Items, Faults, Listing, GateAnswers, Causes):
    """A registry over one database (see loopwright.registry.backend)."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.path, self.shown = backend.path, backend.shown
        migrate.apply(backend)

    def schema_status(self) -> dict:
        return migrate.status(self.backend)

    def listener(self, channels: tuple[str, ...]):
        """What arrives on ``channels`` (``wait(timeout)`` -> [(channel, payload)]); nothing ever
        on a database without notifications, so callers poll as well."""
        return self.backend.listener(channels)

    def close(self) -> None:
        self.backend.close()


def open_registry(url: str | None = None, *, default: str | None = None) -> Registry:
    """The registry ``url`` names (else $LOOPWRIGHT_DATABASE_URL, else the file ``default``),
    its schema brought up to date. RegistryError, one line, when it cannot be used."""
    kind, where = chosen(url, default)
    if kind == "postgres":
        from loopwright.registry.postgres import PostgresBackend

        return Registry(PostgresBackend(where))
    from loopwright.registry.sqlite import SQLiteBackend

    return Registry(SQLiteBackend(where))
