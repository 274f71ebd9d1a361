"""`loopwright worker`: this machine's share of the fleet.

The worker claims up to ``slots`` loops from the shared queue, each whose repository its
allow-list accepts and whose verify command, if it has one, its --allow-verify accepts, and
drives each in a Slot (fleet/slot.py). It wakes when the database says a loop became
claimable or was asked to stop (LISTEN/NOTIFY), and polls besides, so a lost
notification delays work by seconds, not forever. It beats into the database with its slots
and loops, for the page. The first SIGTERM (or Ctrl-C) drains: each loop finishes the
iteration under way, is pushed and handed back; a second one stops every loop now and hands
it back (its iteration under way is redone elsewhere).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

from loopwright.core import jsoncodec
from loopwright.core.clock import now_iso
from loopwright.fleet import logline
from loopwright.fleet.allow import Allow
from loopwright.fleet.consent import Verifies
from loopwright.fleet.slot import Slot
from loopwright.registry import LeaseLost, RegistryError
from loopwright.registry.queue import CONTROL_CHANNEL, QUEUE_CHANNEL, lease_lost
from loopwright.runner import orphan

SLICE = 0.5  # the longest the worker waits at once, so that a signal is seen at once


class Options:
    def __init__(
        self,
        slots: int,
        allow: list[str],
        data: Path,
        *,
        name: str | None = None,
        host: str | None = None,
        account: str | None = None,
        lease: float = 30.0,
        heartbeat: float = 10.0,
        poll: float = 5.0,
        runner_options: tuple = (),
        allow_verify: tuple = (),
        prepare_backoff: float = 60.0,
        log_format: str = "text",
    ) -> None:
        self.slots, self.allow, self.data = slots, allow, Path(data)
        self.host = host or socket.gethostname()
        self.name = name or f"{self.host}-{uuid.uuid4().hex[:8]}"
        self.account = account
        self.lease, self.heartbeat, self.poll = lease, heartbeat, poll
        self.runner_options = tuple(runner_options)
        self.allow_verify = list(allow_verify)
        self.prepare_backoff = prepare_backoff  # the first wait after a loop could not be prepared
        self.log_format = log_format  # "text" for a person, "json" for machines


def _let_go(slot: Slot) -> bool:
    """Whether the slot let go of its claim itself (released or ended it)."""
    return bool(slot.row.get("_released") or slot.row.get("_ended"))


class Worker:
    def __init__(self, registry, opts: Options, out=sys.stdout) -> None:
        self.registry, self.opts, self.out = registry, opts, out
        self.allow = Allow(opts.allow)
        self.verifies = Verifies(opts.allow_verify)
        self.data = opts.data
        self.work_root = self.data / "work"
        for d in (self.data, self.work_root, self.data / "logs"):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.lease, self.heartbeat = opts.lease, opts.heartbeat
        self.runner_options = opts.runner_options
        self.env = dict(os.environ, LOOPWRIGHT_PYTHON=os.environ.get("LOOPWRIGHT_PYTHON", sys.executable))
        self.env[orphan.ENV] = str(os.getpid())  # its runners end with it (runner/orphan.py)
        self.slots: dict[str, Slot] = {}
        self.signals = 0
        self.refused: set[str] = set()  # repositories whose refusal was logged (once each)
        self.declined: set[str] = set()  # loops whose verify was refused and logged (once each)
        self._out_lock = threading.Lock()
        self.token = uuid.uuid4().hex  # this process's hold on its name (registry/workers.py)
        self.name_taken = False

    def log(self, event: str, **fields) -> None:
        """One line per event on the worker's output (its service log): a sentence, or with
        --log-format json one JSON object."""
        if self.opts.log_format == "json":
            line = jsoncodec.dumps(
                {"at": now_iso(), "event": event, "worker": self.opts.name, **fields}
            ).decode()
        else:
            line = logline.text(event, {"worker": self.opts.name, **fields})
        with self._out_lock:
            print(line, file=self.out, flush=True)

    def _on_signal(self, signum, frame) -> None:
        self.signals += 1

    def run(self) -> int:
        """Claim and drive loops until signalled; the exit code."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        o = self.opts  # the name first: RegistryError (one line) while a live worker holds it
        self.registry.hold_worker_name(o.name, o.host, o.slots, o.account, self.token, self.heartbeat)
        listener = self.registry.listener((QUEUE_CHANNEL, CONTROL_CHANNEL))
        self.log(
            "started", host=self.opts.host, slots=self.opts.slots, allow=self.opts.allow,
            allow_verify=self.opts.allow_verify,
        )  # fmt: skip
        next_beat, next_look, handled, look = 0.0, 0.0, 0, True
        try:
            while True:
                if self.signals != handled:
                    handled = self.signals
                    self._wind_down(now=handled >= 2)
                look = self._reap() or look
                if self.signals and not self.slots:
                    break
                if time.monotonic() >= next_beat:
                    self._beat()
                    next_beat = time.monotonic() + self.heartbeat
                if not self.signals and (look or time.monotonic() >= next_look):
                    self._fill()  # on a notification or a freed slot, else every --poll seconds
                    look, next_look = False, time.monotonic() + self.opts.poll
                # Short waits: a signal is handled within half a second, whatever --poll says.
                notes = listener.wait(max(0.0, min(SLICE, next_look - time.monotonic())))
                look = any(channel == QUEUE_CHANNEL for channel, _ in notes) or look
                self._wake(notes)
        finally:
            listener.close()
        self._beat()
        self._said_stopped()
        try:
            self.registry.let_go_of_name(self.opts.name, self.token)
        except RegistryError:
            pass  # it is let go of anyway once its beats are old
        self.log("stopped")
        return 0

    def _said_stopped(self) -> None:
        """The worker's row says it left (`fleet workers`: stopped, not stale)."""
        try:
            self.registry.worker_stopped(self.opts.name, self.token)
        except RegistryError as exc:
            self.log("database", error=str(exc))

    def _fill(self) -> None:
        while len(self.slots) < self.opts.slots:
            try:
                row = self.registry.claim(
                    self.opts.name,
                    self.opts.host,
                    lease=self.lease,
                    allowed=self._allowed,
                    accepts=self._accepts,
                    accounts=[self.opts.account] if self.opts.account else None,
                )
            except RegistryError as exc:
                return self.log("database", error=str(exc))
            except Exception as exc:  # never the end of the worker: it looks again at the next poll
                return self.log("database", error=f"{type(exc).__name__}: {str(exc)[:300]}")
            if row is None:
                return
            slot = Slot(self, row)
            self.slots[row["id"]] = slot
            slot.start()

    def _allowed(self, repo: str) -> bool:
        why = self.allow.why_not(repo)
        if why and repo not in self.refused:
            self.refused.add(repo)
            self.log("refused", repo=repo[:300], reason=why)
        return why is None

    def _accepts(self, row: dict) -> bool:
        """Whether this worker may run what the loop's spec asks beyond its repository (its
        verify: a shell command the row's writer chose)."""
        why = self.verifies.why_not(row.get("spec"))
        if why and row["id"] not in self.declined:
            self.declined.add(row["id"])
            self.log("refused", loop=str(row.get("name"))[:80], reason=why)
        return why is None

    def _reap(self) -> bool:
        """Lets go of the slots whose loop is done here; whether any was."""
        done = [i for i, s in self.slots.items() if s.done.is_set()]
        for loop_id in done:
            self.slots.pop(loop_id).thread.join(timeout=5)
        return bool(done)

    def _wake(self, notes: list) -> None:
        for channel, payload in notes:
            if channel == CONTROL_CHANNEL and payload in self.slots:
                self.slots[payload].wake.set()
                threading.Thread(target=self._control_now, args=(self.slots[payload],), daemon=True).start()
            elif channel == CONTROL_CHANNEL and payload.startswith("account:"):
                account = payload.partition(":")[2]
                mine = [s for s in self.slots.values() if s.row.get("account") == account]
                if mine:
                    threading.Thread(target=self._pause_now, args=(account, mine), daemon=True).start()

    def _pause_now(self, account: str, slots: list) -> None:
        """An account was paused (or its pause ended): its loops here hear of it now, not at
        their next beat."""
        try:
            pause = self.registry.account_pause(account)
        except RegistryError:
            return  # the worker's next beat asks again
        for slot in slots:
            slot.see_pause(pause)

    def _control_now(self, slot: Slot) -> None:
        """A stop or cancel for one of this worker's loops: read it now, not at the next beat."""
        try:
            slot.control = self.registry.heartbeat(slot.id, slot.gen, lease=self.lease)["control"]
            slot.wake.set()
        except (LeaseLost, RegistryError):
            pass  # the worker's next beat finds out (Worker._renew)

    def _renew(self) -> None:
        """Renews every claim this worker holds in one statement (registry/leases.py): each
        slot hears its loop's control, and a slot whose claim is gone (another worker took the
        loop, or it was released or ended) is told to stop without pushing. Each account's pause
        is read once per beat too, for a pause whose notification was lost."""
        slots = [s for s in self.slots.values() if not (s.done.is_set() or s.lost.is_set() or _let_go(s))]
        if not slots:
            return
        try:
            held = self.registry.renew_claims([(s.id, s.gen) for s in slots], lease=self.lease)
        except RegistryError as exc:  # the database went away: the next beat tries again
            return self.log("database", error=str(exc))
        for slot in slots:
            if slot.id not in held:
                if not (slot.done.is_set() or _let_go(slot)):  # not its own release meanwhile
                    slot._lose(str(lease_lost(slot.id, slot.gen)))
                continue
            slot.control = held[slot.id]
            if slot.control:
                slot.wake.set()
        for account in {s.row.get("account") for s in slots if isinstance(s.row.get("account"), str)}:
            self._pause_now(account, [s for s in slots if s.row.get("account") == account])

    def _wind_down(self, now: bool) -> None:
        self.log("draining" if not now else "stopping", loops=[s.name for s in self.slots.values()])
        for slot in self.slots.values():
            slot.drain = True
            slot.stop_now = slot.stop_now or now
            slot.wake.set()

    def _beat(self) -> None:
        self._renew()
        try:
            mine = self.registry.worker_beat(
                self.opts.name,
                self.opts.host,
                self.opts.slots,
                len(self.slots),
                self.opts.account,
                list(self.slots),
                allow_repo=self.opts.allow,
                allow_verify=self.opts.allow_verify,
                lease=self.lease,
                token=self.token,
                heartbeat=self.heartbeat,
            )
        except RegistryError as exc:
            return self.log("database", error=str(exc))
        if not mine and not self.name_taken:  # said once: its loops are fenced by their claims
            self.log(
                "name_taken", error=f"another worker took the name {self.opts.name} while this one was away"
            )
        self.name_taken = not mine
