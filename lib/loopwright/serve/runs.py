"""The monitor's runs: each one a `loopwright run --json` process it started, whose events
keep the registry current; and the recovery of runs after the monitor's own restart: a
runner that outlived the monitor is adopted and followed through its loop's own files."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
import zlib
from pathlib import Path

from loopwright.core.clock import now_iso
from loopwright.registry import LIVE, Registry
from loopwright.state import loops, plugindir

LIMIT_FLAGS = {
    "max_iterations": "--max-iterations",
    "max_minutes": "--max-minutes",
    "max_dollars": "--max-dollars",
}
LOST = "lost"  # the runner is gone and the loop was left active: nobody drives it any more


class Runs:
    def __init__(
        self, registry: Registry, runner_args: tuple = (), poll: float = 1.0, events: Path | None = None
    ):
        self.registry = registry
        # Where runners write their JSON events for this monitor (its data directory's events/).
        self.events = events or Path(registry.path).resolve().parent / "events"
        self.runner_args = tuple(runner_args)  # --claude, --claude-arg ... for every run
        self.procs: dict[str, subprocess.Popen] = {}
        self.poll = poll  # seconds between looks at an adopted run's loop

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
        cmd = [str(plugindir.launcher()), *args]
        env = dict(os.environ, LOOPWRIGHT_PYTHON=os.environ.get("LOOPWRIGHT_PYTHON", sys.executable))
        # The runner's events go to a private file, not a pipe: a monitor killed mid-run
        # leaves a runner that writes on (a pipe would break under it), for the next one to adopt.
        log = self._events_file(run_id)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            no = subprocess.DEVNULL
            proc = subprocess.Popen(cmd, env=env, stdin=no, stdout=fd, stderr=no, start_new_session=True)
        finally:
            os.close(fd)
        self.procs[run_id] = proc
        self.registry.update(run_id, pid=proc.pid, pid_started=create_time(proc.pid))
        threading.Thread(target=self._follow, args=(run_id, proc, log), daemon=True).start()

    def _events_file(self, run_id: str) -> Path:
        self.events.mkdir(mode=0o700, exist_ok=True)
        return self.events / f"{run_id}-{uuid.uuid4().hex[:8]}.jsonl"

    def _follow(self, run_id: str, proc: subprocess.Popen, log: Path) -> None:
        rest = b""
        with open(log, "rb") as fh:
            while True:
                done = proc.poll() is not None  # then one last read: nothing is written after it
                *lines, rest = (rest + fh.read()).split(b"\n")
                for line in lines:
                    self._fold_line(run_id, line)
                if done:
                    break
                time.sleep(0.2)
        with contextlib.suppress(OSError):
            os.unlink(log)
        row = self.registry.get(run_id) or {}
        if row.get("status") not in ("ended", "stopped", "waiting_gate"):
            reason = f"the runner exited with code {proc.returncode}"
            self.registry.update(run_id, status="stopped", reason=reason)

    def _fold_line(self, run_id: str, raw: bytes) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if isinstance(event, dict):
            self.registry.update(run_id, **fold(event, self.registry.get(run_id) or {}))

    def adopt(self, row: dict) -> None:
        """Follow a run whose runner outlived the monitor that started it, to its end, by
        its loop's own files (its events went to that monitor)."""
        threading.Thread(target=self._watch, args=(row["id"],), daemon=True).start()

    def _watch(self, run_id: str) -> None:
        while True:
            row = self.registry.get(run_id)
            if row is None or row["status"] not in LIVE:
                break
            alive = runner_alive(row)
            change = settle(row, *loop_state(row), alive=alive)
            if change:
                self.registry.update(run_id, **change)
            if change.get("status", row["status"]) not in LIVE:
                break
            time.sleep(self.poll)
        drop_events(self.events, run_id)

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


def recover(registry: Registry, runs: Runs, loop_active=None) -> list[str]:
    """After the monitor's restart, every run the registry holds as live: one whose runner
    still runs is adopted and followed to its end; one whose runner is gone is driven again
    when its loop is active and waits for no gate (and ``loop_active``, if given, agrees),
    else marked from its loop: ended with its outcome, waiting for a gate, or lost."""
    notes = []
    for row in registry.live():
        if runner_alive(row):
            runs.adopt(row)
            notes.append(f"run {row['id']}: its runner still runs; followed through its loop's files")
            continue
        cfg, progress, waiting = loop_state(row)
        if cfg is not None and cfg.get("name") != row.get("loop"):
            row = dict(row, loop=cfg.get("name"))  # the runner started it after the last event read
            registry.update(row["id"], loop=row["loop"])
        active = cfg is not None and cfg.get("status") == loops.ACTIVE
        if active and not waiting and (loop_active is None or loop_active(row)):
            if row.get("task_dir"):
                _remove_stale_stop(Path(row["task_dir"]) / ".auto-stop")
            runs.resume(row)
            notes.append(f"run {row['id']}: its runner was gone; resumed loop {row['loop']}")
            continue
        change = settle(row, cfg, progress, waiting, alive=False)
        registry.update(row["id"], **change)
        drop_events(runs.events, row["id"])
        notes.append(f"run {row['id']}: its runner was gone; marked {change['status']}")
    return notes


def drop_events(folder: Path, run_id: str) -> None:
    """The events a run's runner wrote for a monitor that is gone: nobody reads them now."""
    for log in folder.glob(f"{run_id}-*.jsonl"):
        with contextlib.suppress(OSError):
            log.unlink()


def settle(row: dict, cfg: dict | None, progress: dict, waiting: list, *, alive: bool) -> dict:
    """The fields a run's row takes from its loop's own state (loop.json, progress.json,
    the gates budget.json has waiting) and whether its runner still runs."""
    if cfg is None:
        return {} if alive else {"status": LOST, "reason": "its runner is gone and it has no loop to read"}
    out = {"loop": cfg.get("name")} if cfg.get("name") != row.get("loop") else {}
    if cfg.get("status") != loops.ACTIVE:
        return {**out, "status": "ended", "outcome": cfg.get("outcome"), "reason": cfg.get("end_reason")}
    iteration = progress.get("iteration")
    if isinstance(iteration, int) and iteration != row.get("iteration"):
        out.update(iteration=iteration, last_signal_at=now_iso(), status="running")
    if alive:
        return out
    if waiting:
        return {**out, "status": "waiting_gate", "reason": f"gate(s) {', '.join(waiting)} wait for an answer"}
    why = "its runner is gone and its loop was left active; continue it with `loopwright run --loop NAME`"
    return {**out, "status": LOST, "reason": why.replace("NAME", str(cfg.get("name")))}


def loop_state(row: dict) -> tuple[dict | None, dict, list[str]]:
    """The run's loop as this user's loopwright wrote it: loop.json (None when there is
    none, or none that verifies), progress.json and the names of the gates waiting."""
    from loopwright.core.errors import UnsafePath
    from loopwright.state import store

    state = Path(row["project"]) / ".loopwright"
    try:  # a run whose runner never said which loop it started: the loop its session owns
        names = [row["loop"]] if row.get("loop") else loops.loop_names(state)
    except (loops.LoopError, UnsafePath, OSError):
        return None, {}, []
    for name in names:
        try:
            paths = loops.LoopPaths(state, name)
            cfg = loops.load_config(paths, move_corrupt=False)
            if not cfg or cfg.get("owner_session") != row["session"]:
                continue
            paths.configured(cfg)
            progress = loops.read_state(paths, "progress", move_corrupt=False) or {}
            budget = loops.read_state(paths, "budget", move_corrupt=False) or {}
        except (loops.LoopError, store.CorruptFile, UnsafePath, OSError, ValueError):
            continue
        pending = budget.get("pending_gates") or []
        return cfg, progress, [g["name"] for g in pending if not g.get("answer")]
    return None, {}, []


def create_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # gone already, or no psutil: the pid alone is kept
        return None


def runner_alive(row: dict) -> bool:
    """Whether the run's runner still runs: its pid, this user's, not a zombie, started
    when the row says (a reused pid is another process)."""
    pid, started = row.get("pid"), row.get("pid_started")
    if not isinstance(pid, int) or pid <= 0:
        return False
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or proc.uids().real != os.getuid():
            return False
        if isinstance(started, (int, float)):
            return abs(proc.create_time() - started) <= 1.0
        return "loopwright" in " ".join(proc.cmdline())  # a row from before create times were kept
    except psutil.Error:  # gone, or another user's (then not our runner)
        return False


def _remove_stale_stop(path: Path) -> None:
    """A stop request left by the run's last life (the seed's recovery removes it)."""
    try:
        if not path.is_symlink():
            path.unlink()
    except FileNotFoundError:
        pass
