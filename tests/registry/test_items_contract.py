"""A backlog's items shared by a fleet's loops (registry/items.py, `submit --parallel`), the same
assertions on the embedded SQLite registry and on a real PostgreSQL: reservations in order, each
item held by one loop, the items a loop took kept for good, fencing, items going back when a loop
ends, and several processes reserving from one backlog at once, each item reserved once."""

from __future__ import annotations

import pytest

import racers
from loopwright.registry import LeaseLost, open_registry

B = "backlog-1"
ISSUES = ["#1", "#2", "#3", "#4", "#5"]


def running(reg, n: int) -> list[dict]:
    """``n`` loops, each claimed by a worker (generation 1)."""
    for i in range(n):
        reg.submit(
            kind="work", spec={"args": [], "backlog": B}, repo="https://example.com/r.git", name=f"l{i}"
        )
    return [reg.claim(f"w{i}", "h") for i in range(n)]


def test_a_loop_reserves_in_order_up_to_what_it_wants_and_again_only_what_it_lacks(reg):
    (a,) = running(reg, 1)
    assert reg.reserve(a["id"], 1, B, ISSUES, want=2) == ["#1", "#2"]
    assert reg.reserve(a["id"], 1, B, ISSUES, want=2) == ["#1", "#2"]  # it holds them already
    assert reg.reserve(a["id"], 1, B, ISSUES, want=0) == ["#1", "#2"]
    assert reg.held(B) == {"#1": a["id"], "#2": a["id"]}
    assert reg.held("another backlog") == {}
    # An item it holds that is no longer a candidate (closed, blocked) is not one it can work.
    assert set(reg.reserve(a["id"], 1, B, ["#2", "#3", "#4"], want=2)) == {"#1", "#2", "#3"}
    assert {r["state"] for r in reg.item_states(B)} == {"reserved"}


def test_another_loop_skips_what_one_holds_and_what_a_loop_took_stays_its_own(reg):
    a, b = running(reg, 2)
    assert reg.reserve(a["id"], 1, B, ISSUES, want=2) == ["#1", "#2"]
    assert reg.reserve(b["id"], 1, B, ISSUES, want=2) == ["#3", "#4"]
    assert reg.mark_done(a["id"], 1, B, ["#1", "#3", "#9"]) == 1  # only its own reserved items
    assert sorted(reg.reserve(a["id"], 1, B, ISSUES, want=2)) == ["#1", "#2", "#5"]  # one taken: one more
    assert reg.reserve(b["id"], 1, B, ISSUES, want=3) == ["#3", "#4"]  # nothing left for b
    states = {r["item"]: (r["loop_id"], r["state"]) for r in reg.item_states(B)}
    assert states == {
        "#1": (a["id"], "done"),
        "#2": (a["id"], "reserved"),
        "#3": (b["id"], "reserved"),
        "#4": (b["id"], "reserved"),
        "#5": (a["id"], "reserved"),
    }


def test_a_lost_claim_reserves_nothing_and_marks_nothing(reg):
    (a,) = running(reg, 1)
    reg.reserve(a["id"], 1, B, ISSUES, want=1)
    for write in (
        lambda: reg.reserve(a["id"], 2, B, ISSUES, want=3),
        lambda: reg.mark_done(a["id"], 2, B, ["#1"]),
    ):
        with pytest.raises(LeaseLost):
            write()
    assert [(r["item"], r["state"]) for r in reg.item_states(B)] == [("#1", "reserved")]
    reg.finish(a["id"], 1, "BACKLOG_EMPTY", "done")
    with pytest.raises(LeaseLost):  # an ended loop reserves nothing either
        reg.reserve(a["id"], 1, B, ISSUES, want=3)


def test_a_loop_that_fails_over_keeps_its_items(reg):
    (a,) = running(reg, 1)
    assert reg.reserve(a["id"], 1, B, ISSUES, want=2) == ["#1", "#2"]
    reg.release(a["id"], 1, "drained")  # handed back (or its lease ran out): not ended
    assert reg.release_items(a["id"]) == 0
    again = reg.claim("w9", "h")
    assert (again["id"], again["generation"]) == (a["id"], 2)
    assert reg.reserve(a["id"], 2, B, ISSUES, want=2) == ["#1", "#2"]


def test_an_ended_loop_s_reserved_items_go_back_and_the_ones_it_took_stay(reg):
    a, b = running(reg, 2)
    reg.reserve(a["id"], 1, B, ISSUES, want=3)
    reg.mark_done(a["id"], 1, B, ["#1"])
    reg.finish(a["id"], 1, "BUDGET_EXHAUSTED:iterations", "out of iterations")
    assert reg.release_items(a["id"]) == 2
    assert reg.release_items(a["id"]) == 0
    assert reg.held(B) == {"#1": a["id"]}
    assert reg.reserve(b["id"], 1, B, ISSUES, want=2) == ["#2", "#3"]


def test_a_loop_ended_while_no_worker_drove_it_frees_its_reservations_to_the_next_reserver(reg):
    a, b = running(reg, 2)
    reg.reserve(a["id"], 1, B, ISSUES, want=2)
    reg.mark_done(a["id"], 1, B, ["#1"])
    reg.release(a["id"], 1, "drained")
    reg.request(a["id"], "cancel")  # ended in the database; nobody called release_items
    assert reg.fleet_loop(a["id"])["status"] == "ended"
    assert reg.reserve(b["id"], 1, B, ISSUES, want=2) == ["#2", "#3"]  # #2 taken over, #1 stays a's
    assert reg.held(B) == {"#1": a["id"], "#2": b["id"], "#3": b["id"]}


def test_bad_arguments_are_refused(reg):
    (a,) = running(reg, 1)
    for bad in (
        lambda: reg.reserve(a["id"], 1, "", ISSUES, want=1),
        lambda: reg.reserve(a["id"], 1, "b\n", ISSUES, want=1),
        lambda: reg.reserve(a["id"], 1, B, "#1", want=1),
        lambda: reg.reserve(a["id"], 1, B, ["#1", 2], want=1),
        lambda: reg.reserve(a["id"], 1, B, ["x" * 301], want=1),
        lambda: reg.reserve(a["id"], 1, B, ISSUES, want=-1),
        lambda: reg.reserve(a["id"], 1, B, ISSUES, want=True),
        lambda: reg.mark_done(a["id"], 1, B, [None]),
        lambda: reg.held(None),
    ):
        with pytest.raises(ValueError):
            bad()
    assert reg.held(B) == {}


PROCESSES = 6
RACE_ITEMS = [f"#{n}" for n in range(1, 121)]


def _reserve_all(url: str, loop_id: str, start, out) -> None:
    """One worker process: reserves one item at a time and takes it, until none is left."""
    try:
        reg = open_registry(url)
        start.wait(timeout=300)  # all connected: the reservations start together
        got: list[str] = []
        while True:
            mine = reg.reserve(loop_id, 1, B, RACE_ITEMS, want=1)
            fresh = [i for i in mine if i not in got]
            if not fresh:
                break
            got += fresh
            reg.mark_done(loop_id, 1, B, fresh)
        reg.close()
        out.put((loop_id, got))
    except Exception as exc:  # the test shows what went wrong
        out.put((loop_id, repr(exc)))


def test_loops_reserving_at_once_from_one_backlog_each_get_an_item_once(reg, registry_url):
    loops = running(reg, PROCESSES)
    racing = racers.context(__name__)
    start, out = racing.Barrier(PROCESSES), racing.Queue()
    procs = [racing.Process(target=_reserve_all, args=(registry_url, row["id"], start, out)) for row in loops]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=120)
    errors = [r for r in results.values() if isinstance(r, str)]
    assert not errors, errors[:3]
    got = [i for items in results.values() for i in items]
    assert sorted(got) == sorted(RACE_ITEMS)  # every item once: none twice, none left
    held = reg.held(B)
    assert all(held[i] == lid for lid, items in results.items() for i in items)
    assert {r["state"] for r in reg.item_states(B)} == {"done"}
