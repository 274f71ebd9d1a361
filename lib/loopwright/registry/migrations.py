"""The registry's schema, as numbered steps. A step is applied once, in order, and recorded in
``schema_version``; a released step is never edited, only followed by a new one.

Types are written for both databases: ``{real}`` is a double on either, text holds JSON.
"""

from __future__ import annotations

RUNS = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    project TEXT NOT NULL,
    loop TEXT,
    task_dir TEXT,
    status TEXT NOT NULL,
    pid INTEGER,
    pid_started {real},
    max_iterations INTEGER,
    max_minutes {real},
    iteration INTEGER NOT NULL DEFAULT 0,
    last_signal_at TEXT,
    stall_count INTEGER NOT NULL DEFAULT 0,
    last_capture_hash TEXT,
    quota_wait_started TEXT,
    outcome TEXT,
    reason TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS notified (key TEXT PRIMARY KEY, at TEXT NOT NULL)
"""


def _runs_pid_started(tx, dialect: str) -> None:
    """A SQLite registry made before runners' create times were kept lacks the column."""
    if dialect == "sqlite":
        have = {r["name"] for r in tx.rows("PRAGMA table_info(runs)")}
        if "pid_started" not in have:
            tx.run("ALTER TABLE runs ADD COLUMN pid_started REAL")


# (version, name, SQL, then a step in Python or None)
STEPS = [
    (1, "runs", RUNS, _runs_pid_started),
]


def sql_for(sql: str, dialect: str) -> str:
    return sql.replace("{real}", "DOUBLE PRECISION" if dialect == "postgres" else "REAL")
