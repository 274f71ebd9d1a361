"""One fleet loop claimed by this worker, driven to its end, its gate, or a hand-back.

The loop runs in the worker's clone of its repository, under the same runner as
``loopwright run`` (same recovery, stall, quota and exit-code rules), in a process group of its
own. After every iteration the slot commits what the agent left, renews its claim, pushes the
work branch and writes the loop's counters to the database: a worker that dies loses at most
the iteration that was running. Every write names the claim's generation: once another worker
holds the loop, the slot's next write is refused (LeaseLost) and it stops the runner without
pushing; the push itself is fenced by git too (force-with-lease on the tip it last pushed).

The counters go in with the iteration's dollars added to the day's spend (fleet/limits.py):
a loop the fleet's budget ends stops after the iteration under way. A usage limit (HTTP 429)
pauses the loop's account for the whole fleet: every slot of the account's loops stops its
runner and hands the loop back, to go on after the reset.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

from loopwright.actions import carry
from loopwright.core import jsoncodec
from loopwright.core.clock import now_iso
from loopwright.core.outcomes import gate_stop, stopped
from loopwright.fleet import causes, handoff, limits, logline, reconcile, spec, unprepared
from loopwright.fleet.items import Share
from loopwright.fleet.runnerproc import kill_tree
from loopwright.fleet.workspace import PushRejected, Workspace, WorkspaceError
from loopwright.registry import LeaseLost, RegistryError
from loopwright.state import loops, plugindir, store

LOOPWRIGHT = plugindir.launcher()  # this checkout's, or the copy installed with the package
# Kinds whose loop takes the fleet loop's name (a task loop is named for its module): parallel
# work loops then keep apart in branch names and reports.
NAMED = ("prompt", "work", "review")
RETRY_SECONDS = 600.0  # how long a write waits for a database that went away


class HandBack(Exception):
    """The loop goes back to the queue now, for the reason given (the claim still stands)."""


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
        self.share: Share | None = None  # a --parallel work loop's share of its backlog (fleet/items.py)
        self.recorded = limits.money(row.get("dollars"))  # the loop's dollars the database has counted
        self.counted = reconcile.carried(row)  # the loop's counters at its last record: a push's adds to them
        self.synced = int(row.get("iteration") or 0)  # the iteration its last commit recorded
        self.out_of_budget: str | None = None  # why the fleet's budget ends the loop (its row's reason)
        self.told_stop = False  # a boundary said the budget is spent (not only that it would be)
        self.quota: dict | None = None  # the runner's quota_wait event, not acted on yet
        self.paused: dict | None = None  # the account's pause in force: hand the loop back
        self.said = unprepared.Said()  # what the runner printed besides its events, and its log
        self.causes = causes.Causes(self)  # its client's and this worker's errors, into the row
        self.thread = threading.Thread(target=self._run, name=f"slot-{self.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    # --- the loop's life ----------------------------------------------------------------------

    def _run(self) -> None:
        # No beat of its own: the worker renews every claim it holds in one statement per beat
        # (Worker._renew), and tells this slot its control or that its claim is gone.
        try:
            self._drive()
        except LeaseLost as exc:
            self._lose(str(exc))
        except HandBack as exc:
            self._kill()
            self._hand_back(str(exc))
        except Exception as exc:  # a worker goes on with its other loops whatever one of them does
            self.w.log("error", loop=self.name, error=f"{type(exc).__name__}: {exc}")
            self._hand_back(self.causes.worker_failed(exc))
        finally:
            self._kill()
            self.said.drop_empty_log()
            if self.share is not None:
                self.share.end()
            self.done.set()

    def _drive(self) -> None:
        row = self.row
        if not unprepared.plain_id(self.id):  # the id names files under --data: set aside
            return self._write(self.w.registry.finish, stopped("bad_row"), unprepared.BAD_ID)
        try:
            args = spec.runner_args(row["kind"], row["spec"])
        except spec.SpecError as exc:
            return self._write(self.w.registry.finish, stopped("bad_spec"), str(exc))
        gate = row.get("gate") or {}
        if gate.get("answer") == "stop":
            return self._write(self.w.registry.finish, gate_stop(gate.get("name") or "gate"), "answered stop")
        try:  # what a row asks for that this worker cannot prepare: retried later, then ended
            self.ws = Workspace(self.w.work_root, self.name, row["repo"], row["branch"], allow=self.w.allow)
            self.ws.on_tamper = self._tampered
            self.ws.prepare()
        except (WorkspaceError, ValueError) as exc:  # Refused is a ValueError
            self.causes.note(str(exc), "worker_error")
            return self._unprepared(str(exc))
        shutil.rmtree(self.ws.dir / ".loopwright", ignore_errors=True)  # a new local loop each claim
        self.out_of_budget = reconcile.recover(self)  # what a worker pushed and did not record
        if self.out_of_budget:
            return self._end_for_budget()
        self.w.log(
            "claimed",
            loop=self.name,
            generation=self.gen,
            failovers=row["failovers"],
            repo=logline.repo(row["repo"]),
        )
        self.share = Share.of(self)
        if self.share is not None:
            self.share.start()
            args = self.share.argv() + args
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
        path = self.w.data / "carry" / f"{self.id}-{self.gen}.json"
        return handoff.write_carry(path, state.get("counters") or {}, handoff.text(self.row, events, gate))

    def _start_runner(self, args: list[str], carried: str | None) -> None:
        argv = [str(LOOPWRIGHT), "-C", str(self.ws.dir), "run", "--json", "--session", str(uuid.uuid4())]
        argv += [*self.w.runner_options, *(["--carry", carried] if carried else [])]
        if self.row["kind"] in NAMED:
            argv += ["--name", self.name]
        log = self.said.open(self.w.data / "logs" / f"{self.name}-{self.gen}.log")
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
        self.said.read(self._read_events, f"events-{self.name}")
        self.causes.reader = self.said.reader  # one reader; both wait for it at the end

    def _read_events(self) -> None:
        for line in self.proc.stdout:
            try:
                event = jsoncodec.loads(line)
            except ValueError:
                self.said.line(line)
                continue
            if not isinstance(event, dict):
                continue
            if event.get("event") == "started" and isinstance(event.get("loop"), str):
                self.local = event["loop"]
            # Not its "ended": the slot says that once, with the reason, when the row has ended.
            if event.get("event") in ("waiting", "quota_wait", "stall"):
                self.w.log(event["event"], loop=self.name, detail=event)
            if event.get("event") == "quota_wait":  # the slot pauses the account (_watch)
                self.quota = event
                self.wake.set()
            self.causes.see(event)

    def _watch(self) -> None:
        """Until the runner exits: push each iteration as it ends, act on stop and cancel."""
        pushed = int(self.row.get("iteration") or 0)
        while self.proc.poll() is None:
            if self.lost.is_set():
                raise LeaseLost(self.note or "the claim was lost")
            if self.stop_now:
                self._kill()
                return self._let_go("its worker was stopped: the loop goes on elsewhere")
            if self.quota is not None:
                self._report_quota()
            self.causes.report()
            if self.paused is not None:
                self._kill()  # nothing more on a paused account: the iteration under way is redone
                if self._iterations() > pushed:
                    self._sync(self._iterations())  # an iteration it finished is kept, not redone
                return self._let_go(self._pause_reason())
            self._act_on_control()
            if self.share is not None:
                self.share.poll()  # after a Stop: the loop's next item reserved before it needs it
            done = self._iterations()
            if done > pushed:
                self._sync(done)
                pushed = done
                if self.drain:
                    self._kill()
                    return self._let_go("its worker drained: the loop goes on elsewhere")
            self.wake.wait(0.5)
            self.wake.clear()

    def _settle(self) -> None:
        """The runner exited: the loop ended, waits at a gate, or is handed back."""
        if self.proc is None or self.lost.is_set() or self.row.get("_released") or self.row.get("_ended"):
            return
        self.causes.report(wait=True)
        if self.share is not None:  # an item taken at the last Stop, before the row ends (fleet/items.py)
            self.share.poll(final=True)
        self._sync(self._iterations(), final=True)
        cfg = self._local_config()
        ended = bool(cfg) and cfg.get("status") == loops.ENDED
        local_outcome = cfg.get("outcome") if ended else None
        if self.out_of_budget and limits.ends_for_budget(local_outcome, self.told_stop):
            return self._end_for_budget()
        if ended:
            outcome, reason = cfg.get("outcome") or "ENDED", cfg.get("end_reason") or ""
            self._write(self.w.registry.finish, outcome, reason)
            return self.w.log("ended", loop=self.name, outcome=outcome, reason=reason)
        waiting = self._waiting_gate()
        if waiting:
            self._write(self.w.registry.progress, status="waiting_gate", gate=waiting)
            return self._hand_back(f"waiting at gate {waiting.get('name')}")
        if self._iterations() <= int(self.row.get("iteration") or 0):  # it ran none: as if unprepared
            why = self.said.exit(self.proc.returncode)
            self.causes.note(why, "worker_error")
            return self._unprepared(why)
        self._hand_back(self.causes.runner_exited(self.proc.returncode))

    # --- the loop in the clone ----------------------------------------------------------------

    def _paths(self) -> loops.LoopPaths | None:
        if self.ws is None:
            return None
        name = self.local or (self.name if self.row["kind"] in NAMED else None)
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
        database never counts an iteration whose work is not on the remote. The commit (made
        even when the agent changed nothing) carries the iteration's record (fleet/ledger.py):
        a worker that dies between its push and its record loses nothing, the next claim
        records it from the branch (fleet/reconcile.py)."""
        if self.ws is None:
            return
        budget = self._budget()
        dollars = limits.money(budget.get("dollars_estimate"))
        head = reconcile.commit(self, iteration, final, budget, dollars)
        self._write(self.w.registry.heartbeat, lease=self.w.lease)  # fenced: a lost claim stops here
        moved = head != self.ws.remote_seen
        if moved:
            try:
                self.ws.push(self.ws.remote_seen)
            except PushRejected as exc:
                # Someone pushed to the branch since: a worker that held the loop before, paused
                # between its fenced write and its push. If the claim is gone this raises
                # LeaseLost; if it stands, the loop goes back to the queue and goes on from the
                # branch as it is now (with the next claim, this worker's or another's).
                self._write(self.w.registry.heartbeat, lease=self.w.lease)
                raise HandBack(
                    f"the branch moved under this worker ({exc.line}): it goes on from there"
                ) from None
            reconcile.pause_for_test(self.lost)
        tokens = int(budget.get("tokens_in") or 0) + int(budget.get("tokens_out") or 0)
        spend = self._spend(
            dollars,
            reserve=None if final or self.out_of_budget else limits.mean_cost(dollars, iteration),
            iteration=iteration,
            minutes=float(budget.get("minutes_elapsed") or 0.0),
            tokens=tokens,
            dollars=dollars,
            state={"counters": carry.snapshot(budget), "local": self.local, "head": head},
            last_decision=str((budget.get("router") or {}).get("last_reason") or "")[:2000],
        )
        self.counted, self.synced = carry.snapshot(budget), iteration
        for line in self._history():  # each with the commit that holds its work, for a handoff
            self._write(
                self.w.registry.add_event, "iteration", dict(line, commit=head[:12], **self.causes.where)
            )
        self._heed(spend, final)
        self.w.log("pushed" if moved else "recorded", loop=self.name, iteration=iteration, head=head[:12])

    def _spend(self, spent: float, /, **progress) -> dict:
        """The boundary's progress write with the dollars spent since the last one added to the
        day's spend (fenced, in one transaction: see Limits.record_spend)."""
        retry = False

        def record():
            nonlocal retry
            if retry:  # the attempt that failed may have gone in: count from what the database has
                row = self.w.registry.fleet_loop(self.id) or {}
                if row.get("generation") == self.gen:
                    self.recorded = limits.money(row.get("dollars"))
            retry = True
            delta = limits.dollars_delta(spent, self.recorded)
            return self.w.registry.record_spend(self.id, self.gen, delta, **progress)

        spend = self._retrying(record)
        self.recorded = max(self.recorded, spent)
        return spend

    # --- the fleet's budget and the account's pause -------------------------------------------

    def _heed(self, spend: dict, final: bool) -> None:
        """What a boundary's spend says: the account is paused, the fleet's budget is spent
        (the loop ends now), or would be by the iteration under way (then that is the last)."""
        if spend.get("paused_until") is not None and self.paused is None:
            pause = self._read(self.w.registry.account_pause, self.row["account"])  # with its reason
            self.see_pause(pause or {"until": spend["paused_until"]})
        if spend.get("stop"):
            self.out_of_budget = str(spend.get("reason") or "the fleet's daily budget is spent")
            first, self.told_stop = not self.told_stop, True
        elif self.out_of_budget is None and not final:
            # The iteration under way started before this boundary was recorded: a stop written
            # now ends the loop after it, not before. The boundary held room for it and said
            # whether the caps have room for another too (registry/reservations.py): when not,
            # the one under way is the last.
            self.out_of_budget = spend.get("last")
            first = self.out_of_budget is not None
        else:
            first = False
        if not first:
            return
        paths = self._paths()
        if paths is not None and not final:
            store.write_json(paths.stop, {"reason": limits.STOP_REASON, "timestamp": now_iso()})
        self.w.log("budget", loop=self.name, stop=self.told_stop, reason=self.out_of_budget)

    def _end_for_budget(self) -> None:
        self._write(self.w.registry.finish, limits.OUT_OF_BUDGET, self.out_of_budget)
        self.row["_ended"] = True
        self.w.log("ended", loop=self.name, outcome=limits.OUT_OF_BUDGET, reason=self.out_of_budget)

    def _let_go(self, reason: str) -> None:
        """The runner is gone on the worker's account: a loop the fleet's budget already ended
        ends; any other is handed back."""
        if self.told_stop:
            return self._end_for_budget()
        self._hand_back(reason)

    def see_pause(self, pause: dict | None) -> None:
        """The loop's account is paused (a pause in force, from any source): the slot hands the
        loop back at once; the claim gate keeps it queued until the reset."""
        until = limits.money((pause or {}).get("until"))
        if until > time.time() and self.paused is None:
            self.paused = dict(pause, until=until)
            self.wake.set()

    def _pause_reason(self) -> str:
        return limits.pause_reason(self.row["account"], self.paused["until"], self.paused.get("reason"))

    def _report_quota(self) -> None:
        """The runner waits for a usage limit (HTTP 429) to reset: the account is paused for the
        whole fleet until then, and this loop is handed back like the account's others."""
        event, self.quota = self.quota, None
        account, until = self.row["account"], limits.quota_until(event, time.time())
        if until is None or not isinstance(account, str) or not account:
            return  # nothing to pause: the runner waits it out itself
        why = f"usage limit (HTTP 429): {str(event.get('message') or '')[:200]}"
        pause = self._read(self.w.registry.pause_account, account, until, why, by=self.w.opts.name)
        self.w.log("account_paused", loop=self.name, account=account, until=now_iso(until), reason=why)
        self.see_pause(pause)

    # --- stop, cancel and the claim -----------------------------------------------------------

    def _act_on_control(self) -> None:
        what = self.control
        if what not in ("stop", "cancel", limits.SPENT) or what in self.acted:
            return
        paths = self._paths()
        if paths is None:
            return  # the runner has not named its loop yet: next time
        self.acted.add(what)
        if what == limits.SPENT:  # another loop's boundary spent a budget this one counts in
            self.out_of_budget = self.out_of_budget if self.told_stop else limits.SPENT_ELSEWHERE
            self.told_stop = True
            store.write_json(paths.stop, {"reason": limits.STOP_REASON, "timestamp": now_iso()})
            self.w.log("budget", loop=self.name, stop=True, reason=self.out_of_budget)
        elif what == "stop":
            store.write_json(paths.stop, {"reason": "user_stop", "timestamp": now_iso()})
        else:
            from loopwright.actions.cancel import cancel

            try:
                cancel(paths.state, paths.name, None, "cancelled from the fleet")
            except Exception as exc:  # already ended: the runner ends with it
                self.w.log("error", loop=self.name, error=f"cancel: {exc}")
            # For good and now: the turn under way is not finished (what it left is still
            # committed to the loop's branch as the runner's exit is settled).
            self._kill()
        self.w.log("control", loop=self.name, what=what)

    def _tampered(self, what: str) -> None:
        """The agent changed the clone's .git where git would run a command: undone, logged."""
        self.w.log(
            "error",
            loop=self.name,
            error=f"the clone's .git was changed; before the worker's git ran: {what}",
        )

    def _lose(self, why: str) -> None:
        first = not self.lost.is_set()  # the beat and the loop's own thread may both find out
        if first:
            self.note = why
            self.lost.set()
        self._kill()
        if first:
            self.w.log("lost", loop=self.name, reason=why)

    def _unprepared(self, why: str) -> None:
        """Not preparable here: retried later, ended at the third failure alike (registry/faults.py)."""
        said = self._write(self.w.registry.prepare_failed, why, self.w.opts.prepare_backoff)
        self.row["_released"] = True
        self.w.log("prepare_failed", loop=self.name, reason=why[:300], **said)

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
        """Stop the runner and its client now: the loop stays as it was at its last pushed
        iteration."""
        if self.proc is not None:
            kill_tree(self.proc)

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
