"""What a monitor reads of the fleet (registry/fleetview.py), the same assertions on SQLite and
PostgreSQL: the queue's counts, a mark that changes with what the page shows and not with
heartbeats, and the progress channel a worker's iteration, timeline event and end notify."""

from __future__ import annotations

import pytest

from loopwright.core import attention
from loopwright.registry.queue import CONTROL_CHANNEL, PROGRESS_CHANNEL
from waiting import wait_for


def submit(reg, name):
    return reg.submit(kind="prompt", spec={"goal": "g"}, repo="https://example.com/r.git", name=name)


def test_the_queue_counts_every_status(reg):
    assert reg.queue_counts() == {"queued": 0, "running": 0, "waiting_gate": 0, "ended": 0}
    for name in ("a", "b", "c"):
        submit(reg, name)
    reg.claim("w", "h")
    reg.request("c", "cancel")
    assert reg.queue_counts() == {"queued": 1, "running": 1, "waiting_gate": 0, "ended": 1}


def test_the_mark_changes_with_what_the_page_shows_and_not_with_heartbeats(reg):
    submit(reg, "a")
    reg.worker_beat("w", "h", 2, 0, None, [])
    before = reg.fleet_mark()
    row = reg.claim("w", "h", lease=60)
    claimed = reg.fleet_mark()
    assert claimed != before
    reg.heartbeat(row["id"], row["generation"], lease=60)
    reg.worker_beat("w", "h", 2, 0, None, [])  # the same beat again: its time alone changed
    assert reg.fleet_mark() == claimed
    changes = [
        lambda: reg.worker_beat("w", "h", 2, 1, None, [row["id"]]),
        lambda: reg.progress(row["id"], row["generation"], iteration=1, dollars=0.5),
        lambda: reg.add_event(row["id"], row["generation"], "iteration", {"iteration": 1}),
        lambda: reg.request(row["id"], "stop"),
        lambda: reg.set_limits("fleet", max_dollars_per_day=5),
        lambda: reg.pause_account("default", reg.limits_report()["now"] + 600, "429", "w"),
        lambda: reg.finish(row["id"], row["generation"], "STOPPED:user_stop", "stopped"),
        lambda: submit(reg, "b"),
    ]
    seen = reg.fleet_mark()
    for change in changes:
        change()
        now = reg.fleet_mark()
        assert now != seen
        seen = now


def test_a_workers_progress_is_notified_on_postgresql(reg, registry_url):
    if not registry_url.startswith("postgresql://"):
        pytest.skip("the embedded database has no notifications: a monitor polls its mark")
    submit(reg, "a")
    row = reg.claim("w", "h", lease=60)
    last = submit(reg, "b")
    listener = reg.listener((PROGRESS_CHANNEL, CONTROL_CHANNEL))
    try:
        wait_for(lambda: ("", "listening") in listener.wait(0.2), "the listener to listen")
        gen = row["generation"]
        reg.heartbeat(row["id"], gen)  # renewing a lease is no news
        reg.progress(row["id"], gen, iteration=1)
        reg.record_spend(row["id"], gen, 0.25, iteration=2)
        reg.add_event(row["id"], gen, "iteration", {"iteration": 2})
        reg.finish(row["id"], gen, "LOOP_DONE", "done")
        reg.request(last["id"], "stop")  # the last one: all before it have arrived with it
        heard: list = []
        wait_for(
            lambda: heard.extend(listener.wait(0.2)) or (CONTROL_CHANNEL, last["id"]) in heard, "the stop"
        )
        assert heard == [(PROGRESS_CHANNEL, row["id"])] * 4 + [(CONTROL_CHANNEL, last["id"])]
    finally:
        listener.close()


def test_the_counts_name_the_failures_as_the_page_does(reg):
    outcomes = ["LOOP_DONE", "CANCELLED", "STOPPED:user_stop", "GATE_STOP:judge", "MAX_ITERATIONS",
                "STOPPED:stall_limit", "BUDGET_EXHAUSTED:fleet_dollars", ""]  # fmt: skip
    for i, outcome in enumerate(outcomes):
        submit(reg, f"l{i}")
        row = reg.claim("w", "h")
        reg.finish(row["id"], row["generation"], outcome, "why")
    submit(reg, "waiting")
    counts = reg.fleet_counts()
    assert counts == {"queued": 1, "running": 0, "waiting_gate": 0, "ended": 8, "failed": 4}
    assert counts["failed"] == sum(attention.failed(o) for o in outcomes)


def test_the_page_holds_the_most_pressing_loops_first(reg):
    """Held loops first (oldest first), then the newest failures, the queue's head, the newest
    of the rest; however many queued loops came after a running one."""
    for name in ("done", "failed", "gated", "busy"):
        submit(reg, name)
        row = reg.claim("w", "h")
        if name in ("done", "failed"):
            reg.finish(row["id"], row["generation"], "LOOP_DONE" if name == "done" else "MAX_ITERATIONS", "")
        if name == "gated":
            reg.progress(row["id"], row["generation"], status="waiting_gate", gate={"name": "judge"})
            reg.release(row["id"], row["generation"], "waiting at gate judge")
    for i in range(6):
        submit(reg, f"q{i}")
    names = [r["name"] for r in reg.page_loops(limit=20)]
    assert names == ["gated", "busy", "failed", "q0", "q1", "q2", "q3", "q4", "q5", "done"]
    assert [r["name"] for r in reg.page_loops(limit=4)] == ["gated", "busy", "failed", "q0"]
    assert reg.page_loops(limit=2)[0]["spec"] == {"goal": "g"}  # rows as fleet_loops gives them


def test_the_mark_changes_when_a_worker_goes_quiet(reg):
    reg.worker_beat("w", "h", 2, 0, None, [])
    before = reg.fleet_mark()
    with reg.backend.tx() as tx:  # its last beat, long ago (no waiting a minute for it)
        tx.run("UPDATE fleet_workers SET beat_at = beat_at - %s", (attention.STALE_AFTER + 1,))
    assert reg.fleet_mark() != before


def test_a_gate_answer_raises_the_ceiling_and_goes_into_the_timeline(reg):
    submit(reg, "gated")
    row = reg.claim("w", "h", lease=60)
    reg.progress(row["id"], row["generation"], status="waiting_gate", gate={"name": "budget-escalation"})
    reg.release(row["id"], row["generation"], "waiting at gate budget-escalation")
    seen = reg.fleet_loop("gated")
    spec = {"goal": "g", "limits": {"max_dollars": 9}}
    done = reg.record_gate_answer(
        seen, "raise", "page", user="ann", spec=spec, raised={"max_dollars": [5, 9]}
    )
    assert done["status"] == "queued" and done["spec"] == spec
    assert (done["gate"]["answer"], done["gate"]["by"], done["gate"]["user"]) == ("raise", "page", "ann")
    (event,) = [e for e in reg.events(row["id"]) if e["kind"] == "gate"]  # not its claim's
    assert event["kind"] == "gate" and event["generation"] == row["generation"]
    assert event["data"] == {"gate": "budget-escalation", "question": None, "answer": "raise", "by": "page",
                             "user": "ann", "raised": {"max_dollars": [5, 9]}}  # fmt: skip
    assert reg.record_gate_answer(seen, "stop", "page") is None  # the row moved on since it was read
    assert reg.fleet_loop("gated")["gate"]["answer"] == "raise"


def test_a_loop_that_changes_while_the_page_is_read_is_listed_once(reg, registry_url, monkeypatch):
    """The page's parts (held, failed, queued, the rest) are read in one snapshot: a loop that
    ends between the read of the held loops and the read of the ended ones is listed once."""
    if not registry_url.startswith("postgresql://"):
        pytest.skip("the embedded database's transaction holds every writer off while it reads")
    from loopwright.registry import open_registry

    submit(reg, "a")
    row = reg.claim("w", "h", lease=60)
    other, reads = open_registry(registry_url), []
    real = type(reg.backend)._tx_on

    def tx_on(backend, conn):
        tx = real(backend, conn)
        rows = tx.rows

        def counted(sql, args=()):
            got = rows(sql, args)
            reads.append(sql)
            if len(reads) == 1:  # the held loops are read: the loop ends now
                other.finish(row["id"], row["generation"], "LOOP_DONE", "done")
            return got

        tx.rows = counted
        return tx

    try:
        reg.listed_columns()  # read before: the page's reads are the ones counted
        monkeypatch.setattr(type(reg.backend), "_tx_on", tx_on)
        names = [r["name"] for r in reg.page_loops(limit=20)]
    finally:
        other.close()
    assert names == ["a"], names
