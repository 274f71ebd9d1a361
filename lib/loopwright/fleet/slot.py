"""One fleet loop claimed by this worker, driven to its end, its gate, or a hand-back.

The loop runs in the worker's clone of its repository, under the same runner as
``loopwright run`` (same recovery, stall, quota and exit-code rules), in a process group of its
own. After every iteration the slot commits what the agent left, renews its claim, pushes the
work branch and writes the loop's counters to the database: a worker that dies loses at most
the iteration that was running. Every write names the claim's generation: once another worker
holds the loop, the slot's next write is refused (LeaseLost) and it stops the runner without
pushing; the push itself is fenced by git too (force-with-lease on the tip it last pushed).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from loopwright.actions import carry
from loopwright.core import jsoncodec
from loopwright.core.clock import now_iso
from loopwright.core.outcomes import gate_stop, stopped
from loopwright.fleet import handoff, spec
from loopwright.fleet.workspace import PushRejected, Workspace
from loopwright.registry import LeaseLost, RegistryError
from loopwright.state import loops, store

LOOPWRIGHT = Path(__file__).resolve().parents[3] / "bin" / "loopwright"
RETRY_SECONDS = 600.0  # how long a write waits for a database that went away


class Slot:
    """Runs ``row`` (a claim of this worker's) in a thread of its own."""

    def __init__(self, worker, row: dict) -> None:
        self.w, self.row = worker, row
        self.id, self.gen, self.name = row["id"], row["generation"], row["name"]
        self.lost = threading.Event()  # the claim is gone: stop, push nothing
        self.wake = threading.Event()  # a control notification for this loop arrived
        self.done = threading.Event()
        self.drain = False  # finish the iteration under way, then hand the loop back
        self.stop_now = False  # hand the loop back now (its iteration under way is redone elsewhere)
        self.control: str | None = None
        self.acted: set[str] = set()
        self.proc: subprocess.Popen | None = None
        self.local: str | None = None  # the loop's name in the clone
        self.ws: Workspace | None = None
        self.history_seen = 0
        self.note = ""
        self.thread = threading.Thread(target=self._run, name=f"slot-{self.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    # --- the loop's life ----------------------------------------------------------------------

    def _run(self) -> None:
        beat = threading.Thread(target=self._beat_loop, name=f"beat-{self.name}", daemon=True)
        try:
            beat.start()
            self._drive()
        except LeaseLost as exc:
            self._lose(str(exc))
        except Exception as exc:  # a worker goes on with its other loops whatever one of them does
            self.w.log("error", loop=self.name, error=f"{type(exc).__name__}: {exc}")
            self._hand_back(f"the worker failed: {type(exc).__name__}: {exc}"[:500])
        finally:
            self._kill()
            self.done.set()

    def _drive(self) -> None:
        row = self.row
        try:
            args = spec.runner_args(row["kind"], row["spec"])
        except spec.SpecError as exc:
            return self._write(self.w.registry.finish, stopped("bad_spec"), str(exc))
        gate = row.get("gate") or {}
        if gate.get("answer") == "stop":
            return self._write(self.w.registry.finish, gate_stop(gate.get("name") or "gate"), "answered stop")
        self.ws = Workspace(self.w.work_root, self.name, row["repo"], row["branch"], allow=self.w.allow)
        self.ws.prepare()
        shutil.rmtree(self.ws.dir / ".loopwright", ignore_errors=True)  # a new local loop each claim
        self.w.log("claimed", loop=self.name, generation=self.gen, failovers=row["failovers"])
        self._start_runner(args, self._carry_file(gate))
        self._watch()
        self._settle()

    def _carry_file(self, gate: dict) -> str | None:
        """The counters and handoff of a loop that ran before (elsewhere, or here before a gate
        or a drain), for the runner's --carry; None for a loop that starts now."""
        state = self.row.get("state") or {}
        if not self.row.get("iteration") and not state.get("counters"):
            return None
        events = self._read(self.w.registry.events, self.id, 0, 200)
        text = handoff.text(self.row, events, gate)
        path = self.w.data / "carry" / f"{self.id}-{self.gen}.json"
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        store.write_json(path, {"counters": state.get("counters") or {}, "handoff": text})
        return str(path)

    def _start_runner(self, args: list[str], carried: str | None) -> None:
        argv = [str(LOOPWRIGHT), "-C", str(self.ws.dir), "run", "--json", "--session", str(uuid.uuid4())]
        argv += [*self.w.runner_options, *(["--carry", carried] if carried else [])]
        if self.row["kind"] == "prompt":
            argv += ["--name", self.name]
        log = open(self.w.data / "logs" / f"{self.name}-{self.gen}.log", "ab")  # noqa: SIM115 - the child's
        self.proc = subprocess.Popen(
            [*argv, *args],
            cwd=str(self.ws.dir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            env=self.w.env,
            start_new_session=True,  # its own group: the slot can stop the runner and its client together
        )
        log.close()
        threading.Thread(target=self._read_events, name=f"events-{self.name}", daemon=True).start()

    def _read_events(self) -> None:
        for line in self.proc.stdout:
            try:
                event = jsoncodec.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if event.get("event") == "started" and isinstance(event.get("loop"), str):
                self.local = event["loop"]
            if event.get("event") in ("ended", "waiting", "quota_wait", "stall"):
                self.w.log(event["event"], loop=self.name, detail=event)

    def _watch(self) -> None:
        """Until the runner exits: push each iteration as it ends, act on stop and cancel."""
        pushed = int(self.row.get("iteration") or 0)
        while self.proc.poll() is None:
            if self.lost.is_set():
                raise LeaseLost(self.note or "the claim was lost")
            if self.stop_now:
                self._kill()
                return self._hand_back("its worker was stopped: the loop goes on elsewhere")
            self._act_on_control()
            done = self._iterations()
            if done > pushed:
                self._sync(done)
                pushed = done
                if self.drain:
                    self._kill()
                    return self._hand_back("its worker drained: the loop goes on elsewhere")
            self.wake.wait(0.5)
            self.wake.clear()

    def _settle(self) -> None:
        """The runner exited: the loop ended, waits at a gate, or is handed back."""
        if self.proc is None or self.lost.is_set() or self.row.get("_released"):
            return
        self._sync(self._iterations(), final=True)
        cfg = self._local_config()
        if cfg and cfg.get("status") == loops.ENDED:
            outcome, reason = cfg.get("outcome") or "ENDED", cfg.get("end_reason") or ""
            self._write(self.w.registry.finish, outcome, reason)
            return self.w.log("ended", loop=self.name, outcome=outcome)
        waiting = self._waiting_gate()
        if waiting:
            self._write(self.w.registry.progress, status="waiting_gate", gate=waiting)
            return self._hand_back(f"waiting at gate {waiting.get('name')}")
        self._hand_back(f"the runner exited (code {self.proc.returncode}) with the loop still active")

    # --- the loop in the clone ----------------------------------------------------------------

    def _paths(self) -> loops.LoopPaths | None:
        if self.ws is None:
            return None
        name = self.local or (self.name if self.row["kind"] == "prompt" else None)
        return loops.LoopPaths(Path(self.ws.dir) / ".loopwright", name) if name else None

    def _local_config(self) -> dict | None:
        paths = self._paths()
        try:
            return loops.load_config(paths, move_corrupt=False) if paths else None
        except (loops.LoopError, store.CorruptFile, OSError):
            return None

    def _budget(self) -> dict:
        paths = self._paths()
        try:
            return (loops.read_state(paths, "budget", move_corrupt=False) or {}) if paths else {}
        except (store.CorruptFile, OSError):
            return {}

    def _iterations(self) -> int:
        return int(self._budget().get("iterations_used") or 0)

    def _waiting_gate(self) -> dict | None:
        for gate in self._budget().get("pending_gates") or []:
            if isinstance(gate, dict) and not gate.get("answer"):
                keep = ("name", "question", "options", "asked_at", "raise_to", "dimensions", "item")
                return {k: gate.get(k) for k in keep if k in gate}
        return None

    def _history(self) -> list[dict]:
        """The history lines the database has not seen yet."""
        paths = self._paths()
        try:
            lines = store.read_jsonl(paths.history)[0] if paths else []
        except (store.CorruptFile, OSError, ValueError):
            return []
        fresh, self.history_seen = lines[self.history_seen :], len(lines)
        return [line for line in fresh if isinstance(line, dict)]

    # --- after each iteration -----------------------------------------------------------------

    def _sync(self, iteration: int, final: bool = False) -> None:
        """Commit, renew the claim, push, then record the iteration: in that order, so that the
        database never counts an iteration whose work is not on the remote."""
        if self.ws is None:
            return
        self.ws.commit_all(f"loopwright {self.name}: iteration {iteration}{' (last)' if final else ''}")
        head = self.ws.head()
        self._write(self.w.registry.heartbeat, lease=self.w.lease)  # fenced: a lost claim stops here
        if head != self.ws.remote_seen:
            try:
                self.ws.push(self.ws.remote_seen)
            except PushRejected as exc:
                raise LeaseLost(f"the remote refused the push (another worker pushed): {exc.line}") from None
        budget = self._budget()
        tokens = int(budget.get("tokens_in") or 0) + int(budget.get("tokens_out") or 0)
        self._write(
            self.w.registry.progress,
            iteration=iteration,
            minutes=float(budget.get("minutes_elapsed") or 0.0),
            tokens=tokens,
            dollars=float(budget.get("dollars_estimate") or 0.0),
            state={"counters": carry.snapshot(budget), "local": self.local, "head": head},
            last_decision=str((budget.get("router") or {}).get("last_reason") or "")[:2000],
        )
        for line in self._history():
            self._write(self.w.registry.add_event, "iteration", line)
        self.w.log("pushed", loop=self.name, iteration=iteration, head=head[:12])

    # --- stop, cancel and the claim -----------------------------------------------------------

    def _act_on_control(self) -> None:
        what = self.control
        if what not in ("stop", "cancel") or what in self.acted:
            return
        paths = self._paths()
        if paths is None:
            return  # the runner has not named its loop yet: next time
        self.acted.add(what)
        if what == "stop":
            store.write_json(paths.stop, {"reason": "user_stop", "timestamp": now_iso()})
        else:
            from loopwright.actions.cancel import cancel

            try:
                cancel(paths.state, paths.name, None, "cancelled from the fleet")
            except Exception as exc:  # already ended: the runner ends with it
                self.w.log("error", loop=self.name, error=f"cancel: {exc}")
        self.w.log("control", loop=self.name, what=what)

    def _beat_loop(self) -> None:
        """Renew the claim every ``heartbeat`` seconds (sooner on a notification); the loop's
        pending control comes back with each renewal."""
        while not self.done.is_set() and not self.lost.is_set():
            try:
                self.control = self.w.registry.heartbeat(self.id, self.gen, lease=self.w.lease)["control"]
                if self.control:
                    self.wake.set()
            except LeaseLost as exc:
                self._lose(str(exc))
                return
            except RegistryError as exc:  # the database went away: the next beat tries again
                self.w.log("database", loop=self.name, error=str(exc))
            self.done.wait(self.w.heartbeat)

    def _lose(self, why: str) -> None:
        self.note = why
        self.lost.set()
        self._kill()
        self.w.log("lost", loop=self.name, reason=why)

    def _hand_back(self, reason: str) -> None:
        if self.lost.is_set():
            return
        try:
            self._write(self.w.registry.release, reason)
            self.row["_released"] = True
            self.w.log("released", loop=self.name, reason=reason)
        except LeaseLost as exc:
            self._lose(str(exc))

    def _kill(self) -> None:
        """Stop the runner and its client now (SIGKILL to their group): the loop stays as it
        was at its last pushed iteration."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def _write(self, call, *args, **fields):
        """A fenced write of this claim's, retried while the database is away (LeaseLost is not
        retried: the claim is gone)."""
        return self._retrying(call, self.id, self.gen, *args, **fields)

    def _read(self, call, *args, **fields):
        return self._retrying(call, *args, **fields)

    def _retrying(self, call, *args, **fields):
        deadline = time.monotonic() + RETRY_SECONDS
        while True:
            try:
                return call(*args, **fields)
            except RegistryError as exc:
                if time.monotonic() > deadline or self.lost.is_set():
                    raise
                self.w.log("database", loop=self.name, error=str(exc))
                self.lost.wait(1.0)
