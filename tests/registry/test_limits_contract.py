"""The fleet's limits (registry/limits.py), the same assertions on the embedded SQLite registry
and on a real PostgreSQL: claims stop at a running cap (the fleet's, an account's, a tag's) and
at a daily dollar cap, which resets with the UTC day; a paused account's loops wait while other
accounts' run; an iteration boundary adds its dollars to every scope of the loop, fenced, in one
transaction with the cap check, so that concurrent boundaries add up exactly and two loops
crossing a cap together both end."""

from __future__ import annotations

import math
import queue as queues
import threading
import time

import pytest

import racers
from loopwright.core import attention
from loopwright.registry import LeaseLost, RegistryError, open_registry
from loopwright.registry.limits import day_of
from waiting import wait_for

OUT = "BUDGET_EXHAUSTED:fleet_dollars"


def submit(reg, name, account="default", tags=()):
    return reg.submit(
        kind="prompt",
        spec={"goal": "g"},
        repo="https://example.com/r.git",
        name=name,
        account=account,
        tags=tags,
    )


def claimed(reg, worker="w") -> list[str]:
    """The names of every loop claims take now, in order, until one finds none."""
    names = []
    while (row := reg.claim(worker, "h", lease=600)) is not None:
        names.append(row["name"])
    return names


def expire(reg, loop_id: str) -> None:
    """The loop's worker went away: its lease is over (by the database's clock)."""
    with reg.backend.tx() as tx:
        tx.run("UPDATE fleet_loops SET lease_expires = {now} - 1 WHERE id = %s", (loop_id,))


def set_spend(reg, day: str, scope: str, dollars: float) -> None:
    with reg.backend.tx() as tx:
        tx.run("DELETE FROM fleet_spend WHERE day = %s AND scope = %s", (day, scope))
        tx.run("INSERT INTO fleet_spend (day, scope, dollars) VALUES (%s, %s, %s)", (day, scope, dollars))


def today(reg) -> str:
    with reg.backend.tx() as tx:
        return day_of(tx.one("SELECT {now} AS now")["now"])


def yesterday(reg) -> str:
    with reg.backend.tx() as tx:
        return day_of(tx.one("SELECT {now} AS now")["now"] - 86400)


def test_limits_are_set_kept_listed_and_cleared(reg):
    assert reg.limits() == []
    reg.set_limits("fleet", max_running=4)
    row = reg.set_limits("fleet", max_dollars_per_day=20)  # the other cap is kept
    assert (row["scope"], row["max_dollars_per_day"], row["max_running"]) == ("fleet", 20.0, 4)
    reg.set_limits("tag:night", max_dollars_per_day=2.5)
    reg.set_limits("account:team-a", max_running=0)
    got = [
        (r["scope"], r["max_dollars_per_day"], r["max_running"], r["spent_today"], r["running"])
        for r in reg.limits()
    ]
    assert got == [
        ("fleet", 20.0, 4, 0.0, 0),
        ("account:team-a", None, 0, 0.0, 0),
        ("tag:night", 2.5, None, 0.0, 0),
    ]
    for scope, kw in (
        ("fleets", {"max_running": 1}),
        ("account:", {"max_running": 1}),
        ("tag: x", {"max_running": 1}),
        ("tag:a\nb", {"max_running": 1}),
        ("fleet", {}),
        ("fleet", {"max_running": -1}),
        ("fleet", {"max_running": 1.5}),
        ("fleet", {"max_running": True}),
        ("fleet", {"max_dollars_per_day": math.nan}),
        ("fleet", {"max_dollars_per_day": math.inf}),
        ("fleet", {"max_dollars_per_day": "5"}),
    ):
        with pytest.raises(RegistryError):
            reg.set_limits(scope, **kw)
    assert reg.clear_limits("tag:night") is True and reg.clear_limits("tag:night") is False
    assert [r["scope"] for r in reg.limits()] == ["fleet", "account:team-a"]


def test_claims_stop_at_the_fleets_running_cap_and_a_failover_keeps_its_place(reg):
    for n in range(4):
        submit(reg, f"l{n}")
    reg.set_limits("fleet", max_running=2)
    assert claimed(reg) == ["l0", "l1"]
    l0 = reg.fleet_loop("l0")
    reg.finish(l0["id"], 1, "LOOP_DONE", "done")
    assert claimed(reg) == ["l2"]
    # A loop whose worker went away is one of the running already: it is taken again at the cap.
    expire(reg, reg.fleet_loop("l1")["id"])
    again = reg.claim("w2", "h2", lease=600)
    assert (again["name"], again["generation"], again["failovers"]) == ("l1", 2, 1)
    assert claimed(reg) == []
    reg.set_limits("fleet", max_running=1)  # lowered below the running: they go on, none is added
    assert [r["running"] for r in reg.limits()] == [2] and claimed(reg) == []
    reg.clear_limits("fleet")
    assert claimed(reg) == ["l3"]


def test_claims_stop_at_an_accounts_running_cap_and_take_other_accounts(reg):
    submit(reg, "a1", account="a")
    submit(reg, "a2", account="a")
    submit(reg, "b1", account="b")
    submit(reg, "a3", account="a")
    submit(reg, "b2", account="b")
    reg.set_limits("account:a", max_running=1)
    assert claimed(reg) == ["a1", "b1", "b2"]
    assert [(r["scope"], r["running"]) for r in reg.limits()] == [("account:a", 1)]
    reg.set_limits("account:a", max_running=2)
    assert claimed(reg) == ["a2"]


def test_claims_stop_at_a_tags_running_cap(reg):
    submit(reg, "n1", tags=["night"])
    submit(reg, "n2", tags=["x", "night"])
    submit(reg, "p1")
    submit(reg, "x1", tags=["x"])
    reg.set_limits("tag:night", max_running=1)
    reg.set_limits("tag:x", max_running=1)
    assert claimed(reg) == ["n1", "p1", "x1"]
    reg.finish(reg.fleet_loop("n1")["id"], 1, "LOOP_DONE", "done")
    assert claimed(reg) == []  # night has room now, x has none (x1)
    reg.finish(reg.fleet_loop("x1")["id"], 1, "LOOP_DONE", "done")
    assert claimed(reg) == ["n2"]


def test_claims_stop_at_the_dollar_cap_and_resume_the_next_day(reg):
    for n in range(3):
        submit(reg, f"l{n}")
    set_spend(reg, yesterday(reg), "fleet", 500.0)  # yesterday's spend counts for nothing today
    reg.set_limits("fleet", max_dollars_per_day=5)
    l0 = reg.claim("w", "h", lease=600)
    assert l0["name"] == "l0"
    first = reg.record_spend(l0["id"], 1, 1.0, iteration=1, dollars=1.0)
    assert first["stop"] is None and first["spent_today"] == {"fleet": 1.0, "account:default": 1.0}
    l1 = reg.claim("w", "h", lease=600)
    reg.release(l1["id"], 1, "draining")  # claimed under the cap, handed back
    done = reg.record_spend(l0["id"], 1, 4.0, iteration=2, dollars=5.0)  # exactly the cap: reached
    assert done["stop"] == OUT and "the fleet's daily budget of $5.00 is spent ($5.00 on" in done["reason"]
    assert reg.spend_today() == 5.0 and reg.spend_today("account:default") == 5.0
    assert claimed(reg) == []
    row = reg.fleet_loop("l0")
    assert (row["iteration"], row["dollars"]) == (2, 5.0)  # the progress went in with the spend
    # Midnight UTC: today's spend becomes yesterday's, and claims go on.
    days = (yesterday(reg), today(reg))
    with reg.backend.tx() as tx:
        tx.run("DELETE FROM fleet_spend WHERE day = %s", days[:1])
        tx.run("UPDATE fleet_spend SET day = %s WHERE day = %s", days)
    assert reg.spend_today() == 0.0
    # l1 holds its first two iterations at the fleet's mean ($2.50 each): the whole $5.00.
    assert claimed(reg) == ["l1"]
    reg.finish(reg.fleet_loop("l1")["id"], 2, "LOOP_DONE", "done")
    assert claimed(reg) == ["l2"]


def test_an_account_or_tag_dollar_cap_stops_its_loops_only(reg):
    submit(reg, "a1", account="a")
    submit(reg, "t1", tags=["pricey"])
    for name, account, tags in (("a2", "a", ()), ("t2", "default", ["pricey"]), ("b1", "b", ())):
        submit(reg, name, account=account, tags=tags)
    reg.set_limits("account:a", max_dollars_per_day=1)
    reg.set_limits("tag:pricey", max_dollars_per_day=2)
    a1, t1 = reg.claim("w", "h"), reg.claim("w", "h")
    over = reg.record_spend(a1["id"], 1, 1.5)
    assert over["stop"] == OUT and over["reason"].startswith(
        "account a's daily budget of $1.00 is spent ($1.50"
    )
    under = reg.record_spend(t1["id"], 1, 1.0)
    assert under["stop"] is None and under["caps"] == {"tag:pricey": 2.0}  # the loop's capped scopes
    assert reg.record_spend(t1["id"], 1, 1.0)["stop"] == OUT
    assert claimed(reg) == ["b1"]
    assert reg.spend_today() == 3.5
    spend = {r["scope"]: r["spent_today"] for r in reg.limits()}
    assert spend == {"account:a": 1.5, "tag:pricey": 2.0}
    assert reg.limits_report()["spend"] == {
        "fleet": 3.5,
        "account:a": 1.5,
        "account:default": 2.0,
        "tag:pricey": 2.0,
    }


def test_a_spent_budget_tells_every_other_running_loop_of_its_scope_at_once(reg):
    """The boundary that spends a cap asks each other running loop of that scope to make the
    iteration it is in its last (its control, seen at its next heartbeat), not only at its own
    next boundary; loops of other scopes, and a stop already asked for, are left alone."""
    for name, account, tags in (("x1", "a", ()), ("x2", "a", ()), ("x3", "a", ()), ("y1", "b", ())):
        submit(reg, name, account=account, tags=tags)
    rows = {r["name"]: r for r in (reg.claim("w", "h", lease=600) for _ in range(4))}
    reg.set_limits("account:a", max_dollars_per_day=1)
    assert reg.request("x3", "stop")["control"] == "stop"
    assert reg.record_spend(rows["x1"]["id"], 1, 0.5)["stop"] is None
    assert reg.heartbeat(rows["x2"]["id"], 1, lease=600)["control"] is None  # under the cap: nothing
    assert reg.record_spend(rows["x1"]["id"], 1, 0.5)["stop"] == OUT
    controls = {n: reg.heartbeat(r["id"], 1, lease=600)["control"] for n, r in rows.items()}
    assert controls == {"x1": None, "x2": "budget", "x3": "stop", "y1": None}


def held(reg, name):
    return reg.fleet_loop(name)["reserved"]


def test_a_boundary_holds_room_for_the_next_iteration_and_the_others_count_it(reg):
    """Issue 26 item 6(b): each boundary asks whether the spend, what the other running loops
    hold and its own two iterations (the one under way, the next) stay within the cap; if not,
    the one under way is its last and it holds only that one."""
    a, b = submit(reg, "a"), submit(reg, "b")
    assert claimed(reg) == ["a", "b"]
    reg.set_limits("fleet", max_dollars_per_day=10)
    first = reg.record_spend(a["id"], 1, 2.0, reserve=2.0)
    assert (first["last"], held(reg, "a"), held(reg, "b")) == (None, 4.0, 0.0)  # $2 + $0 + 2 x $2
    second = reg.record_spend(b["id"], 1, 2.0, reserve=2.0)  # $4 + $4 held by a + 2 x $2 > $10
    assert second["last"] == (
        "the fleet's daily budget of $10.00 would be passed by another iteration ($4.00 spent today, "
        "$4.00 held by running iterations, about $2.00 an iteration)"
    )
    assert (second["stop"], held(reg, "b")) == (None, 2.0)
    third = reg.record_spend(a["id"], 1, 2.0, reserve=2.0)  # $6 + $2 + $4 > $10
    assert (
        third["last"].startswith("the fleet's daily budget of $10.00 would be passed")
        and held(reg, "a") == 2.0
    )
    reg.record_spend(a["id"], 1, 2.0)  # its last: nothing more runs, it holds nothing
    assert held(reg, "a") == 0.0 and reg.spend_today() == 8.0
    reg.finish(b["id"], 1, OUT, "spent")  # an ended loop holds nothing, whatever its row says
    assert reg.record_spend(a["id"], 1, 0.0, reserve=1.0)["last"] is None  # $8 + 2 x $1
    with pytest.raises(RegistryError):
        reg.record_spend(a["id"], 1, 0.0, reserve=math.nan)


def test_claims_hold_the_first_two_iterations_and_wait_for_a_cost_to_go_by(reg):
    for name in ("p", "q", "r"):
        submit(reg, name)
    reg.set_limits("fleet", max_dollars_per_day=10)
    # Nothing in the fleet has a cost yet: one loop runs until it has one.
    assert claimed(reg) == ["p"] and held(reg, "p") is None
    p = reg.fleet_loop("p")
    assert reg.record_spend(p["id"], 1, 1.5, iteration=1, dollars=1.5, reserve=1.5)["last"] is None
    # The fleet's mean, $1.50, is the first estimate of the others: q holds $3.00, r would pass.
    assert claimed(reg) == ["q"] and (held(reg, "p"), held(reg, "q")) == (3.0, 3.0)
    reg.finish(p["id"], 1, "LOOP_DONE", "done")
    assert claimed(reg) == ["r"] and reg.spend_today() == 1.5  # $1.50 + $3.00 + $3.00


def page_says(reg, name: str) -> str | None:
    """Why the monitor's page says the queued loop ``name`` waits (core/attention.py), from
    `fleet limits`' report, with a live worker that would take it."""
    report = reg.limits_report()
    queue = attention.Queue(
        [{"worker": "w", "age": 1.0}], report["pauses"], report["limits"], report["now"],
        mean=report["iteration_mean"],
    )  # fmt: skip
    return queue.reason(reg.fleet_loop(name))


def test_the_page_says_a_loop_waits_for_room_exactly_when_a_claim_would_not_take_it(reg):
    for name in ("p", "q", "r"):
        submit(reg, name)
    reg.set_limits("fleet", max_dollars_per_day=10)
    assert claimed(reg) == ["p"]
    assert page_says(reg, "q") == (
        "the fleet's daily budget of $10.00: a running loop's cost is not known yet, and it runs one at a"
        " time until it is"
    )
    p = reg.fleet_loop("p")
    reg.record_spend(p["id"], 1, 1.5, iteration=1, dollars=1.5, reserve=1.5)
    assert page_says(reg, "q") is None and claimed(reg) == ["q"]
    fleet = reg.limits_report()["limits"][0]
    assert (fleet["spent_today"], fleet["held"], fleet["held_unknown"], fleet["running"]) == (1.5, 6.0, 0, 2)
    assert page_says(reg, "r") == (
        "the fleet's daily budget of $10.00 has no room for another loop: $1.50 spent today, $6.00 held by"
        " running loops, about $1.50 an iteration"
    )
    assert claimed(reg) == []
    reg.finish(p["id"], 1, "LOOP_DONE", "done")  # its hold goes with it
    assert page_says(reg, "r") is None and claimed(reg) == ["r"]


def test_a_failover_its_cap_has_no_room_for_ends_out_of_budget(reg):
    gone, live = submit(reg, "gone"), submit(reg, "live")
    assert claimed(reg) == ["gone", "live"]
    reg.set_limits("fleet", max_dollars_per_day=5)
    reg.record_spend(gone["id"], 1, 1.0, iteration=1, dollars=1.0, reserve=1.0)
    reg.record_spend(live["id"], 1, 2.0, iteration=1, dollars=2.0, reserve=2.0)  # $3 + $2 + $4
    expire(reg, gone["id"])
    assert reg.claim("w2", "h2") is None  # $3.00 spent + $2.00 live holds + 2 x $1.00 > $5.00
    row = reg.fleet_loop("gone")
    assert (row["status"], row["outcome"]) == ("ended", OUT)
    assert row["reason"].startswith("the fleet's daily budget of $5.00 would be passed by another iteration")


def test_a_failover_past_the_dollar_cap_ends_out_of_budget(reg):
    dead, live = submit(reg, "dead"), submit(reg, "live")
    assert claimed(reg) == ["dead", "live"]
    reg.set_limits("fleet", max_dollars_per_day=1)
    assert reg.record_spend(live["id"], 1, 1.0)["stop"] == OUT
    expire(reg, dead["id"])
    assert reg.claim("w2", "h2") is None
    row = reg.fleet_loop("dead")
    assert (row["status"], row["outcome"], row["worker"]) == ("ended", OUT, None)
    assert row["reason"].startswith("the fleet's daily budget of $1.00 is spent")
    with pytest.raises(LeaseLost):
        reg.record_spend(dead["id"], 1, 0.5)


def test_a_paused_accounts_loops_wait_while_other_accounts_run(reg):
    a1, _, b1 = submit(reg, "a1", account="a"), submit(reg, "a2", account="a"), submit(reg, "b1", account="b")
    assert reg.claim("w", "h")["name"] == "a1"
    with reg.backend.tx() as tx:
        now = tx.one("SELECT {now} AS now")["now"]
    pause = reg.pause_account("a", now + 3600, "usage limit (429)", "w")
    assert (pause["account"], pause["until"], pause["reason"], pause["set_by"]) == (
        "a",
        now + 3600,
        "usage limit (429)",
        "w",
    )
    assert reg.pause_account("a", now + 60, "again", "w2")["until"] == now + 3600  # never shortened
    assert reg.account_pause("a")["reason"] == "again" and reg.account_pause("b") is None
    assert [p["account"] for p in reg.account_pauses()] == ["a"]
    assert claimed(reg) == ["b1"]
    # A running loop of the account hears of it at its boundary; its failover waits too.
    assert reg.record_spend(a1["id"], 1, 0.1)["paused_until"] == now + 3600
    assert reg.record_spend(b1["id"], 1, 0.1)["paused_until"] is None
    expire(reg, a1["id"])
    assert reg.claim("w2", "h") is None and reg.fleet_loop("a1")["status"] == "running"
    assert reg.resume_account("a") is True and reg.account_pause("a") is None
    assert claimed(reg) == ["a1", "a2"]
    reg.pause_account("b", now - 1, "over already", "w")  # a reset in the past pauses nothing
    assert reg.account_pause("b") is None and reg.resume_account("b") is False


def test_a_pause_and_its_end_tell_every_worker_listening(pg_url):
    reg = open_registry(pg_url)
    listener = reg.backend.listener(("loopwright_control",))
    try:
        wait_for(lambda: ("", "listening") in listener.wait(0.2), "the listener to listen")
        reg.pause_account("team", time.time() + 60, "429", "w")
        reg.resume_account("team")
        heard = []
        wait_for(lambda: heard.extend(listener.wait(0.2)) or len(heard) >= 2, "the pause's notifications")
        assert heard == [("loopwright_control", "account:team")] * 2
    finally:
        listener.close()
        reg.close()


def test_record_spend_is_fenced_and_adds_to_every_scope_of_the_loop(reg):
    loop = submit(reg, "l", account="a", tags=["x", "y", "x", 7, ""])
    reg.claim("w1", "h", lease=600)
    got = reg.record_spend(loop["id"], 1, 0.75, iteration=1, dollars=0.75, state={"k": 1})
    assert got["spent_today"] == {"fleet": 0.75, "account:a": 0.75, "tag:x": 0.75, "tag:y": 0.75}
    assert (got["stop"], got["paused_until"], got["control"], got["gate"]) == (None, None, None, None)
    reg.request("l", "stop")
    assert reg.record_spend(loop["id"], 1, 0.0)["control"] == "stop"
    expire(reg, loop["id"])
    assert reg.claim("w2", "h", lease=600)["generation"] == 2
    with pytest.raises(LeaseLost):
        reg.record_spend(loop["id"], 1, 5.0, iteration=9)
    assert reg.spend_today() == 0.75 and reg.spend_today("tag:x") == 0.75
    assert reg.fleet_loop("l")["iteration"] == 1 and reg.fleet_loop("l")["state"] == {"k": 1}
    for bad in ({"dollars_delta": -1.0}, {"dollars_delta": math.nan}, {"dollars_delta": 1.0, "worker": "x"}):
        with pytest.raises((RegistryError, ValueError)):
            reg.record_spend(loop["id"], 2, bad.pop("dollars_delta"), **bad)
    assert reg.spend_today() == 0.75


def _boundaries(url, loop_id, generation, times, delta, start, out):
    """One worker's boundaries: ``times`` iterations of ``delta`` dollars each."""
    try:
        reg = open_registry(url)
        start.wait(timeout=300)
        stops = [reg.record_spend(loop_id, generation, delta, iteration=n + 1)["stop"] for n in range(times)]
        reg.close()
        out.put(stops)
    except Exception as exc:  # the test shows what went wrong
        out.put(repr(exc))


def test_concurrent_boundaries_add_up_exactly(reg, registry_url):
    """Threads on both databases; on PostgreSQL, processes as well (each its own connections)."""
    kinds = [("thread", threading, threading.Barrier, queues.Queue)]
    if reg.backend.dialect == "postgres":
        racing = racers.context(__name__)
        kinds.append(("process", racing, racing.Barrier, racing.Queue))
    for n, (kind, mod, barrier, queue) in enumerate(kinds):
        loops = [submit(reg, f"{kind}{i}", account=f"acct{i % 2}", tags=["all"]) for i in range(4)]
        taken = [reg.claim("w", "h", lease=600) for _ in loops]
        start, out = barrier(len(taken)), queue()
        runners = [
            (mod.Thread if kind == "thread" else mod.Process)(
                target=_boundaries, args=(registry_url, row["id"], row["generation"], 25, 0.25, start, out)
            )
            for row in taken
        ]
        for r in runners:
            r.start()
        results = [out.get(timeout=600) for _ in runners]
        for r in runners:
            r.join(timeout=600)
        assert all(res == [None] * 25 for res in results), results
        assert reg.spend_today() == 25.0 * (n + 1)
        assert reg.spend_today("tag:all") == 25.0 * (n + 1)
        assert reg.spend_today("account:acct0") == reg.spend_today("account:acct1") == 12.5 * (n + 1)


def _held_spend_row(reg, scope: str):
    """On PostgreSQL, a transaction of another connection holding today's spend row of ``scope``,
    so that boundaries started now wait on it together and go on at once when it ends."""
    import psycopg

    conn = psycopg.connect(reg.backend.url)
    conn.execute(
        "SELECT dollars FROM fleet_spend WHERE day = %s AND scope = %s FOR UPDATE", (today(reg), scope)
    )
    return conn


def _waiting_on_locks(reg) -> int:
    with reg.backend.tx() as tx:
        return tx.one(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )["n"]


def _cross_together(reg, loops, delta):
    """Two boundaries of ``delta`` each, at once; what each was told."""
    held = _held_spend_row(reg, "account:default") if reg.backend.dialect == "postgres" else None
    got = {}
    threads = [
        threading.Thread(
            target=lambda row=row: got.update({row["name"]: reg.record_spend(row["id"], 1, delta)})
        )
        for row in loops
    ]
    for t in threads:
        t.start()
    if held is not None:
        wait_for(lambda: _waiting_on_locks(reg) >= 2, "both boundaries to wait on the spend row")
        held.commit()
        held.close()
    for t in threads:
        t.join(timeout=300)
    return sorted(got[row["name"]]["stop"] or "" for row in loops)


def test_two_loops_crossing_the_cap_at_once_both_end_and_the_spend_is_exact(reg):
    first = submit(reg, "first")
    pair = [submit(reg, "a"), submit(reg, "b")]
    more = [submit(reg, "c"), submit(reg, "d")]
    assert claimed(reg) == ["first", "a", "b", "c", "d"]
    reg.set_limits("fleet", max_dollars_per_day=10)
    assert reg.record_spend(first["id"], 1, 9.0)["stop"] is None
    assert _cross_together(reg, pair, 2.0) == [OUT, OUT]
    assert reg.spend_today() == 13.0 and reg.spend_today("account:default") == 13.0
    # Crossing only together: the one that adds second sees both and ends; the first goes on.
    reg.set_limits("fleet", max_dollars_per_day=16)
    assert _cross_together(reg, more, 1.5) == ["", OUT]
    assert reg.spend_today() == 16.0


def test_two_boundaries_at_once_never_both_take_the_last_room(reg):
    """Each decision on the room under a cap takes the cap's row first: of two boundaries that
    each find room for their next iteration alone, the second sees the first one's hold. On
    PostgreSQL the cap's row is held until both wait on it, so that they start together."""
    loops = [submit(reg, "a"), submit(reg, "b")]
    assert claimed(reg) == ["a", "b"]
    reg.set_limits("fleet", max_dollars_per_day=10)
    set_spend(reg, today(reg), "fleet", 5.0)  # room for two iterations of $1.50 each, not four
    held_row = None
    if reg.backend.dialect == "postgres":
        import psycopg

        held_row = psycopg.connect(reg.backend.url)
        held_row.execute("SELECT scope FROM fleet_limits WHERE scope = 'fleet' FOR UPDATE")
    got = {}
    threads = [
        threading.Thread(
            target=lambda r=r: got.update({r["name"]: reg.record_spend(r["id"], 1, 0.0, reserve=1.5)})
        )
        for r in loops
    ]
    for t in threads:
        t.start()
    if held_row is not None:
        wait_for(lambda: _waiting_on_locks(reg) >= 2, "both boundaries to wait on the cap's row")
        held_row.commit()
        held_row.close()
    for t in threads:
        t.join(timeout=300)
    assert sorted(got[r["name"]]["last"] is None for r in loops) == [False, True]
    assert sorted(held(reg, r["name"]) for r in loops) == [1.5, 3.0]  # $5 + $3 + $1.50 <= $10


def _claim_some(url, start, out):
    try:
        reg = open_registry(url)
        start.wait(timeout=300)
        got = [row["name"] for row in iter(lambda: reg.claim("w", "h", lease=600), None)]
        reg.close()
        out.put(got)
    except Exception as exc:
        out.put(repr(exc))


def test_concurrent_claims_never_pass_a_running_cap(reg, registry_url):
    """Eight workers claim at once. On PostgreSQL the queue is held (a table lock) until all
    eight wait, so that every claim counts the running loops before any of them takes one:
    only claims that take turns on the caps stay under them."""
    for n in range(20):
        submit(reg, f"l{n}", account=f"a{n % 3}", tags=["t"])
    reg.set_limits("fleet", max_running=6)
    reg.set_limits("account:a0", max_running=2)
    reg.set_limits("tag:t", max_running=5)
    held = None
    if reg.backend.dialect == "postgres":
        import psycopg

        held = psycopg.connect(reg.backend.url)
        held.execute("LOCK TABLE fleet_loops IN EXCLUSIVE MODE")  # reads go on, claims wait
    start, out = threading.Barrier(8), queues.Queue()
    threads = [threading.Thread(target=_claim_some, args=(registry_url, start, out)) for _ in range(8)]
    for t in threads:
        t.start()
    if held is not None:
        wait_for(lambda: _waiting_on_locks(reg) >= 8, "all eight claims to wait")
        held.commit()
        held.close()
    got = [out.get(timeout=600) for _ in threads]
    for t in threads:
        t.join(timeout=600)
    assert all(isinstance(g, list) for g in got), got
    names = sorted(name for g in got for name in g)
    assert names == ["l0", "l1", "l2", "l3", "l4"]  # the tag's cap, a0 with two of them
    running = reg.fleet_loops(status="running")
    assert sorted(r["name"] for r in running) == names
