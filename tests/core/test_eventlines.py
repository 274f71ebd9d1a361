"""`fleet events` lines from timeline events: the host of each (its own, else its claim's), the
fields that matter in words, and whatever a writer of the database put there shown as text on
one line, bounded, never an error."""

from __future__ import annotations

from loopwright.core import eventlines

AT = 1_795_840_761.5  # 2026-11-28 04:39:21 UTC


def ev(kind, data, generation=1, at=AT):
    return {"id": 1, "at": at, "generation": generation, "kind": kind, "data": data}


def test_an_event_without_a_host_takes_its_claims():
    events = [
        ev("claimed", {"worker": "w1", "host": "alpha", "failovers": 0}),
        ev("ended", {"outcome": "LOOP_DONE", "reason": "done"}),
        ev("ended", {"outcome": "X"}, generation=7),
    ]
    assert eventlines.lines(events) == [
        "2026-11-28 04:39:21  alpha            g1   claimed by w1",
        "2026-11-28 04:39:21  alpha            g1   ended LOOP_DONE: done",
        "2026-11-28 04:39:21  -                g7   ended X",
    ]


def test_an_unknown_kind_shows_its_plain_fields_and_no_python_dump():
    out = eventlines.line(ev("set_aside", {"reason": "bad row", "worker": "w9", "nested": {"a": 1}}), {})
    assert out.endswith("set_aside: reason bad row, worker w9") and "{" not in out


def test_whatever_the_database_holds_is_one_bounded_line():
    nasty = {
        "error": "\x1b]52;c;cGF5bG9hZA==\x07" + "x" * 5000,
        "code": "1; rm -rf /",
        "host": "h\nost",
    }
    out = eventlines.line(ev("client_error\x1b[2J", nasty, generation="g", at="soon"), {})
    assert "\n" not in out and "\x1b" not in out and len(out) < 800
    assert out.startswith("????-??-?? ??:??:??  h\\nost") and " g? " in out
    for data in ("text", None, [1], {"iteration": {"a": 1}, "gates": "x", "dollars_this_iter": True}):
        assert eventlines.line(ev("iteration", data), {})  # never an error


def test_a_gates_answer_says_who_where_from_and_what_a_raise_changed():
    def said(data):
        return eventlines.line(ev("gate", data), {}).split("g1   ", 1)[1]

    api = {"gate": "budget-escalation", "answer": "raise", "by": "api", "user": "ana", "raised": {
        "max_iterations": [20, 30], "max_dollars": [None, 7.5]}}  # fmt: skip
    assert said(api) == (
        "gate budget-escalation answered raise by ana through the API; raised max-iterations 20 -> 30,"
        " max-dollars none -> 7.5"
    )
    assert said({"gate": "g", "answer": "stop", "by": "cli", "user": "bo@h"}) == (
        "gate g answered stop by bo@h from the command line"
    )
    assert (
        said({"gate": "g", "answer": "continue", "by": "alice@old"})
        == "gate g answered continue by alice@old"
    )
    assert (
        said({"gate": "g", "answer": "x", "by": "page", "raised": {"k": "bad"}})
        == "gate g answered x by ? on the page"
    )


def test_a_failed_preparation_says_which_try_and_what_comes_next():
    why = "the remote has no branch 'mian'"
    line = eventlines.line(ev("prepare_failed", {"error": why, "tries": 1, "of": 3, "wait": 60.0}), {})
    assert line.endswith(f"could not prepare it (try 1 of 3; tried again in 60 s): {why}")
    last = eventlines.line(ev("prepare_failed", {"error": why, "tries": 3, "of": 3, "wait": None}), {})
    assert last.endswith(f"could not prepare it (try 3 of 3; it ends): {why}")
