"""Bringing a registry's schema up to date at open, once, however many processes open it.

On PostgreSQL the steps run under a transaction-scoped advisory lock, so two machines that
start together migrate once (the second waits, then finds nothing left to do); on SQLite the
write transaction is exclusive already. A registry newer than this loopwright is refused with
one line rather than written in a shape it does not know.
"""

from __future__ import annotations

from loopwright.registry.api import RegistryError
from loopwright.registry.migrations import STEPS, sql_for

LOCK_KEY = 0x6C6F6F70  # "loop": the advisory lock every loopwright migration takes
VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at {real} NOT NULL
)
"""


def latest() -> int:
    return STEPS[-1][0]


def apply(backend) -> list[int]:
    """Apply the steps this registry lacks; the versions applied."""
    done = []
    with backend.tx() as tx:
        if backend.dialect == "postgres":
            tx.rows("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        tx.script(sql_for(VERSION_TABLE, backend.dialect))
        have = {r["version"] for r in tx.rows("SELECT version FROM schema_version")}
        if have and max(have) > latest():
            raise RegistryError(
                f"the registry {backend.shown} has schema version {max(have)}, newer than this loopwright "
                f"knows ({latest()}): upgrade loopwright on this machine"
            )
        for version, name, sql, step in STEPS:
            if version in have:
                continue
            tx.script(sql_for(sql, backend.dialect))
            if step is not None:
                step(tx, backend.dialect)
            record = "INSERT INTO schema_version (version, name, applied_at) VALUES (%s, %s, {now})"
            tx.run(record, (version, name))
            done.append(version)
    return done


def status(backend) -> dict:
    """The registry's schema: its version, the latest this loopwright knows, each step applied."""
    with backend.tx() as tx:
        rows = tx.rows("SELECT version, name, applied_at FROM schema_version ORDER BY version")
    return {
        "database": backend.dialect,
        "where": backend.shown,
        "version": rows[-1]["version"] if rows else 0,
        "latest": latest(),
        "steps": rows,
    }
