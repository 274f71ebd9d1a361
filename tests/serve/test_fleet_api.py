"""The monitor's fleet API, in process, the same assertions on the embedded SQLite registry and
on a real PostgreSQL: the fleet at a glance, a loop in full, its timeline in slices, submitting
with a "repo" (refused as a worker would refuse it), stop, cancel and gate answers with their
404s and 409s, and the token, sign-in and CSRF rules of the rest of the API."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

import hostileurls
from loopwright.registry import open_registry
from loopwright.serve import app as api
from loopwright.serve import fleetwatch

TOKEN = "f" * 40
REPO_URL = "https://example.com/acme/site.git"
GOAL = (
    'Tidy <img src=x onerror="window.pwned=1"> the docs\'; DROP TABLE fleet_loops; -- $(rm -rf ~) `id` '
    "&& echo {now} %s\nThen check every link & anchor."
)


class NoRuns:
    """The fleet API starts no local run: any call here is a failure."""

    def start(self, *args, **kwargs):
        raise AssertionError("a fleet submit must not start a local run")


@pytest.fixture
def monitor(registry_url, project):
    reg = open_registry(registry_url)
    m = api.Monitor([project], reg, NoRuns(), TOKEN)
    yield m
    m.fleet.stop()
    reg.close()


def client(monitor, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(api.make_app(monitor), client=("127.0.0.1", 50000), headers=headers)


def submit(c, **fields):
    return c.post("/api/loops", json={"repo": REPO_URL, "goal": "g", **fields})


def held(reg, name, worker="w-1", host="alpha"):
    """``name`` claimed by ``worker`` (the only queued loop left when called)."""
    row = reg.claim(worker, host, lease=60)
    assert row is not None and row["name"] == name
    return row


def waiting_at_gate(reg, name):
    row = held(reg, name)
    gate = {"name": "budget-escalation", "question": "Spend <b>more</b>?", "options": ["continue", "stop"]}
    reg.progress(row["id"], row["generation"], status="waiting_gate", gate=gate)
    reg.release(row["id"], row["generation"], "waiting at gate budget-escalation")
    return row


def test_the_fleet_at_a_glance(monitor):
    c, reg = client(monitor), monitor.registry
    made = submit(c, goal=GOAL, name="tidy", account="acme", tags=["docs"], max_iterations=7, maxDollars=3)
    assert made.status_code == 201, made.text
    assert made.json()["loop"]["goal"] == GOAL.splitlines()[0] and made.json()["loop"]["goal_more"]
    assert submit(c, goal=None, mode="work", args=["--source", "github"], name="backlog").status_code == 201
    row = reg.fleet_loop("tidy")
    assert row["spec"] == {"goal": GOAL, "limits": {"max_iterations": 7, "max_dollars": 3}}
    assert row["account"] == "acme" and row["tags"] == ["docs"] and row["kind"] == "prompt"
    held(reg, "tidy")
    reg.worker_beat("w-1", "alpha", 2, 1, "acme", [row["id"]])
    reg.set_limits("fleet", max_dollars_per_day=50)
    reg.pause_account("acme", reg.limits_report()["now"] + 3600, "usage limit", "w-1")

    fleet = c.get("/api/fleet").json()
    assert fleet["show"] and fleet["queue"] == {"queued": 1, "running": 1, "waiting_gate": 0, "ended": 0}
    loops = {r["name"]: r for r in fleet["loops"]}
    assert loops["tidy"]["host"] == "alpha" and loops["tidy"]["status"] == "running"
    assert loops["tidy"]["limits"] == {"max_iterations": 7, "max_dollars": 3} and "spec" not in loops["tidy"]
    assert loops["backlog"]["goal"] == "work --source github" and loops["backlog"]["kind"] == "work"
    (w,) = fleet["workers"]
    assert (w["host"], w["used"], w["slots"], w["account"]) == ("alpha", 1, 2, "acme") and w["age"] >= 0
    assert fleet["limits"]["limits"][0]["scope"] == "fleet"
    assert fleet["limits"]["limits"][0]["max_dollars_per_day"] == 50
    assert [p["account"] for p in fleet["limits"]["pauses"]] == ["acme"]
    full = c.get("/api/fleet/tidy").json()["loop"]  # the whole goal, on demand, as stored
    assert full["goal"] == GOAL and full["id"] == row["id"]
    assert c.get(f"/api/fleet/{row['id']}").json()["loop"]["name"] == "tidy"  # by id too


def test_the_fleet_shows_on_a_shared_database_even_when_empty(monitor, registry_url):
    shown = client(monitor).get("/api/fleet").json()
    assert shown["show"] == registry_url.startswith("postgresql://") and shown["loops"] == []


def test_a_submit_is_refused_as_a_worker_would_refuse_it(monitor):
    c = client(monitor)
    for repo in ("-oProxyCommand=touch /tmp/x", "", "a\nb", 7):
        res = c.post("/api/loops", json={"repo": repo, "goal": "g"})
        assert res.status_code == 400 and "repository" in res.json()["error"], res.text
    bad = [
        ({"goal": ""}, "goal"),
        ({"goal": "g", "max_iterations": 0}, "max_iterations"),
        ({"goal": "g", "max_dollars": "5"}, "max_dollars"),
        ({"goal": "g", "limits": {"max_turns": 3}}, "max_turns"),
        ({"goal": "g", "colour": "red"}, "colour"),
        ({"goal": None, "mode": "dance"}, "dance"),
        ({"goal": None, "mode": "work", "args": ["--claude=/bin/sh"]}, "--claude"),
        ({"goal": "g", "tags": "docs"}, "tags"),
        ({"goal": "g", "name": "../x"}, "name"),
        ({"goal": "g", "branch": "--upload-pack=x"}, "branch"),
        ({"goal": "g", "judge": "yes"}, "judge"),
        ({"goal": "g", "gates": "maybe"}, "gates must be one of ask, continue, stop"),
        ({"goal": "g", "wrap_up_floor": 2}, "wrap_up_floor must be a number between 0 and 0.5"),
    ]
    for fields, word in bad:
        res = submit(c, **fields)
        assert res.status_code == 400 and word in res.json()["error"], (fields, res.text)
        assert "\n" not in res.json()["error"]
    assert submit(c, name="once").status_code == 201
    assert submit(c, name="once").status_code == 409
    assert c.post("/api/loops", json={"repo": REPO_URL, "goal": "x" * (api.MAX_BODY + 1)}).status_code == 413
    assert [r["name"] for r in monitor.registry.fleet_loops()] == ["once"]


def test_the_api_takes_the_loop_options_submit_takes(monitor):
    c = client(monitor)
    assert submit(c, name="opts", gates="stop", wrap_up_floor=0.2, judge_timeout=30).status_code == 201
    spec = monitor.registry.fleet_loop("opts")["spec"]
    assert (spec["gates"], spec["wrap_up_floor"], spec["judge_timeout"]) == ("stop", 0.2, 30)


def test_the_api_refuses_the_hostile_table_by_shape_and_queues_the_rest(monitor):
    """Issue 26's table through POST /api/loops: as `submit` does, each URL refused by its shape
    is a 400 naming why, and the rest are queued for a worker's allow-list to judge."""
    c = client(monitor)
    kept = []
    for hostile in hostileurls.TABLE:
        url = hostileurls.render(hostile.url, port=8999, redirect=8998)
        res = c.post("/api/loops", json={"repo": url, "goal": "g"})
        if hostile.shape:
            error = res.json()["error"]
            assert res.status_code == 400 and "bad repository" in error and hostile.says in error, (
                url,
                res.text,
            )
        else:
            assert res.status_code == 201, (url, res.text)
            kept.append(url)
    assert sorted(r["repo"] for r in monitor.registry.fleet_loops()) == sorted(kept)


def test_a_repository_or_verify_no_live_worker_accepts_is_refused(monitor):
    c, reg = client(monitor), monitor.registry
    alone = submit(c, name="early", verify="make test")  # no worker yet: queued, with a warning
    assert alone.status_code == 201 and "no live worker" in alone.json()["warning"]
    reg.worker_beat(
        "w-1", "alpha", 2, 0, None, [], allow_repo=["https://example.com/acme/*"], allow_verify=[]
    )
    far = c.post("/api/loops", json={"repo": "https://example.com/far/x.git", "goal": "g"})
    assert far.status_code == 409 and far.json()["error"] == (
        "no live worker accepts the repository https://example.com/far/x (1 live worker): "
        "start a worker with --allow-repo https://example.com/far/x"
    )
    checked = submit(c, verify="make test")
    assert checked.status_code == 409 and checked.json()["error"].endswith("--allow-verify 'make test'")
    plain = submit(c, name="plain")
    assert plain.status_code == 201 and "warning" not in plain.json()
    assert sorted(r["name"] for r in reg.fleet_loops()) == ["early", "plain"]


def test_unknown_loops_are_404(monitor):
    c = client(monitor)
    for method, path in (
        ("GET", "/api/fleet/nope"),
        ("GET", "/api/fleet/nope/events"),
        ("POST", "/api/fleet/nope/stop"),
        ("POST", "/api/fleet/nope/cancel"),
        ("POST", "/api/fleet/' OR '1'='1/stop"),
    ):
        res = c.request(method, path, json={} if method == "POST" else None)
        assert res.status_code == 404 and "no fleet loop" in res.json()["error"], (path, res.text)
    assert c.post("/api/fleet/nope/gate", json={"answer": "continue"}).status_code == 404


def test_stop_and_cancel(monitor):
    c, reg = client(monitor), monitor.registry
    submit(c, name="idle")
    cancelled = c.post("/api/fleet/idle/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["loop"]["outcome"] == "CANCELLED"
    res = c.post("/api/fleet/idle/stop")  # ended: nothing to stop
    assert res.status_code == 409 and "ended already" in res.json()["error"]
    submit(c, name="busy")
    row = held(reg, "busy")
    asked = c.post("/api/fleet/busy/stop").json()
    assert asked["asked"] == "stop" and asked["loop"]["status"] == "running"  # its worker ends it
    assert reg.heartbeat(row["id"], row["generation"])["control"] == "stop"


def test_a_waiting_gate_is_answered_with_one_of_its_options(monitor):
    c, reg = client(monitor), monitor.registry
    submit(c, name="gated")
    assert c.post("/api/fleet/gated/gate", json={"answer": "continue"}).status_code == 409  # no gate yet
    waiting_at_gate(reg, "gated")
    shown = next(r for r in c.get("/api/fleet").json()["loops"] if r["name"] == "gated")
    assert shown["status"] == "waiting_gate" and shown["gate"]["options"] == ["continue", "stop"]
    for answer in ("maybe", "", None, "x" * 500):
        assert c.post("/api/fleet/gated/gate", json={"answer": answer}).status_code == 400
    assert c.post("/api/fleet/gated/gate", content=b"[1]").status_code == 400
    done = c.post("/api/fleet/gated/gate", json={"answer": "continue"})
    assert done.status_code == 200 and done.json()["loop"]["status"] == "queued"
    gate = reg.fleet_loop("gated")["gate"]
    assert (gate["answer"], gate["by"]) == ("continue", "api")
    assert c.post("/api/fleet/gated/gate", json={"answer": "stop"}).status_code == 409  # answered


def test_the_timeline_in_bounded_slices(monitor):
    c, reg = client(monitor), monitor.registry
    submit(c, name="long")
    row = held(reg, "long")
    for i in range(1, 6):
        reg.add_event(row["id"], row["generation"], "iteration", {"iteration": i, "outcome": "<i>x</i>"})
    first = c.get("/api/fleet/long/events", params={"limit": 3}).json()
    assert [e["kind"] for e in first["events"]][0] == "claimed"  # the claim's own event
    assert [e["data"]["iteration"] for e in first["events"][1:]] == [1, 2] and first["more"]
    rest = c.get("/api/fleet/long/events", params={"after": first["next"], "limit": 10}).json()
    assert [e["data"]["iteration"] for e in rest["events"]] == [3, 4, 5] and not rest["more"]
    assert rest["events"][0]["data"]["outcome"] == "<i>x</i>"  # stored and sent as text
    assert c.get("/api/fleet/long/events", params={"after": rest["next"]}).json()["events"] == []
    for params in ({"limit": 501}, {"after": "-1"}, {"limit": "x"}):
        assert c.get("/api/fleet/long/events", params=params).status_code == 400


def test_the_fleet_api_keeps_the_rules_of_the_rest(monitor):
    assert client(monitor, token=None).get("/api/fleet").status_code == 401
    assert client(monitor, token="wrong").post("/api/fleet/x/stop").status_code == 401
    c = TestClient(api.make_app(monitor), client=("127.0.0.1", 50000))
    code = monitor.login_code()
    assert c.post("/login", data={"code": code}, follow_redirects=False).status_code == 303
    csrf = c.get("/").text.split('name="csrf" content="')[1].split('"')[0]
    assert c.get("/api/fleet").status_code == 200  # the page's cookie reads
    assert c.post("/api/loops", json={"repo": REPO_URL, "goal": "g"}).status_code == 403  # no CSRF token
    made = c.post(
        "/api/loops", json={"repo": REPO_URL, "goal": "g", "name": "p"}, headers={"X-Loopwright-CSRF": csrf}
    )
    assert made.status_code == 201
    waiting_at_gate(monitor.registry, "p")
    assert c.post("/api/fleet/p/gate", json={"answer": "stop"}).status_code == 403
    res = c.post("/api/fleet/p/gate", json={"answer": "stop"}, headers={"X-Loopwright-CSRF": csrf})
    assert res.status_code == 200 and monitor.registry.fleet_loop("p")["gate"]["by"] == "page"
    far = TestClient(
        api.make_app(monitor), client=("10.0.0.2", 50000), headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert far.get("/api/fleet").status_code == 403


def budget_gate(reg, name, dollars=4.2, max_dollars=5):
    """``name`` (submitted with a $``max_dollars`` ceiling) waits at its budget-escalation gate."""
    row = held(reg, name)
    reg.progress(row["id"], row["generation"], dollars=dollars, iteration=3, status="waiting_gate", gate={
        "name": "budget-escalation", "question": f"Approaching dollars (${dollars}/${max_dollars}).",
        "options": ["continue", "raise", "stop"], "dimensions": ["dollars"],
    })  # fmt: skip
    reg.release(row["id"], row["generation"], "waiting at gate budget-escalation")
    return row


def test_raise_asks_for_a_ceiling_above_the_one_it_has_and_applies_it(monitor):
    c, reg = client(monitor), monitor.registry
    submit(c, name="pricey", max_dollars=5, max_iterations=20)
    row = budget_gate(reg, "pricey")
    for bad, words in (
        ({"answer": "raise", "raise_to": {"max_dollars": 5}}, "above the ceiling it has ($5.00)"),
        ({"answer": "raise", "raise_to": {"max_dollars": 4}}, "above the ceiling it has"),
        ({"answer": "raise", "raise_to": {"max_dollars": "lots"}}, "must be a number"),
        ({"answer": "raise", "raise_to": {"max_dollars": 2_000_000}}, "max_dollars must be between"),
        ({"answer": "raise", "raise_to": {"max_iterations": 40}}, "not a ceiling this gate asks about"),
        ({"answer": "raise", "raise_to": [9]}, "raise_to goes only with"),
        ({"answer": "continue", "raise_to": {"max_dollars": 9}}, "raise_to goes only with"),
    ):
        res = c.post("/api/fleet/pricey/gate", json=bad)
        assert res.status_code == 400 and words in res.json()["error"], (bad, res.text)
    assert reg.fleet_loop("pricey")["status"] == "waiting_gate"  # nothing refused changed it
    done = c.post("/api/fleet/pricey/gate", json={"answer": "raise", "raise_to": {"max_dollars": 9.5}})
    assert done.status_code == 200, done.text
    after = reg.fleet_loop("pricey")
    assert after["status"] == "queued" and after["spec"]["limits"] == {
        "max_dollars": 9.5,
        "max_iterations": 20,
    }
    assert (after["gate"]["answer"], after["gate"]["by"], after["gate"]["raised"]) == (
        "raise", "api", {"max_dollars": [5, 9.5]},
    )  # fmt: skip
    (event,) = [e for e in c.get("/api/fleet/pricey/events").json()["events"] if e["kind"] == "gate"]
    assert event["kind"] == "gate" and event["generation"] == row["generation"]
    assert event["data"]["answer"] == "raise" and event["data"]["raised"] == {"max_dollars": [5, 9.5]}
    assert event["data"]["user"] and event["data"]["by"] == "api"  # who answered, and how


def test_raise_with_no_ceiling_given_raises_by_half(monitor):
    c, reg = client(monitor), monitor.registry
    submit(c, name="pricey", max_dollars=5)
    budget_gate(reg, "pricey")
    assert c.post("/api/fleet/pricey/gate", json={"answer": "raise"}).status_code == 200
    assert reg.fleet_loop("pricey")["spec"]["limits"] == {"max_dollars": 7.5}


def test_the_fleet_says_what_needs_the_operator(monitor):
    c, reg = client(monitor), monitor.registry
    for name in ("gated", "broke", "busy"):
        submit(c, name=name, account="acme" if name == "gated" else "default")
    waiting_at_gate(reg, "gated")
    broke = held(reg, "broke")
    reg.finish(broke["id"], broke["generation"], "STOPPED:stall_limit", "the client exited (code 1)")
    held(reg, "busy")
    submit(c, name="waits", account="acme")
    reg.worker_beat("w-1", "alpha", 2, 1, None, [])
    reg.worker_beat("w-2", "beta", 1, 0, None, [])
    with reg.backend.tx() as tx:
        tx.run("UPDATE fleet_workers SET beat_at = beat_at - 120 WHERE worker = 'w-2'")
    reg.pause_account("acme", reg.limits_report()["now"] + 3600, "usage limit (429)", "w-1")
    fleet = c.get("/api/fleet").json()
    assert fleet["attention"] == {"gates": 1, "failed": 1, "stuck": 1, "workers": 1}
    assert fleet["failed"] == 1 and fleet["queue"]["ended"] == 1
    loops = {r["name"]: r for r in fleet["loops"]}
    assert [r["name"] for r in fleet["loops"]] == ["gated", "busy", "broke", "waits"]  # most pressing first
    assert (
        loops["broke"]["failed"]
        and loops["broke"]["cause"] == "STOPPED:stall_limit: the client exited (code 1)"
    )
    assert loops["waits"]["stuck"].startswith("account acme is paused until")
    assert not loops["busy"]["failed"] and loops["busy"]["stuck"] is None
    states = {w["worker"]: (w["state"], w["holds"]) for w in fleet["workers"]}
    assert states == {"w-1": ("alive", ["busy"]), "w-2": ("stale", [])}


def test_the_stuck_count_and_its_reasons_cover_the_queue_past_the_loops_listed(monitor, monkeypatch):
    """The page lists a few hundred loops; the strip's stuck count and reasons are the whole
    queue's, grouped by what decides them (account and tags)."""
    monkeypatch.setattr(fleetwatch, "MAX_LOOPS", 3)
    c, reg = client(monitor), monitor.registry
    reg.worker_beat("w-1", "alpha", 4, 0, None, [])
    for i in range(5):
        assert submit(c, name=f"paused-{i}", account="acme").status_code == 201
    for i in range(2):
        assert submit(c, name=f"capped-{i}", tags=["nightly"]).status_code == 201
    assert submit(c, name="free").status_code == 201
    reg.pause_account("acme", reg.limits_report()["now"] + 3600, "usage limit (429)", "w-1")
    reg.set_limits("tag:nightly", max_running=0)
    fleet = c.get("/api/fleet").json()
    assert len(fleet["loops"]) == 3 and fleet["queue"]["queued"] == 8
    assert fleet["attention"]["stuck"] == 7
    (paused, n1), (capped, n2) = fleet["stuck_why"]
    assert (n1, n2) == (5, 2)
    assert paused.startswith("account acme is paused until") and "usage limit (429)" in paused
    assert capped == "tag nightly's cap of 0 running loops is reached"


def test_loops_no_live_worker_accepts_are_stuck_with_the_option_that_would_take_them(monitor, monkeypatch):
    """Queued before the workers changed what they take: a repository or a verify no live
    worker accepts is a stuck loop on the page, counted over the whole queue (the verify read
    from each spec's text, whatever else its goal says)."""
    monkeypatch.setattr(fleetwatch, "MAX_LOOPS", 2)
    c, reg = client(monitor), monitor.registry
    quoted = 'pytest -q "a b"'
    specs = {
        "elsewhere-0": ("https://example.com/other/x.git", {"goal": "g"}),
        "elsewhere-1": ("https://example.com/other/x.git", {"goal": 'say ,"verify":"make test"'}),
        "rm-0": (REPO_URL, {"verify": "rm -rf /", "goal": "g"}),
        "rm-1": (REPO_URL, {"goal": "g\n", "verify": "rm -rf /"}),
        "quoted": (REPO_URL, {"goal": 'a "verify": "make test" b', "verify": quoted}),
        "allowed": (REPO_URL, {"goal": "g", "verify": "make test"}),
        "plain": (REPO_URL, {"goal": '{"verify":"rm"}'}),
    }
    for name, (repo, spec) in specs.items():
        reg.submit(kind="prompt", spec=spec, repo=repo, name=name)
    reg.worker_beat(
        "w-1", "alpha", 4, 0, None, [], allow_repo=["https://example.com/acme/*"], allow_verify=["make test"]
    )
    fleet = c.get("/api/fleet").json()
    assert fleet["attention"]["stuck"] == 5 and len(fleet["loops"]) == 2
    why = dict((reason, n) for reason, n in fleet["stuck_why"])
    lead = "no live worker accepts it: its "
    assert why == {
        lead + "repository (start a worker with --allow-repo https://example.com/other/x)": 2,
        lead + "verify (start a worker with --allow-verify 'rm -rf /')": 2,
        lead + "verify (start a worker with --allow-verify 'pytest -q \"a b\"')": 1,
    }
    listed = {r["name"]: r["stuck"] for r in fleet["loops"]}
    assert listed == {
        "elsewhere-0": lead + "repository (start a worker with --allow-repo https://example.com/other/x)",
        "elsewhere-1": lead + "repository (start a worker with --allow-repo https://example.com/other/x)",
    }


def test_the_list_reads_a_bounded_head_of_a_huge_goal_written_by_sql(monitor):
    c, reg = client(monitor), monitor.registry
    assert submit(c, goal="short", name="huge").status_code == 201
    text = '{"limits": {"max_iterations": 4}, "goal": "the first line\\n' + "z" * 10_000_000 + '"}'
    with reg.backend.tx() as tx:  # written by SQL: no submit lets a goal this big in
        tx.run("UPDATE fleet_loops SET spec = %s WHERE name = 'huge'", (text,))
    listed = c.get("/api/fleet")
    assert listed.status_code == 200 and len(listed.content) < 20_000
    shown = listed.json()["loops"][0]
    assert (shown["goal"], shown["goal_more"], shown["limits"]) == (
        "the first line",
        True,
        {"max_iterations": 4},
    )
    assert len(c.get("/api/fleet/huge").json()["loop"]["goal"]) > 10_000_000  # in full on demand
