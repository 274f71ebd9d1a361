"""The fleet as the monitor shows it: a snapshot of its loops, queue, workers, spend and pauses,
rebuilt only when something changed, and a watcher that says when that is.

The watcher listens on the registry's channels (NOTIFY on PostgreSQL: a loop queued, a stop or
a gate's answer, a worker's iteration) and, every few seconds, reads the registry's cheap mark
(registry/fleetview.py) for what notifies nobody: a claim, a worker that joins or takes a slot,
a pause that runs out, and everything on SQLite, which has no notifications. One watcher and one
snapshot serve every page connected to this monitor.

Everything in the snapshot is what the database holds: whoever can write a row can write any of
it, so the page puts it on screen as text only."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from loopwright.core import attention, jsoncodec
from loopwright.fleet.consent import Acceptance
from loopwright.registry.queue import CONTROL_CHANNEL, PROGRESS_CHANNEL, QUEUE_CHANNEL

CHANNELS = (QUEUE_CHANNEL, CONTROL_CHANNEL, PROGRESS_CHANNEL)
POLL_SECONDS = 2.0  # between reads of the mark
GATHER_SECONDS = 0.2  # notifications that come together make one change, not many
MAX_LOOPS = 500  # the loops a page holds, most pressing first; the counts cover them all
GOAL_LINE = 200  # characters of a goal's first line in the list (all of it on demand)
ROW = (
    "id", "name", "kind", "status", "host", "worker", "iteration", "minutes", "tokens", "dollars",
    "outcome", "reason", "account", "tags", "failovers", "generation", "repo", "branch", "work_branch",
    "control", "created_at", "claimed_at", "last_error",
)  # fmt: skip


def goal_of(row: dict) -> str:
    """The loop's goal, or its mode and words, as text (whatever the row's spec holds)."""
    spec = row.get("spec") if isinstance(row.get("spec"), dict) else {}
    if row.get("kind") == "prompt":
        return spec.get("goal") if isinstance(spec.get("goal"), str) else ""
    words = spec.get("args") if isinstance(spec.get("args"), list) else []
    return " ".join([str(row.get("kind") or "")] + [w for w in words if isinstance(w, str)])


def first_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0] if text else ""
    return line if len(line) <= GOAL_LINE else line[:GOAL_LINE] + "…"


def slim(row: dict) -> dict:
    """A loop as the list shows it: its counters, its goal's first line, its limits, the gate
    it waits at; not its spec's whole text, state or last decision (those are on demand)."""
    out = {k: row.get(k) for k in ROW}
    goal = goal_of(row)
    out["goal"] = first_line(goal)
    out["goal_more"] = goal.strip() != out["goal"] or "spec" in (row.get("cut") or ())  # read in part
    spec = row.get("spec") if isinstance(row.get("spec"), dict) else {}
    limits = spec.get("limits") if isinstance(spec.get("limits"), dict) else {}
    out["limits"] = {
        k: v for k, v in limits.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    out["gate"] = row.get("gate") if row.get("status") == "waiting_gate" else None
    out["ended_at"] = row.get("updated_at") if row.get("status") == "ended" else None
    return out


def _marked(row: dict, seen: dict) -> dict:
    """A slim row with what needs the operator: ``failed`` and ``cause`` (a failure), ``stuck``
    (why no worker takes it now)."""
    out = slim(row)
    out["failed"] = row.get("id") in seen["failed"]
    out["cause"] = seen["failed"].get(row.get("id"))
    out["stuck"] = seen["stuck"].get(row.get("id"))
    return out


def detail(row: dict) -> dict:
    """A loop in full, for the page's on-demand view and `GET /api/fleet/{loop}`."""
    return dict(row, goal=goal_of(row))


def snapshot(registry) -> dict:
    """The fleet now: loops (most pressing first: registry/fleetview.py), counts by status and
    of failures, workers with their state and the loops they hold, limits, spend and pauses, and
    what needs the operator (core/attention.py)."""
    rows = registry.page_loops(MAX_LOOPS)
    workers = registry.workers()
    counts = registry.fleet_counts()
    limits = registry.limits_report()
    queue = attention.Queue(
        workers,
        limits["pauses"],
        limits["limits"],
        limits["now"],
        Acceptance(workers),
        limits["iteration_mean"],
    )
    seen = attention.attention(rows, workers, queue)
    why = attention.stuck_reasons(registry.queued_groups(), queue)
    queue = {k: v for k, v in counts.items() if k != "failed"}
    for w in workers:
        name = str(w["worker"])
        w["state"], w["quiet"], w["holds"] = seen["workers"][name], seen["quiet"][name], seen["holds"][name]
    shared = registry.path is None  # a server database: a fleet's, whatever it holds yet
    stuck = sum(n for _, n in why)
    needs = dict(seen["counts"], gates=counts["waiting_gate"], failed=counts["failed"], stuck=stuck)
    return {
        "show": bool(shared or rows or workers),
        "shared": shared,
        "now": limits["now"],
        "loops": [_marked(r, seen) for r in rows],
        "total": sum(queue.values()),
        "queue": queue,
        "failed": counts["failed"],
        "attention": needs,
        "stuck_why": why,
        "workers": workers,
        "limits": limits,
    }


class Wake:
    """One page's stream waiting for the next change (an asyncio event set from the watcher)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def set(self) -> None:
        with contextlib.suppress(RuntimeError):  # its event loop has closed
            self.loop.call_soon_threadsafe(self.event.set)

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.event.wait(), timeout)
        self.event.clear()


class FleetWatch:
    def __init__(self, registry, poll: float = POLL_SECONDS) -> None:
        self.registry, self.poll = registry, poll
        self.version = 0
        self.wakes: set[Wake] = set()
        self._lock = threading.Lock()
        self._built: tuple[int, str] | None = None  # (version, the snapshot's JSON)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener = None

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._listener = self.registry.listener(CHANNELS)
                self._thread = threading.Thread(target=self._run, name="loopwright-fleet-watch", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._listener.close()  # wakes the thread from its wait
            self._thread.join(timeout=10)

    def subscribe(self) -> Wake:
        self.start()
        wake = Wake()
        self.wakes.add(wake)
        return wake

    def unsubscribe(self, wake: Wake) -> None:
        self.wakes.discard(wake)

    def current(self) -> tuple[int, str]:
        """(version, snapshot JSON): built once per change, whoever asks."""
        self.start()
        with self._lock:
            version = self.version
            if self._built is None or self._built[0] != version:
                self._built = (version, jsoncodec.dumps(snapshot(self.registry)).decode())
            return self._built

    def changed(self) -> None:
        with self._lock:
            self.version += 1
        for wake in list(self.wakes):
            wake.set()

    def _run(self) -> None:
        mark, next_poll = None, 0.0
        while not self._stop.is_set():
            # ("", "listening") comes after a reconnect: something may have been missed, a change.
            fresh = bool(self._listener.wait(max(0.0, min(self.poll, next_poll - time.monotonic()))))
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + self.poll
                seen = self._mark()
                if seen is not None and seen != mark:
                    fresh, mark = True, seen
            if fresh:
                self.changed()
                self._stop.wait(GATHER_SECONDS)

    def _mark(self):
        try:
            return self.registry.fleet_mark()
        except Exception:  # the database is away (or closed): the next poll tries again
            return None
