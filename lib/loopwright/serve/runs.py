"""The monitor's runs: each one a `loopwright run --json` process it started, whose events
keep the registry current; and the recovery of runs after the monitor's own restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
import zlib
from pathlib import Path

from loopwright.core.clock import now_iso
from loopwright.serve.registry import Registry

PLUGIN_ROOT = Path(__file__).resolve().parents[3]  # lib/loopwright/serve/runs.py
LIMIT_FLAGS = {
    "max_iterations": "--max-iterations",
    "max_minutes": "--max-minutes",
    "max_dollars": "--max-dollars",
}


class Runs:
    def __init__(self, registry: Registry, runner_args: tuple = ()):
        self.registry = registry
        self.runner_args = tuple(runner_args)  # --claude, --claude-arg ... for every run
        self.procs: dict[str, subprocess.Popen] = {}

    def start(
        self, project: str, what: str, limits: dict, session: str | None = None, task_dir: str | None = None
    ) -> dict:
        """Start a run of ``what`` (a goal or a /loopwright: command line) in ``project``.
        Raises registry.Busy when the session or the task directory is taken."""
        session = session or str(uuid.uuid4())
        row = self.registry.add(session, project, task_dir, **_known(limits))
        args = ["-C", project, "run", "--json", "--session", session, *self.runner_args]
        for key, flag in LIMIT_FLAGS.items():
            if limits.get(key) is not None:
                args += [flag, str(limits[key])]
        self._spawn(row["id"], [*args, "--", what])
        return self.registry.get(row["id"])

    def resume(self, row: dict) -> None:
        """Drive an existing run's loop again after the monitor restarted."""
        args = ["-C", row["project"], "run", "--json", "--session", row["session"], *self.runner_args]
        self.registry.update(row["id"], status="starting", stall_count=0)
        self._spawn(row["id"], [*args, "--loop", row["loop"]])

    def _spawn(self, run_id: str, args: list[str]) -> None:
        cmd = [str(PLUGIN_ROOT / "bin" / "loopwright"), *args]
        env = dict(os.environ, LOOPWRIGHT_PYTHON=os.environ.get("LOOPWRIGHT_PYTHON", sys.executable))
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
        )
        self.procs[run_id] = proc
        self.registry.update(run_id, pid=proc.pid)
        threading.Thread(target=self._follow, args=(run_id, proc), daemon=True).start()

    def _follow(self, run_id: str, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                self.registry.update(run_id, **fold(event, self.registry.get(run_id) or {}))
        code = proc.wait()
        row = self.registry.get(run_id) or {}
        if row.get("status") not in ("ended", "stopped", "waiting_gate"):
            self.registry.update(run_id, status="stopped", reason=f"the runner exited with code {code}")

    def stop(self, row: dict, loop_paths) -> None:
        """Ask the run's loop to stop between turns (the loop's stop file)."""
        from loopwright.state import store

        store.write_json(loop_paths.stop, {"reason": "user_stop", "timestamp": now_iso()})


def _known(limits: dict) -> dict:
    return {k: limits[k] for k in ("max_iterations", "max_minutes") if limits.get(k) is not None}


def fold(event: dict, row: dict) -> dict:
    """The registry fields one runner event changes."""
    kind = event.get("event")
    if kind == "started":
        return {"status": "running", "loop": event.get("loop")}
    if kind == "progress" and event.get("iteration") is not None:
        # The seed's capture hash: what the run showed last, to tell progress from a repeat.
        seen = f"{zlib.crc32(json.dumps(event, sort_keys=True).encode()):08x}"
        if seen == row.get("last_capture_hash"):
            return {}
        return {
            "iteration": event["iteration"],
            "last_signal_at": now_iso(),
            "status": "running",
            "last_capture_hash": seen,
        }
    if kind == "stall":
        return {"stall_count": int(row.get("stall_count") or 0) + 1}
    if kind == "quota_wait":
        return {"status": "waiting_quota", "quota_wait_started": now_iso()}
    if kind == "resume":
        return {"status": "running", "quota_wait_started": None}
    if kind == "waiting":
        return {"status": "waiting_gate", "reason": event.get("reason")}
    if kind == "ended":
        return {"status": "ended", "outcome": event.get("outcome"), "reason": event.get("reason")}
    return {}


def recover(registry: Registry, runs: Runs, loop_active) -> list[str]:
    """After the monitor's restart: every run the registry holds as live but whose runner is
    gone is driven again when its loop is still active, else marked stopped."""
    notes = []
    for row in registry.live():
        if _alive(row.get("pid")):
            continue
        if row.get("task_dir"):
            _remove_stale_stop(Path(row["task_dir"]) / ".auto-stop")
        if row.get("loop") and loop_active(row):
            runs.resume(row)
            notes.append(f"run {row['id']}: its runner was gone; resumed loop {row['loop']}")
        else:
            registry.update(
                row["id"], status="stopped", reason="its runner was gone when the monitor started"
            )
            notes.append(f"run {row['id']}: its runner was gone and its loop is not active")
    return notes


def _remove_stale_stop(path: Path) -> None:
    """A stop request left by the run's last life (the seed's recovery removes it)."""
    try:
        if not path.is_symlink():
            path.unlink()
    except FileNotFoundError:
        pass


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
