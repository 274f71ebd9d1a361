"""What on the fleet needs its operator: gates waiting for an answer, loops that failed (with
their cause), queued loops that no worker will take now (with the reason), and workers that went
quiet. Pure: the monitor reads the rows, workers, pauses and limits, and the database's clock,
and shows what this says (serve/fleetwatch.py).

Everything here reads rows that whoever can write the database can fill with anything: a field
of the wrong type counts as absent, never as an error.
"""

from __future__ import annotations

import time

from loopwright.core.outcomes import CANCELLED, LOOP_DONE, stopped

# Ended as it should: the goal met, or a person's own cancel, stop, or stop answer at a gate.
# Every other outcome (MAX_ITERATIONS, BUDGET_EXHAUSTED:*, STOPPED:stall_limit, …) ended the loop
# before its goal was met: a failure, shown with its cause.
SUCCESSES = (LOOP_DONE, CANCELLED, stopped("user_stop"))
PERSON_STOPS = "GATE_STOP:"  # the user answered stop at a gate (core/outcomes.gate_stop)
# A worker is alive while its last beat is within its lease (so the claims it holds stand), else
# stale (its loops fail over); stopped once it said so, or after ten minutes of silence. A worker
# that publishes no lease is given STALE_AFTER.
ALIVE, STALE, STOPPED = "alive", "stale", "stopped"
STALE_AFTER = 60.0
STOPPED_AFTER = 600.0
WORKER_STATES = (ALIVE, STALE, STOPPED)
HELD = ("running", "waiting_gate")
# Iterations of a loop's expected cost a claim holds under a dollar cap: the one it begins and
# the one it may begin before the first is recorded (registry/reservations.py).
AHEAD = 2


def failed(outcome) -> bool:
    """Whether an ended loop's ``outcome`` is a failure (see SUCCESSES)."""
    if not isinstance(outcome, str) or not outcome:
        return True  # ended with no outcome recorded: nobody can say it went well
    return outcome not in SUCCESSES and not outcome.startswith(PERSON_STOPS)


def failure_sql(column: str = "outcome") -> str:
    """The SQL condition of :func:`failed` on an ended row's ``column`` (the same list; no
    LIKE: a ``%`` would be a placeholder to the driver)."""
    listed = ", ".join(f"'{s}'" for s in SUCCESSES)
    person = f"substr({column}, 1, {len(PERSON_STOPS)}) <> '{PERSON_STOPS}'"
    return f"({column} IS NULL OR {column} = '' OR ({column} NOT IN ({listed}) AND {person}))"


def _number(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def worker_state(worker: dict, now: float | None = None) -> str:
    """alive, stale or stopped: the one rule of `fleet workers`, the page, the metrics and
    `submit`. Stopped: the worker said so as it left (``stopped_at`` at or after its last beat;
    one started again under the same name beats after it), or it has been silent STOPPED_AFTER.
    Alive: its last beat is within its lease. ``now`` is the database's clock when the row was
    read; without it, the row's ``age`` (seconds since its beat, by that same clock)."""
    beat, left = _number(worker.get("beat_at")), _number(worker.get("stopped_at"))
    if worker.get("state") == STOPPED or (left is not None and (beat is None or left >= beat)):
        return STOPPED
    age = float(now) - beat if now is not None and beat is not None else _number(worker.get("age"))
    if age is None or age >= STOPPED_AFTER:
        return STOPPED
    lease = _number(worker.get("lease"))
    return ALIVE if age < (max(lease, 1.0) if lease else STALE_AFTER) else STALE


def went_quiet(worker: dict, now: float | None = None) -> bool:
    """Whether ``worker`` needs its operator: stale, or stopped without saying so (silent
    STOPPED_AFTER). One that said, as it left, that it stopped (a drain, a restart under a new
    name) does not: it stays listed, stopped, until `fleet workers --forget-stopped`."""
    state = worker_state(worker, now)
    beat, left = _number(worker.get("beat_at")), _number(worker.get("stopped_at"))
    goodbye = left is not None and (beat is None or left >= beat)
    return state == STALE or (state == STOPPED and not goodbye)


def _scopes(row: dict) -> list[str]:
    """The limit scopes a loop counts in (as registry/limits.scopes_of names them)."""
    found = ["fleet"]
    if isinstance(row.get("account"), str):
        found.append(f"account:{row['account']}")
    tags = row.get("tags") if isinstance(row.get("tags"), list) else []
    return found + [f"tag:{t}" for t in tags if isinstance(t, str) and t]


def _whose(scope: str) -> str:
    if scope == "fleet":
        return "the fleet's"
    kind, _, name = scope.partition(":")
    return f"{kind} {name}'s"


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))


class Queue:
    """What decides whether a queued loop can be claimed now: the pauses in force, the caps
    and their use today, the live workers; ``accepts(worker, row)`` (None, or the reason it
    would refuse the row: its repository, its verify) for workers that publish what they take."""

    def __init__(
        self, workers: list[dict], pauses: list[dict], limits: list[dict], now: float, accepts=None, mean=None
    ):
        self.now, self.accepts, self.mean = now, accepts, _number(mean)
        self.pauses = {
            p["account"]: p
            for p in pauses
            if isinstance(p.get("account"), str) and (_number(p.get("until")) or 0) > now
        }
        self.limits = {lim["scope"]: lim for lim in limits if isinstance(lim.get("scope"), str)}
        self.workers = [w for w in workers if worker_state(w) == "alive"]
        self.known = bool(workers)

    def _paused(self, row: dict) -> str | None:
        pause = self.pauses.get(row.get("account"))
        if pause is None:
            return None
        why = pause.get("reason")
        tail = f": {why}" if isinstance(why, str) and why else ""
        return f"account {row['account']} is paused until {_utc(float(pause['until']))}{tail}"

    def _each(self, row: dict) -> float | None:
        """What a claim would expect an iteration of ``row`` to cost: its own mean when it ran
        before, else the fleet's (registry/reservations.py holds two of them at a claim)."""
        iterations, dollars = row.get("iteration"), _number(row.get("dollars"))
        if type(iterations) is int and iterations > 0 and dollars is not None:
            return max(0.0, dollars) / iterations
        return self.mean

    def _unaffordable(self, row: dict, scope: str, lim: dict) -> str | None:
        """Why a claim would not fit under ``scope``'s daily budget, spent or held by running loops."""
        cap, spent = _number(lim.get("max_dollars_per_day")), _number(lim.get("spent_today")) or 0.0
        if cap is None:
            return None
        whose = f"{_whose(scope)} daily budget of ${cap:,.2f}"
        if spent >= cap:
            return f"{whose} is spent (${spent:,.2f} today)"
        held, unknown, each = (
            _number(lim.get("held")) or 0.0,
            _number(lim.get("held_unknown")) or 0,
            self._each(row),
        )
        if each is None:
            if unknown > 0:
                return (
                    f"{whose}: a running loop's cost is not known yet, and it runs one at a time until it is"
                )
            return None
        held += unknown * AHEAD * each  # a hold of unknown cost counted as this loop's (as a claim does)
        if spent + held + AHEAD * each > cap + 1e-9:
            return (
                f"{whose} has no room for another loop: ${spent:,.2f} spent today, ${held:,.2f} held by"
                f" running loops, about ${each:,.2f} an iteration"
            )
        return None

    def _capped(self, row: dict) -> str | None:
        for scope in _scopes(row):
            lim = self.limits.get(scope) or {}
            why = self._unaffordable(row, scope, lim)
            if why:
                return why
            cap, running = _number(lim.get("max_running")), _number(lim.get("running")) or 0.0
            if cap is not None and running >= cap:
                return f"{_whose(scope)} cap of {cap:.0f} running loops is reached"
        return None

    def _unserved(self, row: dict) -> str | None:
        if not self.workers:
            quiet = f"none has beaten in the last {STALE_AFTER:.0f} s" if self.known else "none has started"
            return f"no live worker: {quiet}"
        account = row.get("account")
        takers = [w for w in self.workers if w.get("account") in (None, account)]
        if not takers:
            served = ", ".join(sorted({str(w.get("account")) for w in self.workers}))
            return f"no live worker takes account {account}'s loops (they take {served})"
        if self.accepts is None:
            return None
        refusals = [self.accepts(w, row) for w in takers]
        if all(refusals):
            return f"no live worker accepts it: {refusals[0]}"
        return None

    def reason(self, row: dict) -> str | None:
        """Why the queued ``row`` cannot be claimed now, or None (it waits for a free slot at
        most). The queue's own reason, when its row records one, goes first."""
        own = row.get("waiting_reason")
        if isinstance(own, str) and own.strip():
            return own.strip()
        return self.held_back(row) or self._unserved(row)

    def held_back(self, row: dict) -> str | None:
        """Why the fleet's own rules keep the queued ``row`` from a claim now, whatever the
        workers: its account paused, a cap spent or without room (None: they would let it)."""
        return self._paused(row) or self._capped(row)


def holdings(rows: list[dict], workers: list[dict]) -> dict[str, list[str]]:
    """The names of the loops each worker holds, by worker: the rows whose claim names it (its
    beat's own list may be a beat old; a row's worker is written with the claim)."""
    out: dict[str, list[str]] = {str(w.get("worker")): [] for w in workers}
    for row in rows:
        if row.get("status") in HELD and str(row.get("worker")) in out:
            out[str(row["worker"])].append(str(row.get("name")))
    return {k: sorted(v) for k, v in out.items()}


def attention(rows: list[dict], workers: list[dict], queue: Queue) -> dict:
    """What needs the operator among ``rows`` (fleet loops) and ``workers``: by loop id, why it
    is stuck in the ``queue`` or how it failed; by worker, its state and the loops it holds; and
    the counts of each (``gates``, ``failed``, ``stuck``, ``workers`` that went quiet)."""
    stuck, failures, gates = {}, {}, []
    for row in rows:
        status = row.get("status")
        if status == "queued":
            why = queue.reason(row)
            if why:
                stuck[row.get("id")] = why
        elif status == "waiting_gate":
            gates.append(row.get("id"))
        elif status == "ended" and failed(row.get("outcome")):
            failures[row.get("id")] = cause(row)
    states = {str(w.get("worker")): worker_state(w) for w in workers}
    quiet = {str(w.get("worker")): went_quiet(w) for w in workers}
    return {
        "stuck": stuck,
        "failed": failures,
        "gates": gates,
        "workers": states,
        "quiet": quiet,
        "holds": holdings(rows, workers),
        "counts": {
            "gates": len(gates),
            "failed": len(failures),
            "stuck": len(stuck),
            "workers": sum(quiet.values()),
        },
    }


def stuck_reasons(groups: list[dict], queue: Queue) -> list[list]:
    """Why queued loops wait, over the whole ``queue``: ``groups`` are its loops by what decides
    it (``account``, ``tags``, ``repo``, ``spec``), each with ``n``; the answer is ``[reason,
    loops]`` pairs, the most loops first. The counts a page shows come from here, not from the
    loops it lists (a few hundred of them)."""
    by: dict[str, int] = {}
    for group in groups:
        why = queue.reason(group)  # it has what a reason reads of a queued row
        n = group.get("n")
        if why and isinstance(n, int) and not isinstance(n, bool) and n > 0:
            by[why] = by.get(why, 0) + n
    return [[why, n] for why, n in sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))]


def cause(row: dict) -> str:
    """A failed loop's cause in one line: its outcome, then the reason its row records (the
    client's last error, when the row holds one, after it)."""
    outcome = row.get("outcome") if isinstance(row.get("outcome"), str) else "ended"
    parts = [outcome or "ended"]
    for key in ("reason", "last_error"):
        text = row.get(key)
        if isinstance(text, str) and text.strip() and text.strip() not in parts:
            parts.append(text.strip())
    return ": ".join(parts)
