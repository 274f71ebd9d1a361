"""Control of a fleet loop from the monitor's REST API, end to end on a real PostgreSQL: a loop
submitted with `POST /api/loops` and a "repo" is claimed by a real worker (`loopwright worker`,
the real Claude Code CLI against the scripted Messages API); `POST /api/fleet/<loop>/stop` while
its first turn is under way reaches that worker (NOTIFY, then its claim's control) within a
bounded wait, and the loop ends STOPPED:user_stop, as a stop on one machine ends it."""

from __future__ import annotations

import json
import threading

import pytest
from starlette.testclient import TestClient

import fakeapi
from fleetkit import make_remote, start_worker, stop_worker, worker_log
from loopwright.registry import open_registry
from loopwright.serve import app as api
from waiting import wait_for

pytestmark = pytest.mark.e2e
TOKEN = "c" * 40


class NoRuns:
    def start(self, *args, **kwargs):
        raise AssertionError("a fleet submit must not start a local run")


def controls(proc) -> list[dict]:
    """The control events the worker logged (one JSON line per event)."""
    out = []
    for line in worker_log(proc).splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "control":
            out.append(event)
    return out


def test_a_stop_from_the_api_reaches_the_worker_and_ends_the_loop(pg_url, project, tmp_path):
    remote = make_remote(tmp_path)
    reg = open_registry(pg_url)
    monitor = api.Monitor([project], reg, NoRuns(), TOKEN)
    c = TestClient(
        api.make_app(monitor), client=("127.0.0.1", 50000), headers={"Authorization": f"Bearer {TOKEN}"}
    )
    made = c.post("/api/loops", json={"repo": f"file://{remote}", "goal": "write the notes", "name": "notes"})
    assert made.status_code == 201, made.text
    pressed = threading.Event()  # the first turn's answer waits for the stop
    first = fakeapi.hang(120, fakeapi.text("Iteration one, at last."), release=pressed)
    try:
        with fakeapi.ScriptedServer([first], default=fakeapi.text("More work.")) as server:
            worker = start_worker(pg_url, remote, tmp_path / "w1", server, tmp_path / "home")
            try:
                wait_for(lambda: server.conversation_requests, "the first turn", within=180, proc=worker)
                assert c.get("/api/fleet/notes").json()["loop"]["status"] == "running"
                asked = c.post("/api/fleet/notes/stop")
                assert asked.status_code == 200 and asked.json()["asked"] == "stop"
                (control,) = wait_for(lambda: controls(worker), "the worker to act on the stop", within=60)
                assert control["what"] == "stop" and control["loop"] == "notes"
                pressed.set()
                row = wait_for(
                    lambda: (r := reg.fleet_loop("notes"))["status"] == "ended" and r,
                    "the loop to end",
                    within=180,
                    every=0.3,
                    proc=worker,
                )
            finally:
                pressed.set()
                log = stop_worker(worker)
        assert row["outcome"] == "STOPPED:user_stop", log
        shown = next(r for r in c.get("/api/fleet").json()["loops"] if r["name"] == "notes")
        assert shown["outcome"] == "STOPPED:user_stop" and shown["status"] == "ended"
        assert c.post("/api/fleet/notes/stop").status_code == 409
    finally:
        monitor.fleet.stop()
        reg.close()


def test_a_raise_from_the_api_reaches_the_loop_on_its_next_worker(pg_url, project, tmp_path):
    """A fleet loop waits at its budget gate (asked at 16 of 20 iterations, unanswered for three
    turns): `raise` with a new ceiling of 30 is what the loop runs under when a worker takes it
    again: it goes past the old ceiling and asks again at the new one's 80% (24 of 30); the
    answer is in its timeline with who gave it."""
    remote = make_remote(tmp_path)
    reg = open_registry(pg_url)
    monitor = api.Monitor([project], reg, NoRuns(), TOKEN)
    c = TestClient(
        api.make_app(monitor), client=("127.0.0.1", 50000), headers={"Authorization": f"Bearer {TOKEN}"}
    )
    made = c.post(
        "/api/loops", json={"repo": f"file://{remote}", "goal": "tidy", "name": "tidy", "max_iterations": 20}
    )
    assert made.status_code == 201, made.text

    def at_gate(iteration):
        row = reg.fleet_loop("tidy")
        return (row["status"] == "waiting_gate" and row["iteration"] >= iteration) or row["status"] == "ended"

    try:
        with fakeapi.ScriptedServer([], default=fakeapi.text("More tidying.")) as server:
            worker = start_worker(pg_url, remote, tmp_path / "w1", server, tmp_path / "home")
            try:
                wait_for(lambda: at_gate(16), "the budget gate", within=300, every=0.3, proc=worker)
                first = reg.fleet_loop("tidy")
                assert first["status"] == "waiting_gate", (
                    first["outcome"],
                    first["reason"],
                    worker_log(worker),
                )
                gate = first["gate"]
                assert gate["name"] == "budget-escalation" and gate["dimensions"] == ["iterations"]
                asked = c.post(
                    "/api/fleet/tidy/gate", json={"answer": "raise", "raise_to": {"max_iterations": 30}}
                )
                assert asked.status_code == 200, asked.text
                wait_for(
                    lambda: at_gate(24), "the gate at the new ceiling", within=300, every=0.3, proc=worker
                )
            finally:
                log = stop_worker(worker)
        row = reg.fleet_loop("tidy")
        assert row["status"] == "waiting_gate" and 24 <= row["iteration"] < 30, (row["outcome"], log)
        assert row["spec"]["limits"] == {"max_iterations": 30}
        answered = [e["data"] for e in reg.events(row["id"]) if e["kind"] == "gate"]
        (one,) = answered
        assert (one["gate"], one["answer"], one["question"]) == (
            "budget-escalation",
            "raise",
            gate["question"],
        )
        assert one["by"] == "api" and one["user"] and one["raised"] == {"max_iterations": [20, 30]}
    finally:
        monitor.fleet.stop()
        reg.close()
