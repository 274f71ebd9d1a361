"""The worker's log lines a person reads (fleet/logline.py): a fleet loop's gate answered with
`fleet answer`, counts in the right number, an end said once with its reason."""

from __future__ import annotations

from loopwright.core import recovery
from loopwright.fleet import logline

AT = 1_795_840_761.5  # 2026-11-28 04:39:21 UTC


def said(event: str, **fields) -> str:
    return logline.text(event, fields, at=AT).split(" ", 2)[2]


def test_a_loop_waiting_at_a_gate_is_told_how_the_fleet_answers_it():
    _, reason = recovery.after_client(True, ["budget-escalation"], 3, recovery.Counts(), "exit", 3, 10)
    line = said("waiting", loop="wg", detail={"event": "waiting", "reason": reason})
    assert line == (
        "waiting wg: the loop waits for an answer to gate(s) budget-escalation; answer with"
        " `loopwright fleet answer wg <option>`"
    )
    assert "loopwright run --loop" not in line


def test_slots_and_endings_read_as_sentences():
    assert said("started", worker="w", host="h", slots=1, allow=["file:///r"]).startswith(
        "started worker w on h: 1 slot, repositories file:///r"
    )
    assert ": 4 slots," in said("started", worker="w", host="h", slots=4, allow=["x"])
    assert said("ended", loop="l", outcome="CANCELLED", reason="cancelled from the fleet") == (
        "ended l: CANCELLED (cancelled from the fleet)"
    )


def test_a_loop_that_cannot_be_prepared_says_what_happens_next():
    why = "the remote has no branch 'mian' to start loopwright/br1 from"
    assert said("prepare_failed", loop="br1", reason=why, tries=1, ended=False, wait=60.0) == (
        f"could not prepare br1 (try 1 of 3; tried again in 60.0 s): {why}"
    )
    assert said("prepare_failed", loop="br1", reason=why, tries=3, ended=True, wait=None).startswith(
        "could not prepare br1 (try 3 of 3; it ends): "
    )
