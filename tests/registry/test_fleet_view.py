"""What a monitor reads of the fleet (registry/fleetview.py), the same assertions on SQLite and
PostgreSQL: the queue's counts, a mark that changes with what the page shows and not with
heartbeats, and the progress channel a worker's iteration, timeline event and end notify."""

from __future__ import annotations

import pytest

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
