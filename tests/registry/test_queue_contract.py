"""The fleet's queue (registry/queue.py, registry/workers.py), the same assertions on the
embedded SQLite registry and on a real PostgreSQL: claim order, leases and their expiry,
generation fencing, failovers and their limit, release, stop/cancel and gate answers, the
repository filter, the timeline and the workers' beats."""

from __future__ import annotations

import pytest

from loopwright.registry import LeaseLost, RegistryError
from waiting import wait_for

GOAL = 'fix it\'; DROP TABLE fleet_loops; -- $(rm -rf ~) `id` && echo "pwned" | tee /etc/passwd %s {now}'


def submit(reg, repo="https://example.com/r.git", **kw):
    return reg.submit(kind=kw.pop("kind", "prompt"), spec=kw.pop("spec", {"goal": "g"}), repo=repo, **kw)


def test_a_submitted_loop_is_stored_as_given_and_queued(reg):
    row = submit(reg, spec={"goal": GOAL, "limits": {"max_iterations": 5}}, tags=["night", "x"], branch="dev")
    assert row["status"] == "queued" and row["generation"] == 0 and row["failovers"] == 0
    assert row["name"].startswith("f-") and len(row["name"]) == 10
    assert row["work_branch"] == f"loopwright/{row['name']}" and row["branch"] == "dev"
    assert row["account"] == "default" and row["worker"] is None
    again = reg.fleet_loop(row["name"])
    assert again == reg.fleet_loop(row["id"]) == row
    assert again["spec"] == {"goal": GOAL, "limits": {"max_iterations": 5}}
    assert again["tags"] == ["night", "x"] and again["state"] == {} and again["gate"] is None
    assert reg.fleet_loop("nope") is None
    assert [r["id"] for r in reg.fleet_loops(status="queued")] == [row["id"]]
    assert reg.fleet_loops(status="running") == []


def test_a_submit_refuses_a_bad_kind_name_or_repository_and_a_taken_name(reg):
    submit(reg, name="nightly")
    for bad in (
        {"kind": "shell"},
        {"name": "../../etc"},
        {"name": "-x"},
        {"repo": " "},
        {"repo": "--upload-pack=touch /tmp/x"},
        {"repo": "https://h/r.git\n"},
        {"branch": "-f"},
        {"branch": "a..b"},
        {"branch": "a b"},
        {"account": ""},
        {"spec": "goal"},
        {"name": "nightly"},
    ):
        with pytest.raises(RegistryError):
            submit(reg, **bad)
    assert [r["name"] for r in reg.fleet_loops()] == ["nightly"]
    spaced = submit(reg, repo="/srv/git/my repos/app.git", branch="feature/x-1")
    assert (spaced["repo"], spaced["branch"]) == ("/srv/git/my repos/app.git", "feature/x-1")


def test_claims_take_the_oldest_queued_loop_each_exactly_once(reg):
    ids = [submit(reg, name=f"l{i}")["id"] for i in range(6)]
    assert [r["id"] for r in reg.fleet_loops()] == ids[::-1]  # newest first
    got = [reg.claim(f"w{i % 2}", "host-a") for i in range(6)]
    assert [r["id"] for r in got] == ids
    assert {(r["status"], r["generation"], r["failovers"], r["host"]) for r in got} == {
        ("running", 1, 0, "host-a")
    }
    assert [r["worker"] for r in got] == ["w0", "w1"] * 3
    assert reg.claim("w2", "host-b") is None
    assert reg.fleet_loop(ids[0])["lease_expires"] == got[0]["lease_expires"]


def test_a_live_lease_keeps_a_loop_and_an_expired_one_fails_it_over(reg):
    loop = submit(reg)
    first = reg.claim("w1", "a", lease=30)
    assert reg.claim("w2", "b") is None  # the lease lives
    assert reg.heartbeat(loop["id"], 1, lease=0.2)["control"] is None
    second = wait_for(lambda: reg.claim("w2", "b", lease=30), "the lease to expire", within=60)
    assert second["id"] == loop["id"] and (second["worker"], second["host"]) == ("w2", "b")
    assert (second["generation"], second["failovers"]) == (2, 1)
    assert first["generation"] == 1
    # Fencing: the first worker, back, can write nothing.
    for write in (
        lambda: reg.heartbeat(loop["id"], 1),
        lambda: reg.progress(loop["id"], 1, iteration=9, dollars=9.0),
        lambda: reg.add_event(loop["id"], 1, "iteration", {"n": 9}),
        lambda: reg.release(loop["id"], 1, "draining"),
        lambda: reg.finish(loop["id"], 1, "LOOP_DONE", "done"),
    ):
        with pytest.raises(LeaseLost):
            write()
    row = reg.fleet_loop(loop["id"])
    assert (row["status"], row["iteration"], row["dollars"], row["worker"]) == ("running", 0, 0.0, "w2")
    # The claims are in the timeline (the fenced-off writes are not), the failover naming the
    # worker whose lease ran out.
    seen = [(e["kind"], e["generation"], e["data"]) for e in reg.events(loop["id"])]
    assert seen == [
        ("claimed", 1, {"worker": "w1", "host": "a", "failovers": 0}),
        ("failover", 2, {"worker": "w2", "host": "b", "failovers": 1, "from_worker": "w1", "from_host": "a"}),
    ]
    reg.progress(loop["id"], 2, iteration=3)
    reg.finish(loop["id"], 2, "LOOP_DONE", "the goal is met")
    last = reg.events(loop["id"])[-1]
    assert (last["kind"], last["generation"], last["data"]) == (
        "ended",
        2,
        {"outcome": "LOOP_DONE", "reason": "the goal is met", "worker": "w2", "host": "b"},
    )
    row = reg.fleet_loop(loop["id"])
    assert (row["status"], row["outcome"], row["reason"], row["worker"]) == (
        "ended",
        "LOOP_DONE",
        "the goal is met",
        None,
    )
    assert row["iteration"] == 3
    with pytest.raises(LeaseLost):  # an ended loop takes no more writes, even from its last holder
        reg.heartbeat(loop["id"], 2)
    assert reg.claim("w3", "c") is None


def test_the_fourth_failover_ends_the_loop_and_the_next_one_is_claimed(reg):
    loop = submit(reg)
    spare = submit(reg, account="other")
    assert reg.claim("w0", "a", lease=0.2, accounts=["default"])["id"] == loop["id"]
    for n in (1, 2, 3):
        row = wait_for(lambda n=n: reg.claim(f"w{n}", "a", lease=0.2, accounts=["default"]), f"failover {n}")
        assert (row["id"], row["generation"], row["failovers"]) == (loop["id"], n + 1, n)
    assert reg.claim("wx", "x", lease=0.2, accounts=["other"])["id"] == spare["id"]
    # Both leases run out (the spare's last): the next claim ends the loop, then takes the spare.
    other = wait_for(lambda: reg.claim("w9", "z", lease=30), "the spare's failover")
    assert (other["id"], other["failovers"]) == (spare["id"], 1)
    row = reg.fleet_loop(loop["id"])
    assert (row["status"], row["outcome"], row["worker"], row["failovers"]) == (
        "ended",
        "STOPPED:failover_limit",
        None,
        3,
    )
    assert "3" in row["reason"]
    kinds = [e["kind"] for e in reg.events(loop["id"])]
    assert kinds == ["claimed", "failover", "failover", "failover", "ended"]
    assert reg.events(loop["id"])[-1]["data"]["outcome"] == "STOPPED:failover_limit"
    with pytest.raises(LeaseLost):
        reg.heartbeat(loop["id"], 4)  # its last holder, back: fenced off by the ending
    assert reg.claim("w10", "z") is None


def test_a_released_loop_is_queued_again_and_its_next_claim_is_no_failover(reg):
    loop = submit(reg)
    reg.claim("w1", "a")
    reg.progress(loop["id"], 1, iteration=2, minutes=1.5, tokens=1200, dollars=0.25)
    reg.release(loop["id"], 1, "the worker drains")
    row = reg.fleet_loop(loop["id"])
    assert (row["status"], row["worker"], row["lease_expires"], row["reason"]) == (
        "queued",
        None,
        None,
        "the worker drains",
    )
    again = reg.claim("w2", "b")
    assert (again["generation"], again["failovers"], again["iteration"], again["tokens"]) == (2, 0, 2, 1200)
    assert (again["minutes"], again["dollars"]) == (1.5, 0.25)
    with pytest.raises(LeaseLost):
        reg.progress(loop["id"], 1, iteration=3)
    seen = [(e["kind"], e["data"]) for e in reg.events(loop["id"])]
    assert seen == [
        ("claimed", {"worker": "w1", "host": "a", "failovers": 0}),
        ("released", {"reason": "the worker drains", "worker": "w1", "host": "a"}),
        ("claimed", {"worker": "w2", "host": "b", "failovers": 0}),
    ]


def test_progress_records_an_iteration_and_returns_the_control(reg):
    loop = submit(reg)
    reg.claim("w1", "a")
    state = {"budget": {"iterations": 2}, "gates": [{"name": "g", "answer": None}], "goal": GOAL}
    out = reg.progress(loop["id"], 1, iteration=2, state=state, last_decision="continue")
    assert out == {"control": None, "gate": None}
    row = reg.fleet_loop(loop["id"])
    assert (row["iteration"], row["state"], row["last_decision"]) == (2, state, "continue")
    with pytest.raises(ValueError):
        reg.progress(loop["id"], 1, worker="me")
    with pytest.raises(ValueError):
        reg.progress(loop["id"], 1, status="ended")


def test_stop_and_cancel_end_an_idle_loop_now_and_reach_a_running_one_through_its_heartbeat(reg):
    queued, cancelled, running = submit(reg, name="q"), submit(reg, name="c"), submit(reg, name="r")
    stopped = reg.request("q", "stop")
    assert (stopped["status"], stopped["control"]) == ("ended", "stop")
    assert stopped["outcome"] == "STOPPED:user_stop"
    assert reg.request(cancelled["id"], "cancel")["outcome"] == "CANCELLED"
    claimed = reg.claim("w1", "a")
    assert claimed["id"] == running["id"]  # the ended ones are not claimed
    row = reg.request("r", "stop")
    assert (row["status"], row["control"], row["outcome"], row["worker"]) == ("running", "stop", None, "w1")
    assert reg.heartbeat(running["id"], 1)["control"] == "stop"
    assert reg.progress(running["id"], 1, iteration=1)["control"] == "stop"
    reg.finish(running["id"], 1, "STOPPED:user_stop", "asked to stop")
    assert reg.request("r", "cancel")["outcome"] == "STOPPED:user_stop"  # ended: left as it was
    assert reg.request("nope", "stop") is None
    with pytest.raises(ValueError):
        reg.request("r", "pause")
    assert reg.fleet_loop(queued["id"])["status"] == "ended"
    # Each request is in the timeline: one that ended an idle loop says so; none once it ended.
    (asked,) = reg.events(queued["id"])
    assert asked["kind"] == "stop_requested" and "while no worker ran it" in asked["data"]["ended"]
    kinds = [(e["kind"], e["data"].get("host")) for e in reg.events(running["id"])]
    assert kinds == [("claimed", "a"), ("stop_requested", "a"), ("ended", "a")]


def test_a_gate_answer_queues_the_loop_for_whichever_worker_claims_it_next(reg):
    loop = submit(reg, name="gated")
    reg.claim("w1", "a")
    assert reg.answer_gate("gated", "continue", "alice") is None  # no gate waits yet
    gate = {"name": "budget-escalation", "question": "Continue?", "options": ["continue", "stop"]}
    reg.progress(loop["id"], 1, iteration=4, status="waiting_gate", gate=gate)
    reg.add_event(loop["id"], 1, "gate", {"name": "budget-escalation"})
    assert reg.claim("w2", "b", lease=0.01) is None  # a waiting loop is nobody's to claim
    row = reg.answer_gate("gated", "continue", "alice")
    assert (row["status"], row["worker"]) == ("queued", None)
    assert row["gate"]["answer"] == "continue" and row["gate"]["by"] == "alice"
    assert row["gate"]["question"] == "Continue?" and row["gate"]["answered_at"] > 0
    with pytest.raises(LeaseLost):
        reg.heartbeat(loop["id"], 1)  # the worker that waited lets go
    again = reg.claim("w2", "b")
    assert (again["id"], again["generation"], again["failovers"], again["iteration"]) == (loop["id"], 2, 0, 4)
    assert again["gate"]["answer"] == "continue"
    assert reg.answer_gate("gated", "stop", "bob") is None
    answered = next(e for e in reg.events(loop["id"]) if e["kind"] == "gate" and "answer" in e["data"])
    assert answered["data"] == {"gate": "budget-escalation", "answer": "continue", "by": "alice"}


def test_a_release_while_a_gate_waits_keeps_it_waiting(reg):
    loop = submit(reg)
    reg.claim("w1", "a")
    reg.progress(loop["id"], 1, status="waiting_gate", gate={"name": "g"})
    reg.release(loop["id"], 1, "draining")
    row = reg.fleet_loop(loop["id"])
    assert (row["status"], row["worker"], row["gate"]) == ("waiting_gate", None, {"name": "g"})
    assert reg.claim("w2", "b") is None


def test_the_repository_filter_skips_loops_and_leaves_them_for_other_workers(reg):
    others = [submit(reg, repo=f"https://evil.example/{i}.git")["id"] for i in range(20)]
    mine = submit(reg, repo="https://git.example/ok.git")["id"]
    allowed = []

    def only_ok(repo):
        allowed.append(repo)
        return repo.startswith("https://git.example/")

    got = reg.claim("w1", "a", allowed=only_ok)
    assert got["id"] == mine and len(allowed) == 21  # past a whole batch of refused ones
    assert reg.claim("w1", "a", allowed=only_ok) is None
    assert [reg.fleet_loop(i)["status"] for i in others] == ["queued"] * 20
    assert reg.claim("w2", "b")["id"] == others[0]


def test_the_repository_filter_holds_for_repositories_it_allowed_before(reg):
    """The repositories a filter allowed are remembered (a claim may take their loops in one
    statement): a loop of another repository at the head of the queue is still looked at and
    left, a repository new to the filter is still asked about, and another filter starts afresh."""
    ok, new, evil = "https://git.example/ok.git", "https://git.example/new.git", "https://evil.example/x.git"
    asked = []

    def only_ok(repo):
        asked.append(repo)
        return repo.startswith("https://git.example/")

    first = submit(reg, repo=ok)["id"]
    assert reg.claim("w1", "a", allowed=only_ok)["id"] == first
    bad, second, third = (submit(reg, repo=r)["id"] for r in (evil, ok, new))
    asked.clear()
    assert reg.claim("w1", "a", allowed=only_ok)["id"] == second and evil in asked
    assert reg.claim("w1", "a", allowed=only_ok)["id"] == third and new in asked
    assert reg.claim("w1", "a", allowed=only_ok) is None
    fourth = submit(reg, repo=ok)["id"]
    assert reg.claim("w2", "b", allowed=lambda repo: False) is None
    assert [reg.fleet_loop(i)["status"] for i in (bad, fourth)] == ["queued", "queued"]
    assert reg.claim("w1", "a", allowed=only_ok)["id"] == fourth


def test_the_account_filter(reg):
    a = submit(reg, account="team-a")
    b = submit(reg, account="team-b")
    assert reg.claim("w", "h", accounts=[]) is None
    assert reg.claim("w", "h", accounts=["team-b", "team-c"])["id"] == b["id"]
    assert reg.claim("w", "h", accounts=["team-b"]) is None
    assert reg.claim("w", "h")["id"] == a["id"]


def test_a_loop_timeline_is_appended_by_its_holder_and_read_in_order(reg):
    loop = submit(reg)
    other = submit(reg)
    reg.claim("w1", "a")
    reg.claim("w1", "a")
    for n in range(4):
        reg.add_event(loop["id"], 1, "iteration", {"n": n, "note": GOAL})
    reg.add_event(other["id"], 1, "note", {"host": "a"})
    claim, *events = reg.events(loop["id"])  # the claim's own event first
    assert claim["kind"] == "claimed"
    assert [(e["kind"], e["data"]["n"], e["generation"]) for e in events] == [
        ("iteration", n, 1) for n in range(4)
    ]
    assert events[0]["data"]["note"] == GOAL and all(e["loop_id"] == loop["id"] for e in events)
    assert [e["data"]["n"] for e in reg.events(loop["id"], after=events[1]["id"])] == [2, 3]
    assert [e["kind"] for e in reg.events(loop["id"], limit=2)] == ["claimed", "iteration"]
    assert [e["kind"] for e in reg.events(other["id"])] == ["claimed", "note"]


def test_workers_beat_into_one_row_each_and_can_be_forgotten(reg):
    reg.worker_beat("w1", "host-a", 4, 0, "default", [])
    first = reg.workers()[0]
    reg.worker_beat("w1", "host-a", 4, 2, "default", ["l1", "l2"])
    reg.worker_beat("w2", "host-b", 1, 1, None, ["l3"])
    rows = reg.workers()
    assert [(w["worker"], w["host"], w["slots"], w["used"], w["account"], w["loops"]) for w in rows] == [
        ("w1", "host-a", 4, 2, "default", ["l1", "l2"]),
        ("w2", "host-b", 1, 1, None, ["l3"]),
    ]
    assert rows[0]["started_at"] == first["started_at"]
    assert all(w["age"] >= 0 for w in rows)
    assert reg.forget_worker("w1") is True and reg.forget_worker("w1") is False
    assert [w["worker"] for w in reg.workers()] == ["w2"]


def test_notifications_reach_a_listener_on_postgresql(reg, registry_url):
    if not registry_url.startswith("postgresql://"):
        pytest.skip("the embedded database has no notifications: its callers poll")
    listener = reg.backend.listener(("loopwright_queue", "loopwright_control"))
    try:
        wait_for(lambda: ("", "listening") in listener.wait(0.2), "the listener to listen")
        loop = submit(reg)
        reg.request(loop["id"], "stop")
        heard: list = []
        wait_for(lambda: heard.extend(listener.wait(0.2)) or len(heard) >= 2, "two notifications")
        assert heard == [("loopwright_queue", loop["id"]), ("loopwright_control", loop["id"])]
    finally:
        listener.close()
