"""The monitor's runs: one row per headless run it started (the ai-cli-task seed's
``task_auto`` table, for every mode)."""

from __future__ import annotations

import uuid

from loopwright.core.clock import now_iso
from loopwright.registry.api import Busy

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
_COLUMNS = ", ".join(FIELDS)
_LIVE_SQL = ", ".join(f"'{s}'" for s in LIVE)
_NOTICE = "INSERT INTO notified (key, at) VALUES ({}, %s) ON CONFLICT DO NOTHING"


class Runs:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def _runs(self, where: str, args: tuple = ()) -> list[dict]:
        with self.backend.tx() as tx:
            return tx.rows(f"SELECT {_COLUMNS} FROM runs {where}", args)

    def add(self, session: str, project: str, task_dir: str | None = None, **limits) -> dict:
        """A new live run; Busy when a live run already has this session or task directory."""
        now = now_iso()
        row = dict.fromkeys(FIELDS)
        row.update(id=uuid.uuid4().hex[:12], session=session, project=project, task_dir=task_dir)
        row.update(status="starting", iteration=0, stall_count=0, created_at=now, updated_at=now, **limits)
        marks = ", ".join("%s" for _ in FIELDS)
        with self.backend.tx() as tx:
            if self.backend.dialect == "postgres":
                tx.rows("LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE")  # one add at a time, as SQLite's
            clash = tx.one(
                f"SELECT id FROM runs WHERE status IN ({_LIVE_SQL}) AND (session = %s OR task_dir = %s)",
                (session, task_dir),
            )
            if clash:
                raise Busy(f"run {clash['id']} already runs in this session or task directory")
            tx.run(f"INSERT INTO runs ({_COLUMNS}) VALUES ({marks})", tuple(row.values()))
        return row

    def update(self, run_id: str, **fields) -> None:
        fields = {k: v for k, v in fields.items() if k in FIELDS and k != "id"}
        fields["updated_at"] = now_iso()
        sets = ", ".join(f"{k} = %s" for k in fields)
        with self.backend.tx() as tx:
            tx.run(f"UPDATE runs SET {sets} WHERE id = %s", (*fields.values(), run_id))

    def get(self, run_id: str) -> dict | None:
        rows = self._runs("WHERE id = %s", (run_id,))
        return rows[0] if rows else None

    def live_for(self, *, session: str | None = None, task_dir: str | None = None) -> dict | None:
        key, value = ("session", session) if session is not None else ("task_dir", task_dir)
        rows = self._runs(f"WHERE status IN ({_LIVE_SQL}) AND {key} = %s ORDER BY created_at DESC", (value,))
        return rows[0] if rows else None

    def waiting_run(self, project: str, loop: str) -> dict | None:
        """The latest run of ``loop`` whose runner left because a gate waits for an answer."""
        rows = self._runs(
            "WHERE project = %s AND loop = %s AND status = 'waiting_gate' ORDER BY created_at DESC",
            (project, loop),
        )
        return rows[0] if rows else None

    def live(self) -> list[dict]:
        return self._runs(f"WHERE status IN ({_LIVE_SQL}) ORDER BY created_at")

    def all(self, limit: int = 200) -> list[dict]:
        return self._runs("ORDER BY created_at DESC LIMIT %s", (limit,))

    def notify_since(self) -> str:
        """When this registry's monitor first notified (set now on the first call)."""
        with self.backend.tx() as tx:
            tx.run(_NOTICE.format("'#since'"), (now_iso(),))
            return tx.one("SELECT at FROM notified WHERE key = '#since'")["at"]

    def first_notice(self, key: str) -> bool:
        """Records the event ``key``; True only the first time (then it is to be told)."""
        with self.backend.tx() as tx:
            return tx.run(_NOTICE.format("%s"), (key, now_iso())) == 1
