"""The fleet's queue: loops submitted to a shared database, claimed by workers under leases.

A claim is a lease with a generation number. The worker renews the lease by heartbeat, and
every write it makes names the generation its claim gave it (fencing): once another worker
has claimed the loop, or the loop was released or ended, the old worker's writes change
nothing and raise LeaseLost, so it stops that loop without pushing. Lease times come from
the database's clock, the one clock every machine agrees on. A loop whose lease expired is
claimed again, counted as a failover; the fourth failover ends it ``STOPPED:failover_limit``.

Columns holding JSON (spec, tags, state, gate; an event's data) are text in the database and
Python values here. Whoever can write to the database can write any of it: a value that is not
JSON reads as None, never as an error in the reader.
"""

from __future__ import annotations

import uuid

from loopwright.core import jsoncodec
from loopwright.core.outcomes import CANCELLED, stopped
from loopwright.registry import timeline
from loopwright.registry.api import LeaseLost, RegistryError
from loopwright.registry.listing import listed_row
from loopwright.registry.rowlimits import (
    SANE,
    SET_ASIDE_PER_CLAIM,
    BadRow,
    check_sizes,
    check_submit,
    counters_fault,
)

MAX_FAILOVERS = 3
QUEUE_CHANNEL = "loopwright_queue"  # a loop became claimable (payload: its id)
CONTROL_CHANNEL = "loopwright_control"  # stop, cancel or a gate's answer for a loop (its id)
# A worker recorded an iteration, a timeline event or the end of a loop (its id): what a monitor's
# page shows changed. Heartbeats and claims do not notify (monitors poll a cheap mark for those).
PROGRESS_CHANNEL = "loopwright_progress"
PROGRESS = ("iteration", "minutes", "tokens", "dollars", "state", "last_decision", "status", "gate")
JSON_COLUMNS = ("spec", "tags", "state", "gate")
BATCH = 16  # rows a filtered claim looks at (and locks) at a time
HELD = "status IN ('running', 'waiting_gate')"  # a worker's claim still stands
IDLE = "status IN ('queued', 'waiting_gate')"  # no worker drives the loop

# The two kinds of claimable row, each read in the order of an index of its own (so that a
# claim reads a few index entries, not every queued row), both in one statement. Loops that
# failed over come first: they were started already, and a failover is promised within
# about one lease.
KINDS_OF_CLAIMABLE = (
    ("status = 'running' AND lease_expires < (SELECT {now})", "lease_expires"),
    # A loop that could not be prepared waits until not_before (registry/faults.py).
    ("status = 'queued' AND (not_before IS NULL OR not_before <= (SELECT {now}))", "created_at"),
)
FIRST_PAGES = {0: (), 1: ()}  # a read from the start of each kind
# The claim at once (PostgreSQL): the first claimable row is taken by the statement that finds
# and locks it, as _take would take it, only while no fleet limit nor account pause is in force
# (limits.py) and it is not at its failover limit. {head} reads the ids (_page), {known} keeps to
# the repositories a worker allowed.
UNLIMITED = (
    " AND NOT EXISTS (SELECT 1 FROM fleet_limits)"
    " AND NOT EXISTS (SELECT 1 FROM account_pauses WHERE until > {now})"
)
AT_ONCE = (
    "UPDATE fleet_loops SET worker = %s, host = %s, generation = generation + 1, status = 'running', "
    "lease_expires = t.now + %s, failovers = failovers + CASE WHEN worker IS NULL THEN 0 ELSE 1 END, "
    "claimed_at = t.now, updated_at = t.now FROM (SELECT {now} AS now) AS t "
    "WHERE id = (SELECT id FROM ({head}) AS h LIMIT 1) AND NOT (worker IS NOT NULL AND failovers >= %s)"
    "{known}" + SANE + UNLIMITED + " RETURNING fleet_loops.*"
)
# A claim that asks ``accepts`` about each loop (a worker's --allow-verify) takes at once only a
# loop whose spec cannot hold a verify: no "verify" key in its text, and no \u escape that could
# spell one. Every other loop is asked about in claim()'s own transaction.
PLAIN_SPEC = " AND position('\"verify\"' in spec) = 0 AND position(chr(92) || 'u' in spec) = 0"
MEMO_REPOS = 1000  # repositories a worker's allow-list is remembered to allow, at most
_AT_ONCE_SQL: dict[tuple, str] = {}  # by (accounts, repositories: 0, 1 or more, asks about loops)

FIND = " FROM fleet_loops WHERE id = %s OR name = %s ORDER BY CASE WHEN id = %s THEN 0 ELSE 1 END LIMIT 1"
TAKE = (
    "UPDATE fleet_loops SET worker = %s, host = %s, generation = %s, status = 'running', "
    "lease_expires = %s, failovers = %s, claimed_at = %s, updated_at = %s WHERE id = %s"
)
TAKEN = ("worker", "host", "generation", "lease_expires", "failovers", "claimed_at", "updated_at", "id")


def _when_idle(column: str, value: str) -> str:
    return f"{column} = CASE WHEN {IDLE} THEN {value} ELSE {column} END"


# One statement, so that a claim between a read and a write cannot slip in: every CASE reads
# the row as it was before this update.
ENDS_IDLE = {"outcome": "%s", "reason": "%s", "worker": "NULL", "lease_expires": "NULL", "status": "'ended'"}
REQUEST = (
    "UPDATE fleet_loops SET control = %s, updated_at = {now}, "
    + ", ".join(_when_idle(c, v) for c, v in ENDS_IDLE.items())
    + " WHERE id = %s AND status <> 'ended'"
)
ANSWER = (
    "UPDATE fleet_loops SET gate = %s, status = 'queued', worker = NULL, lease_expires = NULL, "
    "updated_at = {now} WHERE id = %s AND status = 'waiting_gate' AND updated_at = %s"
)

ANSWERED = "INSERT INTO fleet_events (loop_id, at, generation, kind, data) VALUES (%s, {now}, %s, 'gate', %s)"


def json_text(value) -> str:
    return jsoncodec.dumps(value).decode("utf-8")


def json_value(text):
    """The value JSON ``text`` holds; None for NULL or for text that is not JSON."""
    if text is None:
        return None
    try:
        return jsoncodec.loads(text)
    except ValueError:
        return None


def loop_row(row: dict | None) -> dict | None:
    """A fleet_loops row as callers see it: JSON columns decoded, internals dropped."""
    if row is None:
        return None
    out = {k: v for k, v in row.items() if k not in ("seq", "db_now", "kind_of", "k")}
    for key in JSON_COLUMNS:
        out[key] = json_value(out.get(key))
    return out


def _fenced_sql(sets: str) -> str:
    sql = "UPDATE fleet_loops SET updated_at = {now}" + (", " + sets if sets else "")
    return sql + " WHERE id = %s AND generation = %s AND " + HELD


def lease_lost(loop_id: str, generation: int) -> LeaseLost:
    return LeaseLost(
        f"fleet loop {loop_id}: generation {generation} no longer holds it "
        "(claimed by another worker, released or ended)"
    )


def fenced(tx, loop_id: str, generation: int, sets: str = "", args: tuple = ()) -> None:
    """One write by the worker holding generation ``generation`` of the loop; LeaseLost when
    that claim no longer stands. The row stays locked until the transaction ends."""
    if tx.run(_fenced_sql(sets), (*args, loop_id, generation)) != 1:
        raise lease_lost(loop_id, generation)


class Queue:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def submit(self, *, kind, spec, repo, branch=None, account="default", tags=(), name=None) -> dict:
        """A new queued loop (the row); listeners on loopwright_queue are told."""
        check_submit(kind, spec, repo, branch, account, name)
        check_sizes(spec, repo, account, list(tags))
        for _ in range(3 if name is None else 1):  # a drawn name may be taken: draw again
            chosen = name or f"f-{uuid.uuid4().hex[:8]}"
            row = self._insert(kind, spec, repo, branch, account, list(tags), chosen)
            if row is not None:
                return row
        raise RegistryError(f"a fleet loop named {chosen} exists already: choose another name")

    def _insert(self, kind, spec, repo, branch, account, tags, name) -> dict | None:
        row = {
            "id": uuid.uuid4().hex,
            "name": name,
            "kind": kind,
            "spec": json_text(spec),
            "repo": repo,
            "branch": branch,
            "work_branch": f"loopwright/{name}",
            "account": account,
            "tags": json_text(tags),
            "status": "queued",
        }
        sql = (
            f"INSERT INTO fleet_loops ({', '.join(row)}, created_at, updated_at) "
            f"VALUES ({', '.join('%s' for _ in row)}, {{now}}, {{now}}) ON CONFLICT (name) DO NOTHING"
        )
        with self.backend.tx() as tx:
            if tx.run(sql, tuple(row.values())) != 1:
                return None
            self.backend.notify(tx, QUEUE_CHANNEL, row["id"])
            return loop_row(tx.one("SELECT * FROM fleet_loops WHERE id = %s", (row["id"],)))

    def claim(
        self, worker: str, host: str, *, lease=30.0, allowed=None, accounts=None, accepts=None
    ) -> dict | None:
        """The loop this worker takes next, under a lease of ``lease`` seconds: one whose lease
        expired (a failover), else the oldest queued. ``allowed(repo)`` skips a loop this
        worker may not run, leaving it to others (for as long as it lives it answers the same
        for a repository: the ones it allowed are remembered); ``accepts(row)`` skips one for
        what its spec asks of the worker (a verify), and must accept a spec without a verify
        (PLAIN_SPEC); ``accounts`` limits the accounts taken. A row it cannot take for what the
        row holds is set aside and the next one taken (faults.py): a row never makes a claim fail."""
        if accounts is not None and not accounts:
            return None
        for _ in range(SET_ASIDE_PER_CLAIM):  # a row this claim cannot take is set aside (faults.py)
            try:
                return self._claim(worker, host, float(lease), allowed, accounts, accepts)
            except BadRow as bad:
                self.set_aside(bad.loop_id, bad.why, worker)
        return None

    def _claim(self, worker: str, host: str, lease: float, allowed, accounts, accepts) -> dict | None:
        skip = self.passed_over()
        asks = accepts is not None
        try:
            taken = None if skip else self._claim_at_once(worker, host, lease, allowed, accounts, asks)
        except Exception as exc:
            if self.backend.row_fault(exc) is None:
                raise
            taken = None  # a row the database refuses to update: the look row by row finds which
        if taken is not None:
            return taken
        with self.backend.tx() as tx:
            # Fleet limits and account pauses (limits.py), checked in the claim's transaction.
            gate = self.claim_gate(tx)
            batch = 1 if allowed is None and not asks and not gate.sifts and not skip else BATCH
            for row in self._claimable(tx, batch, accounts, gate.where):
                if row["id"] in skip:
                    continue
                try:
                    taken = self._consider(tx, row, worker, host, lease, (allowed, accepts), gate)
                except Exception as exc:
                    why = self.backend.row_fault(exc)
                    if why is None:
                        raise
                    raise BadRow(row["id"], why) from None  # out of the transaction, undone
                if taken is not None:
                    return taken
        return None

    def _consider(self, tx, row: dict, worker: str, host: str, lease: float, asked, gate) -> dict | None:
        """The row taken by this claim, or None to look at the next (ended, not allowed or not
        accepted by the worker, held back by the fleet's limits); BadRow for a row whose
        counters are out of range. ``asked`` is (allowed, accepts), as claim() was given them."""
        allowed, accepts = asked
        why = counters_fault(row)
        if why is not None:
            raise BadRow(row["id"], why)
        if row["worker"] is not None and row["failovers"] >= MAX_FAILOVERS:
            self._end_failed_over(tx, row)
        elif (
            (allowed is None or allowed(row["repo"]))
            and (accepts is None or accepts(loop_row(row)))
            and gate.admits(tx, row)
        ):
            if allowed is not None:
                self._repos_allowed(allowed).add(row["repo"])
            return self._take(tx, row, worker, host, lease)
        return None

    def _claim_at_once(
        self, worker: str, host: str, lease: float, allowed, accounts, asks: bool
    ) -> dict | None:
        """The usual claim as one statement, on PostgreSQL (bench/bench_fleet.py): the first
        claimable row is taken when no fleet limit nor account pause is in force, it is not at
        its failover limit, this worker allowed its repository before and, when the worker
        ``asks`` about loops, its spec holds no verify. Else nothing is taken (None), and
        :meth:`claim` looks at each row in a transaction."""
        repos = self._repos_allowed(allowed)
        if self.backend.dialect != "postgres" or (repos is not None and not repos):
            return None
        accounts = () if accounts is None else tuple(accounts)
        # A worker's one repository is a text parameter (an array costs more to send).
        known = () if repos is None else (next(iter(repos)),) if len(repos) == 1 else (sorted(repos),)
        shape = (len(accounts), len(known) and min(len(repos), 2), asks)
        if shape not in _AT_ONCE_SQL:  # the statement's text depends on its shape alone
            head, _ = self._page(FIRST_PAGES, 1, accounts, columns="id, seq")
            where = ("", " AND repo = %s", " AND repo = ANY(%s)")[shape[1]] + (PLAIN_SPEC if asks else "")
            _AT_ONCE_SQL[shape] = timeline.noted_claim(
                AT_ONCE.replace("{head}", head).replace("{known}", where)
            )
        heads = accounts * len(FIRST_PAGES)  # the accounts again in each kind's read
        rows = self.backend.once(_AT_ONCE_SQL[shape], (worker, host, lease, *heads, MAX_FAILOVERS, *known))
        return loop_row(rows[0]) if rows else None

    def _repos_allowed(self, allowed) -> set | None:
        """The repositories ``allowed`` allowed so far; None for a claim of any repository."""
        if allowed is None:
            return None
        memo = self.__dict__.get("_allowed_memo")
        if memo is None or memo[0] != allowed or len(memo[1]) >= MEMO_REPOS:
            memo = self.__dict__["_allowed_memo"] = (allowed, set())
        return memo[1]

    def _page(
        self,
        pages: dict,
        size: int,
        accounts,
        also: tuple = ("", ()),
        columns: str = "*, (SELECT {now}) AS db_now",
    ) -> tuple[str, tuple]:
        """The statement reading ``columns`` of the next ``size`` claimable rows of each kind in
        ``pages`` (kind: after which (key, seq)). On PostgreSQL each row is locked as it is read,
        and rows other workers are claiming are skipped. The sizes are written into the
        statement: given as parameters, they make PostgreSQL plan it anew each time (its generic
        plan, for any size, looks dearer than one for the size given), which costs more than
        running it."""
        accounts = () if accounts is None else tuple(accounts)
        only = " AND account IN (" + ", ".join("%s" for _ in accounts) + ")" if accounts else ""
        only += also[0]  # what the fleet's limits leave claimable (limits.py)
        lock = " FOR UPDATE SKIP LOCKED" if self.backend.dialect == "postgres" else ""
        parts, args = [], []
        for which, after in pages.items():
            where, key = KINDS_OF_CLAIMABLE[which]
            page = f" AND ({key}, seq) > (%s, %s)" if after else ""
            parts.append(
                f"SELECT * FROM (SELECT {columns}, {which} AS kind_of, {key} AS k "
                f"FROM fleet_loops WHERE {where}{only}{page} ORDER BY {key}, seq "
                f"LIMIT {int(size)}{lock}) c{which}"
            )
            args += [*accounts, *also[1], *after]
        return " UNION ALL ".join(parts) + " ORDER BY kind_of, k, seq", tuple(args)

    def _claimable(self, tx, batch: int, accounts, also: tuple = ("", ())):
        """Claimable rows in order, up to ``batch`` of each kind at a time."""
        pages = dict(FIRST_PAGES)  # per kind: after which (key, seq); gone when read to its end
        while pages:
            rows = tx.rows(*self._page(pages, batch, accounts, also))
            yield from rows
            for which in list(pages):
                mine = [r for r in rows if r["kind_of"] == which]
                if len(mine) < batch:
                    del pages[which]
                else:
                    pages[which] = (mine[-1]["k"], mine[-1]["seq"])

    def _take(self, tx, row: dict, worker: str, host: str, lease: float) -> dict:
        now, before = row["db_now"], timeline.before_claim(row)
        row.update(
            worker=worker,
            host=host,
            generation=row["generation"] + 1,
            status="running",
            lease_expires=now + lease,
            failovers=row["failovers"] + (row["worker"] is not None),
            claimed_at=now,
            updated_at=now,
        )
        tx.run(TAKE, tuple(row[k] for k in TAKEN))
        timeline.claimed(tx, row, before)
        return loop_row(row)

    def _end_failed_over(self, tx, row: dict) -> None:
        reason = f"its worker went away {MAX_FAILOVERS + 1} times; a loop fails over at most {MAX_FAILOVERS}"
        tx.run(
            "UPDATE fleet_loops SET status = 'ended', outcome = %s, reason = %s, worker = NULL, "
            "lease_expires = NULL, updated_at = {now} WHERE id = %s",
            (stopped("failover_limit"), reason, row["id"]),
        )
        timeline.add(
            tx, row["id"], row["generation"], "ended", outcome=stopped("failover_limit"), reason=reason
        )

    def heartbeat(self, loop_id: str, generation: int, lease=30.0) -> dict:
        """Renews the lease for ``lease`` seconds more; the loop's pending control (stop,
        cancel or None). LeaseLost when this claim no longer stands."""
        # One statement (a beat of every running loop every few seconds is most of a fleet's load).
        sql = _fenced_sql("lease_expires = {now} + %s") + " RETURNING control, lease_expires"
        rows = self.backend.once(sql, (float(lease), loop_id, generation))
        if len(rows) != 1:
            raise lease_lost(loop_id, generation)
        return {"control": rows[0]["control"], "lease_expires": rows[0]["lease_expires"]}

    def progress(self, loop_id: str, generation: int, **fields) -> dict:
        """Records what an iteration did (among PROGRESS); the loop's control and gate."""
        unknown = sorted(set(fields) - set(PROGRESS))
        if unknown:
            raise ValueError(f"not a progress field: {', '.join(unknown)}")
        if fields.get("status", "running") not in ("running", "waiting_gate"):
            raise ValueError("progress sets status running or waiting_gate (finish ends, release requeues)")
        for key in ("state", "gate"):
            if fields.get(key) is not None:
                fields[key] = json_text(fields[key])
        sets = ", ".join(f"{k} = %s" for k in fields)
        with self.backend.tx() as tx:
            fenced(tx, loop_id, generation, sets, tuple(fields.values()))
            row = tx.one("SELECT control, gate FROM fleet_loops WHERE id = %s", (loop_id,))
            self.backend.notify(tx, PROGRESS_CHANNEL, loop_id)
        return {"control": row["control"], "gate": json_value(row["gate"])}

    def finish(self, loop_id: str, generation: int, outcome: str, reason: str) -> None:
        """Ends the loop with ``outcome``; its worker lets go of it."""
        sets = "status = 'ended', outcome = %s, reason = %s, worker = NULL, lease_expires = NULL"
        with self.backend.tx() as tx:
            who = timeline.holder(tx, loop_id)
            fenced(tx, loop_id, generation, sets, (outcome, reason))
            timeline.add(tx, loop_id, generation, "ended", outcome=outcome, reason=reason, **who)
            self.backend.notify(tx, PROGRESS_CHANNEL, loop_id)

    def release(self, loop_id: str, generation: int, reason: str) -> None:
        """Hands the loop back (a draining worker): queued again, or still waiting at its gate;
        the next claim is not a failover."""
        sets = (
            "status = CASE WHEN status = 'waiting_gate' THEN status ELSE 'queued' END, "
            "worker = NULL, lease_expires = NULL, reason = %s"
        )
        with self.backend.tx() as tx:
            who = timeline.holder(tx, loop_id)
            fenced(tx, loop_id, generation, sets, (reason,))
            timeline.add(tx, loop_id, generation, "released", reason=reason, **who)
            self.backend.notify(tx, QUEUE_CHANNEL, loop_id)

    def request(self, loop: str, what: str) -> dict | None:
        """Asks the loop (id or name) to stop or cancel: a loop no worker drives ends now, a
        running one is told through its heartbeat and loopwright_control. The row after,
        None when there is no such loop."""
        if what not in ("stop", "cancel"):
            raise ValueError(f"a loop is asked to stop or cancel, not {what!r}")
        outcome = stopped("user_stop") if what == "stop" else CANCELLED
        reason = f"{'stopped' if what == 'stop' else 'cancelled'} from the fleet while no worker ran it"
        with self.backend.tx() as tx:
            row = tx.one("SELECT *" + FIND, (loop, loop, loop))
            if row is None:
                return None
            if tx.run(REQUEST, (what, outcome, reason, row["id"])) == 1:
                timeline.requested(tx, row, what, reason)
            self.backend.notify(tx, CONTROL_CHANNEL, row["id"])
            return loop_row(tx.one("SELECT * FROM fleet_loops WHERE id = %s", (row["id"],)))

    def answer_gate(self, loop: str, answer: str, by: str) -> dict | None:
        """Answers the gate the loop (id or name) waits at; it is queued again, to go on with
        whichever worker claims it next. The row after, None when no gate waits there."""
        for _ in range(5):  # another write between our read and our update: read again
            with self.backend.tx() as tx:
                row = tx.one("SELECT *, (SELECT {now}) AS db_now" + FIND, (loop, loop, loop))
                if row is None or row["status"] != "waiting_gate":
                    return None
                gate = json_value(row["gate"])
                gate = dict(gate) if isinstance(gate, dict) else {}
                gate.update(answer=answer, by=by, answered_at=row["db_now"])
                if tx.run(ANSWER, (json_text(gate), row["id"], row["updated_at"])) == 1:
                    said = {"gate": gate.get("name"), "answer": answer, "by": by}
                    tx.run(ANSWERED, (row["id"], row["generation"], json_text(said)))  # in its timeline
                    self.backend.notify(tx, PROGRESS_CHANNEL, row["id"])
                    self.backend.notify(tx, CONTROL_CHANNEL, row["id"])
                    self.backend.notify(tx, QUEUE_CHANNEL, row["id"])
                    return loop_row(tx.one("SELECT * FROM fleet_loops WHERE id = %s", (row["id"],)))
        return None

    def fleet_loop(self, id_or_name: str) -> dict | None:
        with self.backend.tx() as tx:
            return loop_row(tx.one("SELECT *" + FIND, (id_or_name,) * 3))

    def fleet_loops(self, status: str | None = None, limit: int = 500) -> list[dict]:
        """The newest loops first, of one status or all; each column read only so far (its
        spec's first members: fleetview.LIST_SPEC), the columns cut short named in ``cut``."""
        where, args = ("WHERE status = %s ", (status,)) if status else ("", ())
        order = "ORDER BY created_at DESC, seq DESC LIMIT %s"
        sql = f"SELECT {self.listed_columns()} FROM fleet_loops {where}{order}"
        with self.backend.tx() as tx:
            return [listed_row(r, loop_row) for r in tx.rows(sql, (*args, limit))]

    def add_event(self, loop_id: str, generation: int, kind: str, data: dict) -> None:
        """Appends to the loop's timeline (fenced, like every write of its worker). An event the
        timeline holds already is not added again: a write retried because the answer to its
        commit was lost (the database restarted) may have gone in."""
        text = json_text(data)
        with self.backend.tx() as tx:
            fenced(tx, loop_id, generation)
            tx.run(
                "INSERT INTO fleet_events (loop_id, at, generation, kind, data) "
                "SELECT %s, {now}, %s, %s, %s WHERE NOT EXISTS "
                "(SELECT 1 FROM fleet_events WHERE loop_id = %s AND kind = %s AND data = %s)",
                (loop_id, generation, kind, text, loop_id, kind, text),
            )
            self.backend.notify(tx, PROGRESS_CHANNEL, loop_id)

    def events(self, loop_id: str, after: int = 0, limit: int = 500) -> list[dict]:
        """The loop's timeline from the event after ``after`` (an event's id), oldest first."""
        with self.backend.tx() as tx:
            rows = tx.rows(
                "SELECT id, loop_id, at, generation, kind, data FROM fleet_events "
                "WHERE loop_id = %s AND id > %s ORDER BY id LIMIT %s",
                (loop_id, after, limit),
            )
        return [dict(r, data=json_value(r["data"])) for r in rows]
