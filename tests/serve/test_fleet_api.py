"""The monitor's fleet API, in process, the same assertions on the embedded SQLite registry and
on a real PostgreSQL: the fleet at a glance, a loop in full, its timeline in slices, submitting
with a "repo" (refused as a worker would refuse it), stop, cancel and gate answers with their
404s and 409s, and the token, sign-in and CSRF rules of the rest of the API."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from loopwright.registry import open_registry
from loopwright.serve import app as api

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
    ]
    for fields, word in bad:
        res = submit(c, **fields)
        assert res.status_code == 400 and word in res.json()["error"], (fields, res.text)
        assert "\n" not in res.json()["error"]
    assert submit(c, name="once").status_code == 201
    assert submit(c, name="once").status_code == 409
    assert c.post("/api/loops", json={"repo": REPO_URL, "goal": "x" * (api.MAX_BODY + 1)}).status_code == 413
    assert [r["name"] for r in monitor.registry.fleet_loops()] == ["once"]


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
