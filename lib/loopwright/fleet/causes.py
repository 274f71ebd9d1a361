"""Why a fleet loop failed, recorded where the fleet looks (issue 27 part 2): the errors its
Claude Code client gave up on (the runner's ``client_exit`` events carry them, worded by
core/clienterror.py) and the worker's own failures (a clone that failed, a runner that could not
start or exited with the loop still active, with its last stderr lines) go into the loop's row
(``last_error``) and its timeline with this worker's host (registry/causes.py), not only into
the worker's output and a log file on its machine.

A slot holds one :class:`Causes`. The runner's events are read on a thread of their own; the
errors they carry are written by the slot's own thread, in order, each once.
"""

from __future__ import annotations

import threading

from loopwright.core import clienterror
from loopwright.registry import LeaseLost, RegistryError

LOG_TAIL = 4096  # bytes of the runner's log read for its last lines
JOIN_SECONDS = 5.0  # for the reader of the runner's output to reach its end


class Causes:
    def __init__(self, slot) -> None:
        self.slot = slot
        self.where = {"host": slot.w.opts.host}  # added to the slot's timeline events
        self.pending: list[dict] = []  # client_exit events with an error, not recorded yet
        self.reader: threading.Thread | None = None

    def start_reader(self, target, name: str) -> None:
        """Reads the runner's output (``target``) on a thread of its own."""
        self.reader = threading.Thread(target=target, name=name, daemon=True)
        self.reader.start()

    def see(self, event: dict) -> None:
        """A runner event (reader thread): a client's exit with an error is kept for :meth:`report`."""
        if event.get("event") == "client_exit" and event.get("error"):
            self.pending.append(event)
            self.slot.wake.set()

    def report(self, wait: bool = False) -> None:
        """Records the client errors seen so far; with ``wait``, once the runner's output was read
        to its end (the runner has exited)."""
        if wait and self.reader is not None:
            self.reader.join(JOIN_SECONDS)
        while self.pending:
            event = self.pending.pop(0)
            self.note(clienterror.scrub(event.get("error")), "client_error", code=event.get("code"))

    def worker_failed(self, exc: BaseException) -> str:
        """The worker failed at this loop (a clone, a runner that would not start, …): recorded,
        and the reason to hand the loop back with."""
        why = clienterror.scrub(f"the worker failed: {type(exc).__name__}: {exc}")
        self.note(why, "worker_error")
        return why

    def runner_exited(self, code) -> str:
        """The runner exited with the loop still active: why, with its last stderr lines (a
        missing --claude, a bad option), recorded; the reason to hand the loop back with."""
        why = f"the runner exited (code {code}) with the loop still active"
        said = clienterror.from_stderr(self._log_tail())
        why = f"{why}: {said}" if said else why
        self.note(why, "worker_error", code=code)
        return why

    def note(self, error: str, kind: str, **data) -> None:
        """The loop's latest error into its row and timeline (fenced: a claim that is gone
        records nothing, the loop is another worker's by then) and the worker's output."""
        slot = self.slot
        slot.w.log(kind, loop=slot.name, error=error)
        try:
            slot._write(slot.w.registry.record_error, error, kind, **self.where, **data)
        except LeaseLost as exc:
            slot._lose(str(exc))
        except RegistryError as exc:
            slot.w.log("database", loop=slot.name, error=str(exc))

    def _log_tail(self) -> str:
        slot = self.slot
        try:
            with open(slot.w.data / "logs" / f"{slot.name}-{slot.gen}.log", "rb") as fh:
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - LOG_TAIL))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
