"""The fleet's limits: a daily dollar budget and a cap on running loops, for the whole fleet,
one account or one tag; and an account's pause after a usage limit (HTTP 429).

Each limit is checked in the transaction of what it guards, so that two machines never both
pass a check that only one of them should:
- at claim (:meth:`Queue.claim` asks :meth:`Limits.claim_gate`): a loop of a paused account,
  or of a scope at its running cap or past today's dollar cap, is left queued. On PostgreSQL
  claims take turns on the running caps (the rows of ``fleet_limits`` are locked), so that
  counting the running loops and taking one more is one step for the whole fleet.
- at each iteration boundary (:meth:`Limits.record_spend`): the iteration's dollars are added to
  today's spend of each of the loop's scopes in the transaction of its fenced progress write,
  and the totals are compared with the caps there. A loop whose iteration reached a cap is told
  to end ``BUDGET_EXHAUSTED:fleet_dollars``, and in the same transaction every other running
  loop of that scope is asked (its control, a notification to its worker) to make the iteration
  it is in its last.
- the room under a dollar cap is held (registry/reservations.py): each running loop holds the
  expected cost of the iterations it has begun or may begin, a claim holds its loop's first two,
  and a boundary lets its loop begin another only while the spend and every hold stay within
  the cap (else the iteration under way is the last): the caps are passed by about one
  iteration in all, not one per running loop.

A day is the UTC date of the database's clock: the budget resets at midnight UTC on every
machine at once.
"""

from __future__ import annotations

import math
import time
from collections import Counter

from loopwright.core.outcomes import budget_exhausted
from loopwright.registry import reservations
from loopwright.registry.api import RegistryError
from loopwright.registry.queue import (
    CONTROL_CHANNEL,
    PROGRESS,
    PROGRESS_CHANNEL,
    QUEUE_CHANNEL,
    fenced,
    json_text,
    json_value,
)

FLEET = "fleet"
SCOPE_KINDS = ("account", "tag")
OUT_OF_BUDGET = budget_exhausted("fleet_dollars")
SPENT = "budget"  # a running loop's control once a budget it counts in is spent (Limits._tell_spent)

# The limits and the pauses in force, in one read (a claim with no limits costs one query).
GATE = (
    "SELECT scope, max_dollars_per_day, max_running, NULL AS until, {now} AS now FROM fleet_limits "
    "UNION ALL SELECT 'account:' || account, NULL, NULL, until, {now} FROM account_pauses "
    "WHERE until > {now}"
)
SET = (
    "INSERT INTO fleet_limits (scope, max_dollars_per_day, max_running, updated_at) "
    "VALUES (%s, %s, %s, {now}) ON CONFLICT (scope) DO UPDATE SET "
    "max_dollars_per_day = COALESCE(excluded.max_dollars_per_day, fleet_limits.max_dollars_per_day), "
    "max_running = COALESCE(excluded.max_running, fleet_limits.max_running), updated_at = excluded.updated_at"
)
ADD = (
    "INSERT INTO fleet_spend (day, scope, dollars) VALUES (%s, %s, %s) ON CONFLICT (day, scope) "
    "DO UPDATE SET dollars = fleet_spend.dollars + excluded.dollars RETURNING dollars"
)
# A later report never shortens a pause (workers on one account see the same limit at
# slightly different times); resume_account ends one.
PAUSE = (
    "INSERT INTO account_pauses (account, until, reason, set_by, at) VALUES (%s, %s, %s, %s, {now}) "
    "ON CONFLICT (account) DO UPDATE SET until = CASE WHEN account_pauses.until > excluded.until "
    "THEN account_pauses.until ELSE excluded.until END, reason = excluded.reason, "
    "set_by = excluded.set_by, at = excluded.at"
)
LIMITS = "SELECT scope, max_dollars_per_day, max_running, updated_at FROM fleet_limits"
PAUSE_OF = "SELECT account, until, reason, set_by, at FROM account_pauses WHERE account = %s"
PAUSES = "SELECT account, until, reason, set_by, at FROM account_pauses WHERE until > {now}"
RUNNING = "SELECT id, account, tags FROM fleet_loops WHERE status = 'running'"
END_OVER = (
    "UPDATE fleet_loops SET status = 'ended', outcome = %s, reason = %s, worker = NULL, "
    "lease_expires = NULL, updated_at = {now} WHERE id = %s"
)


def day_of(now: float) -> str:
    """The UTC day of a time by the database's clock: the key of that day's spend."""
    return time.strftime("%Y-%m-%d", time.gmtime(now))


def check_scope(scope) -> str:
    """``scope`` when it is one: 'fleet', 'account:<name>' or 'tag:<name>'."""
    if scope == FLEET:
        return scope
    kind, _, name = scope.partition(":") if isinstance(scope, str) else ("", "", "")
    if kind in SCOPE_KINDS and name and name.isprintable() and name.strip() == name:
        return scope
    raise RegistryError(f"bad limits scope {scope!r}: use fleet, account:<name> or tag:<name>")


def scopes_of(account, tags) -> list[str]:
    """The scopes a loop counts in, in the one order every transaction locks spend rows in (two
    boundaries that lock them in opposite orders could deadlock). Tags are whatever the row
    holds: only names count."""
    found = {FLEET}
    if isinstance(account, str):
        found.add(f"account:{account}")
    if isinstance(tags, list):
        found |= {f"tag:{t}" for t in tags if isinstance(t, str) and t}
    return sorted(found)


def _cap(value, kind, what: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RegistryError(f"{what} is a number, not {value!r}")
    value = kind(value)
    if not math.isfinite(value) or value < 0:
        raise RegistryError(f"{what} is a number of 0 or more, not {value!r}")
    return value


def _progress_sets(fields: dict) -> tuple[str, tuple]:
    """The SET clause of a progress write (the fields Queue.progress takes, checked the same)."""
    unknown = sorted(set(fields) - set(PROGRESS))
    if unknown:
        raise ValueError(f"not a progress field: {', '.join(unknown)}")
    if fields.get("status", "running") not in ("running", "waiting_gate"):
        raise ValueError("progress sets status running or waiting_gate (finish ends, release requeues)")
    values = {k: json_text(v) if k in ("state", "gate") and v is not None else v for k, v in fields.items()}
    return ", ".join(f"{k} = %s" for k in values), tuple(values.values())


def _money(dollars: float) -> str:
    return f"${dollars:,.2f}"


def whose(scope: str) -> str:
    """Whose budget a scope is, in a sentence: the fleet's, account a's, tag t's."""
    if scope == FLEET:
        return "the fleet's"
    kind, _, name = scope.partition(":")
    return f"{kind} {name}'s"


def over_reason(scope: str, cap: float, spent: float, day: str) -> str:
    return f"{whose(scope)} daily budget of {_money(cap)} is spent ({_money(spent)} on {day} UTC)"


def room_reason(scope: str, cap: float, spent: float, held: float, each: float) -> str:
    """Why a loop may not begin another iteration: it would pass ``scope``'s cap."""
    return (
        f"{whose(scope)} daily budget of {_money(cap)} would be passed by another iteration "
        f"({_money(spent)} spent today, {_money(held)} held by running iterations, about {_money(each)} "
        "an iteration)"
    )


class ClaimGate:
    """What the limits let one claim take, read at the start of the claim's transaction.

    ``where`` (SQL, args) leaves out queued loops of a paused or capped account, or every
    queued loop when the fleet is capped; ``admits`` checks a row it let through (tag caps, a
    failover: a loop whose worker went away is counted among the running already)."""

    def __init__(self, tx, dialect: str) -> None:
        rows = tx.rows(GATE)
        self.paused = {r["scope"].partition(":")[2] for r in rows if r["until"] is not None}
        limits = [r for r in rows if r["until"] is None]
        self.dollar_caps = {
            r["scope"]: r["max_dollars_per_day"] for r in limits if r["max_dollars_per_day"] is not None
        }
        self.running_caps: dict[str, int] = {}
        self.running: Counter = Counter()
        self.spent: dict[str, float] = {}
        self.day = day_of(rows[0]["now"]) if rows else ""
        self.holds, self.unknown, self.own = {}, {}, {}
        self.mean: list = []  # the fleet's mean iteration cost, once read: [None] when none is known
        if self.dollar_caps:  # first: every decision on the room under a cap locks these in this order
            reservations.lock_caps(tx, dialect)
        if any(r["max_running"] is not None for r in limits):
            self._count_running(tx, dialect)
        if self.dollar_caps:
            spend = tx.rows("SELECT scope, dollars FROM fleet_spend WHERE day = %s", (self.day,))
            self.spent = {r["scope"]: r["dollars"] for r in spend}
            self.holds, self.unknown, self.own = reservations.held(tx, scopes_of, self.dollar_caps)
        self.active = bool(rows)
        self.sifts = any(s.startswith("tag:") for s in (*self.dollar_caps, *self.running_caps))
        self.where = self._where()

    def _count_running(self, tx, dialect: str) -> None:
        # Claims take turns here: the count below and the row this claim takes are one step.
        lock = " FOR UPDATE" if dialect == "postgres" else ""
        caps = tx.rows(
            f"SELECT scope, max_running FROM fleet_limits WHERE max_running IS NOT NULL ORDER BY scope{lock}"
        )
        self.running_caps = {r["scope"]: r["max_running"] for r in caps}
        for row in tx.rows(RUNNING):
            self.running.update(scopes_of(row["account"], json_value(row["tags"])))

    def _full(self, scope: str, failover: bool = False) -> bool:
        """At its running cap (a failover is counted among the running already)."""
        cap = self.running_caps.get(scope)
        return cap is not None and self.running[scope] - failover >= cap

    def _over(self, scope: str) -> bool:
        cap = self.dollar_caps.get(scope)
        return cap is not None and self.spent.get(scope, 0.0) >= cap

    def _where(self) -> tuple[str, tuple]:
        if self._full(FLEET) or self._over(FLEET):
            return " AND status <> 'queued'", ()
        capped = {s for s in (*self.running_caps, *self.dollar_caps) if s.startswith("account:")}
        shut = sorted(self.paused | {s.partition(":")[2] for s in capped if self._full(s) or self._over(s)})
        if not shut:
            return "", ()
        marks = ", ".join("%s" for _ in shut)
        return f" AND (status <> 'queued' OR account NOT IN ({marks}))", tuple(shut)

    def admits(self, tx, row: dict) -> bool:
        """Whether the claim may take ``row``. A failover past a dollar cap is ended here: the
        loops that were running with it end at their next boundary, this is its."""
        if not self.active:
            return True
        if row["account"] in self.paused:
            return False
        failover = row["status"] == "running"
        scopes = scopes_of(row["account"], json_value(row["tags"]))
        if any(self._full(s, failover) for s in scopes):
            return False
        over = [s for s in scopes if self._over(s)]
        if not over:
            return self._room(tx, row, scopes, failover)
        if failover:
            reason = over_reason(over[0], self.dollar_caps[over[0]], self.spent.get(over[0], 0.0), self.day)
            tx.run(END_OVER, (OUT_OF_BUDGET, reason, row["id"]))
            self.running.subtract(scopes)
        return False

    def _room(self, tx, row: dict, scopes: list[str], failover: bool) -> bool:
        """Whether the dollar caps of ``row``'s scopes have room for its first two iterations,
        held for it when they do (registry/reservations.py). A loop with no cost to go by, its
        own nor the fleet's, runs while no other of its capped scopes does; a failover that
        would pass a cap ends here, like one past it."""
        caps = {s: self.dollar_caps[s] for s in scopes if s in self.dollar_caps}
        if not caps:
            return True
        holds, unknown = dict(self.holds), dict(self.unknown)
        mine = self.own.get(row["id"], 0.0) if failover else 0.0
        for scope in caps:  # a failover's own hold is its to replace
            holds[scope] -= max(0.0, mine) if mine is not None else 0.0
            unknown[scope] -= mine is None
        each = reservations.loop_mean(row)
        if each is None:
            if not self.mean:
                self.mean.append(reservations.fleet_mean(tx))
            each = self.mean[0]
        if each is None:
            if any(unknown[s] for s in caps):
                return False  # one loop at a time until a cost is known
            tx.run(reservations.HOLD, (None, row["id"]))
            return True
        need = reservations.AHEAD * each
        holds = {s: holds[s] + unknown[s] * need for s in caps}  # an unknown hold counted as this one
        short = reservations.short(self.spent, caps, holds, need)
        if short is None:
            tx.run(reservations.HOLD, (need, row["id"]))
            return True
        if failover:
            why = room_reason(short, caps[short], self.spent.get(short, 0.0), holds[short], each)
            tx.run(END_OVER, (OUT_OF_BUDGET, why, row["id"]))
            self.running.subtract(scopes)
        return False


class Limits:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def claim_gate(self, tx) -> ClaimGate:
        """What the limits let the claim running in ``tx`` take (Queue.claim asks)."""
        return ClaimGate(tx, self.backend.dialect)

    def set_limits(self, scope: str, *, max_dollars_per_day=None, max_running=None) -> dict:
        """Sets the caps given for ``scope`` ('fleet', 'account:<name>' or 'tag:<name>'),
        keeping the other as it was; the scope's limits after."""
        check_scope(scope)
        dollars = _cap(max_dollars_per_day, float, "--max-dollars-per-day")
        running = _cap(max_running, int, "--max-running")
        if isinstance(max_running, float) and not max_running.is_integer():
            raise RegistryError(f"--max-running is a whole number, not {max_running!r}")
        if dollars is None and running is None:
            raise RegistryError("give a cap to set: --max-dollars-per-day D or --max-running N")
        with self.backend.tx() as tx:
            tx.run(SET, (scope, dollars, running))
            self.backend.notify(tx, QUEUE_CHANNEL, f"limits:{scope}")  # a raised cap frees claims
            return tx.one(LIMITS + " WHERE scope = %s", (scope,))

    def clear_limits(self, scope: str) -> bool:
        """Removes the caps of ``scope``; whether it had any."""
        check_scope(scope)
        with self.backend.tx() as tx:
            gone = tx.run("DELETE FROM fleet_limits WHERE scope = %s", (scope,)) == 1
            self.backend.notify(tx, QUEUE_CHANNEL, f"limits:{scope}")
        return gone

    def limits(self) -> list[dict]:
        """Every scope's caps, with its loops running now and its spend today: the fleet
        first, then accounts and tags by name."""
        return self.limits_report()["limits"]

    def limits_report(self) -> dict:
        """The UTC day, the limits (as :meth:`limits`), each with today's spend, its running
        loops and what they hold (registry/reservations.by_scope), today's spend of every scope
        that spent, the pauses in force, and the fleet's mean iteration cost (what a claim
        holds for a loop that has none of its own): what `fleet limits` and the page show."""
        with self.backend.tx() as tx:
            now = tx.one("SELECT {now} AS now")["now"]
            day = day_of(now)
            rows = tx.rows(LIMITS)
            spend = {r["scope"]: r["dollars"] for r in tx.rows(SPEND_OF_DAY, (day,))}
            running = reservations.by_scope(tx, scopes_of)
            pauses = tx.rows(PAUSES + " ORDER BY account")
            mean = reservations.fleet_mean(tx)
        rows.sort(key=lambda r: (r["scope"] != FLEET, r["scope"]))
        idle = {"running": 0, "held": 0.0, "held_unknown": 0}
        limits = [
            dict(r, spent_today=spend.get(r["scope"], 0.0), **running.get(r["scope"], idle)) for r in rows
        ]
        return {
            "day": day,
            "now": now,
            "limits": limits,
            "spend": spend,
            "pauses": pauses,
            "iteration_mean": mean,
        }

    def spend_today(self, scope: str = FLEET) -> float:
        """Dollars ``scope`` spent today (UTC, by the database's clock)."""
        check_scope(scope)
        with self.backend.tx() as tx:
            day = day_of(tx.one("SELECT {now} AS now")["now"])
            row = tx.one("SELECT dollars FROM fleet_spend WHERE day = %s AND scope = %s", (day, scope))
        return row["dollars"] if row else 0.0

    def record_spend(
        self, loop_id: str, generation: int, dollars_delta: float, *, reserve=None, **progress_fields
    ) -> dict:
        """An iteration boundary: the progress write (fields as Queue.progress takes them,
        fenced: LeaseLost when this claim no longer stands, nothing added) and the iteration's
        ``dollars_delta`` added to today's spend of the fleet, the loop's account and each of
        its tags, in one transaction, compared there with the caps. ``stop`` is the outcome the
        loop must end with now (a cap reached), ``paused_until`` when its account is paused.
        ``reserve``: the loop's expected iteration cost when it goes on (an iteration is under
        way, and it may begin another); ``last`` then says why the one under way must be its
        last (another would pass a cap: registry/reservations.py). None: nothing more runs,
        the loop holds nothing."""
        delta = _cap(dollars_delta, float, "an iteration's dollars")
        each = _cap(reserve, float, "an iteration's expected dollars")
        sets, args = _progress_sets(progress_fields)
        with self.backend.tx() as tx:
            fenced(tx, loop_id, generation, sets, args)
            row = tx.one(
                "SELECT account, tags, control, gate, {now} AS now FROM fleet_loops WHERE id = %s", (loop_id,)
            )
            day, scopes = day_of(row["now"]), scopes_of(row["account"], json_value(row["tags"]))
            caps = reservations.lock_caps(tx, self.backend.dialect, scopes)
            caps = {r["scope"]: r["max_dollars_per_day"] for r in caps}
            spent = {s: _add(tx, day, s, delta) for s in scopes}
            pause = tx.one(PAUSES + " AND account = %s", (row["account"],))
            self.backend.notify(tx, PROGRESS_CHANNEL, loop_id)
            over = sorted((s != FLEET, s, cap) for s, cap in caps.items())
            over = [(s, cap) for _, s, cap in over if spent[s] >= cap]
            last = self._hold(tx, loop_id, spent, caps, each, bool(over))
            if over:
                self._tell_spent(tx, loop_id, {s for s, _ in over})
        return {
            "stop": OUT_OF_BUDGET if over else None,
            "reason": over_reason(over[0][0], over[0][1], spent[over[0][0]], day) if over else None,
            "last": last,
            "spent_today": spent,
            "caps": caps,
            "paused_until": pause["until"] if pause else None,
            "control": row["control"],
            "gate": json_value(row["gate"]),
        }

    def _hold(self, tx, loop_id: str, spent: dict, caps: dict, each, over: bool) -> str | None:
        """What the loop holds after its boundary: nothing when nothing more runs, else the
        iteration under way, and the next when every cap has room for it; the reason the one
        under way is its last when one has not."""
        last = None
        if each is not None and caps and not over:
            holds, unknown, _ = reservations.held(tx, scopes_of, caps, but=loop_id)
            need = reservations.AHEAD * each
            holds = {s: holds[s] + unknown[s] * need for s in caps}  # an unknown hold counted as this one
            short = reservations.short(spent, caps, holds, need)
            if short is not None:
                last = room_reason(short, caps[short], spent[short], holds[short], each)
        ahead = 0 if each is None else 1 if (last or over) else reservations.AHEAD
        tx.run(reservations.HOLD, (ahead * (each or 0.0), loop_id))
        return last

    def _tell_spent(self, tx, loop_id: str, scopes: set[str]) -> None:
        """Every other running loop that counts in a scope whose budget is now spent is told at
        once (its control, and a notification to its worker), not at its own next boundary:
        the iteration it is in becomes its last, so that each running loop goes at most one
        iteration past the cap. A stop or cancel already asked for stands. A row another
        transaction holds is skipped, never waited for (two boundaries crossing at once would
        deadlock on each other's rows): its own boundary, under way, sees the spend."""
        lock = " FOR UPDATE SKIP LOCKED" if self.backend.dialect == "postgres" else ""
        for other in tx.rows(RUNNING + " AND control IS NULL AND id <> %s" + lock, (loop_id,)):
            if scopes & set(scopes_of(other["account"], json_value(other["tags"]))):
                tx.run(
                    "UPDATE fleet_loops SET control = %s WHERE id = %s AND control IS NULL",
                    (SPENT, other["id"]),
                )
                self.backend.notify(tx, CONTROL_CHANNEL, other["id"])

    def pause_account(self, account: str, until: float, reason: str, by: str) -> dict:
        """Pauses ``account`` until ``until`` (epoch seconds; a usage limit's reset): no claims
        of its loops, and its running loops are told at their boundary. Extends a pause in
        force, never shortens it. Every worker listening is told (``account:<name>``)."""
        if not isinstance(account, str) or not account:
            raise RegistryError(f"bad account name {account!r}")
        until = _cap(until, float, "a pause's end")
        with self.backend.tx() as tx:
            tx.run(PAUSE, (account, until, reason, by))
            self.backend.notify(tx, CONTROL_CHANNEL, f"account:{account}")
            return tx.one(PAUSE_OF, (account,))

    def account_pause(self, account: str) -> dict | None:
        """The pause ``account`` is under now, or None (read with every heartbeat: one statement)."""
        rows = self.backend.once(PAUSES + " AND account = %s", (account,))
        return rows[0] if rows else None

    def account_pauses(self) -> list[dict]:
        """Every pause in force, by account."""
        with self.backend.tx() as tx:
            return tx.rows(PAUSES + " ORDER BY account")

    def resume_account(self, account: str) -> bool:
        """Ends ``account``'s pause now; whether it had one in force."""
        with self.backend.tx() as tx:
            had = tx.one(PAUSES + " AND account = %s", (account,)) is not None
            tx.run("DELETE FROM account_pauses WHERE account = %s", (account,))
            self.backend.notify(tx, CONTROL_CHANNEL, f"account:{account}")
            self.backend.notify(tx, QUEUE_CHANNEL, f"account:{account}")
        return had


SPEND_OF_DAY = "SELECT scope, dollars FROM fleet_spend WHERE day = %s ORDER BY scope"


def _add(tx, day: str, scope: str, delta: float) -> float:
    """``scope``'s spend today after adding ``delta``. The row stays locked until the boundary's
    transaction ends, so that two boundaries crossing a cap at once both see the total."""
    if delta == 0:
        row = tx.one("SELECT dollars FROM fleet_spend WHERE day = %s AND scope = %s", (day, scope))
        return float(row["dollars"]) if row else 0.0
    return float(tx.one(ADD, (day, scope, delta))["dollars"])
