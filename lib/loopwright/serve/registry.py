"""The monitor's run registry: one row per headless run it started (the ai-cli-task
seed's ``task_auto`` table, for every mode). SQLite in WAL mode, behind this one class,
with plain portable SQL: a later step puts the same table on PostgreSQL for teams that
run loops on many machines."""

from __future__ import annotations

import sqlite3
import threading
import uuid

from loopwright.core.clock import now_iso

LIVE = ("starting", "running", "waiting_quota")
FIELDS = (
    "id",
    "session",
    "project",
    "loop",
    "task_dir",
    "status",
    "pid",
    "pid_started",
    "max_iterations",
    "max_minutes",
    "iteration",
    "last_signal_at",
    "stall_count",
    "last_capture_hash",
    "quota_wait_started",
    "outcome",
    "reason",
    "created_at",
    "updated_at",
)
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    project TEXT NOT NULL,
    loop TEXT,
    task_dir TEXT,
    status TEXT NOT NULL,
    pid INTEGER,
    pid_started REAL,
    max_iterations INTEGER,
    max_minutes REAL,
    iteration INTEGER NOT NULL DEFAULT 0,
    last_signal_at TEXT,
    stall_count INTEGER NOT NULL DEFAULT 0,
    last_capture_hash TEXT,
    quota_wait_started TEXT,
    outcome TEXT,
    reason TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)
"""
# Events the monitor's --notify has told (loop ended, gate waiting): each one once, also
# across restarts; the row "#since" holds when notifying began (older events are not news).
NOTIFIED = "CREATE TABLE IF NOT EXISTS notified (key TEXT PRIMARY KEY, at TEXT NOT NULL)"


class Busy(Exception):
    """A live run already holds this session or task directory."""


class Registry:
    def __init__(self, path: str):
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(SCHEMA)
        self.db.execute(NOTIFIED)
        have = {r[1] for r in self.db.execute("PRAGMA table_info(runs)")}
        if "pid_started" not in have:  # a registry made before runners' create times were kept
            self.db.execute("ALTER TABLE runs ADD COLUMN pid_started REAL")
        self.path = path
        self.lock = threading.Lock()  # one connection, shared by the server's threads

    def _rows(self, sql: str, args: tuple = ()) -> list[dict]:
        with self.lock:
            cur = self.db.execute(f"SELECT {', '.join(FIELDS)} FROM runs {sql}", args)
            return [dict(zip(FIELDS, r)) for r in cur.fetchall()]

    def add(self, session: str, project: str, task_dir: str | None = None, **limits) -> dict:
        """A new live run; Busy when a live run already has this session or task directory."""
        now = now_iso()
        row = dict.fromkeys(FIELDS)
        row.update(id=uuid.uuid4().hex[:12], session=session, project=project, task_dir=task_dir)
        row.update(status="starting", iteration=0, stall_count=0, created_at=now, updated_at=now, **limits)
        marks = ", ".join("?" for _ in FIELDS)
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                live = ", ".join(f"'{s}'" for s in LIVE)
                clash = self.db.execute(
                    f"SELECT id FROM runs WHERE status IN ({live}) AND (session = ? OR task_dir = ?)",
                    (session, task_dir),
                ).fetchone()
                if clash:
                    raise Busy(f"run {clash[0]} already runs in this session or task directory")
                self.db.execute(
                    f"INSERT INTO runs ({', '.join(FIELDS)}) VALUES ({marks})", tuple(row.values())
                )
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return row

    def update(self, run_id: str, **fields) -> None:
        fields = {k: v for k, v in fields.items() if k in FIELDS and k != "id"}
        fields["updated_at"] = now_iso()
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.lock:
            self.db.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*fields.values(), run_id))

    def get(self, run_id: str) -> dict | None:
        rows = self._rows("WHERE id = ?", (run_id,))
        return rows[0] if rows else None

    def live_for(self, *, session: str | None = None, task_dir: str | None = None) -> dict | None:
        live = ", ".join(f"'{s}'" for s in LIVE)
        key, value = ("session", session) if session is not None else ("task_dir", task_dir)
        rows = self._rows(f"WHERE status IN ({live}) AND {key} = ? ORDER BY created_at DESC", (value,))
        return rows[0] if rows else None

    def waiting_run(self, project: str, loop: str) -> dict | None:
        """The latest run of ``loop`` whose runner left because a gate waits for an answer."""
        rows = self._rows(
            "WHERE project = ? AND loop = ? AND status = 'waiting_gate' ORDER BY created_at DESC",
            (project, loop),
        )
        return rows[0] if rows else None

    def live(self) -> list[dict]:
        live = ", ".join(f"'{s}'" for s in LIVE)
        return self._rows(f"WHERE status IN ({live}) ORDER BY created_at")

    def all(self, limit: int = 200) -> list[dict]:
        return self._rows("ORDER BY created_at DESC LIMIT ?", (limit,))

    def notify_since(self) -> str:
        """When this registry's monitor first notified (set now on the first call)."""
        with self.lock:
            self.db.execute("INSERT OR IGNORE INTO notified (key, at) VALUES ('#since', ?)", (now_iso(),))
            return self.db.execute("SELECT at FROM notified WHERE key = '#since'").fetchone()[0]

    def first_notice(self, key: str) -> bool:
        """Records the event ``key``; True only the first time (then it is to be told)."""
        with self.lock:
            cur = self.db.execute("INSERT OR IGNORE INTO notified (key, at) VALUES (?, ?)", (key, now_iso()))
            return cur.rowcount == 1

    def close(self) -> None:
        self.db.close()
