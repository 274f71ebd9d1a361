"""The monitor's REST contract, in process: loopback only, the token, 404 and 409, the
registered projects only, size limits; the registry (the recovery after a restart: test_serve_recovery.py)."""

from __future__ import annotations

import json
import subprocess

import pytest
from starlette.testclient import TestClient

from conftest import REPO, lw_env
from loopwright.registry import open_registry
from loopwright.serve import app as api
from loopwright.serve import runs

TOKEN = "t" * 40


class FakeRuns:
    """Records what the API asked for; rows go into the real registry."""

    def __init__(self, reg):
        self.registry, self.started, self.stopped = reg, [], []

    def start(self, project, what, limits, session=None, task_dir=None):
        row = self.registry.add(session or "S-auto", project, task_dir, **runs._known(limits))
        self.registry.update(row["id"], loop="prompt", status="running")
        self.started.append((project, what, limits, session, task_dir))
        return self.registry.get(row["id"])

    def stop(self, row, paths):
        self.stopped.append((row["id"] if row else None, paths.name))


@pytest.fixture
def monitor(tmp_path, project):
    reg = open_registry(str(tmp_path / "runs.sqlite"))
    (project / "TASK" / "demo").mkdir(parents=True)
    yield api.Monitor([project], reg, FakeRuns(reg), TOKEN)
    reg.close()


def client(monitor, host="127.0.0.1", token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(api.make_app(monitor), client=(host, 50000), headers=headers)


def test_the_token_is_required(monitor):
    assert client(monitor, token=None).get("/api/loops").status_code == 401
    assert client(monitor, token="wrong").get("/api/loops").status_code == 401
    assert client(monitor).get("/api/loops").status_code == 200


def test_only_this_machine_is_answered(monitor):
    res = client(monitor, host="192.168.1.9").get("/api/loops")
    assert res.status_code == 403 and "only on this machine" in res.json()["error"]


def test_loops_of_the_registered_projects(monitor, project):
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), "start", "--session", "S1", "goal"],
        env=lw_env(),
        capture_output=True,
    )
    assert out.returncode == 0
    data = client(monitor).get("/api/loops").json()
    (entry,) = data["projects"]
    assert entry["project"] == str(project) and entry["loops"][0]["owner_session"] == "S1"


def test_starting_a_run_and_a_second_one_in_the_same_session_or_task_is_409(monitor, project):
    c = client(monitor)
    task_dir = str(project / "TASK" / "demo")
    first = c.post("/api/sessions/S9/task-auto", json={"taskDir": task_dir, "maxIterations": 4})
    assert first.status_code == 201 and first.json()["run"]["max_iterations"] == 4
    assert monitor.runs.started[-1][1] == "/loopwright:task auto demo"
    assert c.post("/api/sessions/S9/task-auto", json={"taskDir": task_dir}).status_code == 409
    assert c.post("/api/sessions/OTHER/task-auto", json={"taskDir": task_dir}).status_code == 409
    assert c.get("/api/sessions/S9/task-auto").json()["run"]["session"] == "S9"
    assert c.get("/api/task-auto/lookup", params={"taskDir": task_dir}).json()["run"]["session"] == "S9"
    assert c.delete("/api/sessions/S9/task-auto").status_code == 200
    assert monitor.runs.stopped and c.get("/api/sessions/NOPE/task-auto").status_code == 404


def test_outside_the_registered_projects_is_refused(monitor, tmp_path):
    c = client(monitor)
    elsewhere = tmp_path / "other" / "TASK" / "x"
    elsewhere.mkdir(parents=True)
    assert c.post("/api/sessions/S1/task-auto", json={"taskDir": str(elsewhere)}).status_code == 403
    assert c.post("/api/loops", json={"project": str(tmp_path / "other"), "goal": "g"}).status_code == 403
    assert not monitor.runs.started


def test_bad_bodies(monitor, project):
    c = client(monitor)
    assert c.post("/api/loops", content=b"{", headers={"content-type": "application/json"}).status_code == 400
    assert c.post("/api/loops", json={"project": str(project)}).status_code == 400
    assert (
        c.post("/api/loops", json={"project": str(project), "goal": "g", "maxIterations": -1}).status_code
        == 400
    )
    huge = {"project": str(project), "goal": "x" * (api.MAX_BODY + 1)}
    assert c.post("/api/loops", json=huge).status_code == 413
    assert c.delete("/api/runs/nope").status_code == 404


def test_a_goal_starts_a_run(monitor, project):
    res = client(monitor).post("/api/loops", json={"project": str(project), "goal": "ship", "maxDollars": 3})
    assert res.status_code == 201
    assert monitor.runs.started[-1][1:3] == ("ship", {"max_dollars": 3})


def test_runner_events_fold_into_the_row():
    row = {"stall_count": 1}
    assert runs.fold({"event": "started", "loop": "prompt"}, row) == {"status": "running", "loop": "prompt"}
    assert runs.fold({"event": "stall"}, row) == {"stall_count": 2}
    assert runs.fold({"event": "ended", "outcome": "LOOP_DONE", "reason": "r"}, row)["status"] == "ended"
    assert runs.fold({"event": "quota_wait"}, row)["status"] == "waiting_quota"


def test_the_token_file_is_private(tmp_path, monkeypatch):
    from loopwright.serve import token

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    home = token.data_dir()
    first = token.token(home)
    assert token.token(home) == first and oct((home / "token").stat().st_mode & 0o777) == "0o600"
    (home / "token").chmod(0o644)  # readable by others: replaced, never trusted
    assert token.token(home) != first
    assert json.dumps(first)


def test_the_page_logs_in_once_and_its_calls_need_the_csrf_token(monitor, project):
    c = TestClient(api.make_app(monitor), client=("127.0.0.1", 50000))
    assert c.get("/").status_code == 401
    code = monitor.login_code()
    for _ in range(2):  # a link preview's GET, then the user's: neither uses the code up
        shown = c.get(f"/login?code={code}", follow_redirects=False)
        assert shown.status_code == 200 and "set-cookie" not in shown.headers
        assert 'method="post"' in shown.text and f'value="{code}"' in shown.text
    res = c.post("/login", data={"code": code}, follow_redirects=False)
    assert res.status_code == 303 and "httponly" in res.headers["set-cookie"].lower()
    assert "samesite=strict" in res.headers["set-cookie"].lower()
    page = c.get("/")
    assert page.status_code == 200 and 'name="csrf"' in page.text
    csrf = page.text.split('name="csrf" content="')[1].split('"')[0]
    assert c.get("/api/loops").status_code == 200  # the cookie reads
    body = {"project": str(project), "goal": "g"}
    assert c.post("/api/loops", json=body).status_code == 403  # but changes nothing without the token
    assert c.post("/api/loops", json=body, headers={"X-Loopwright-CSRF": csrf}).status_code == 201
    fresh = TestClient(api.make_app(monitor), client=("127.0.0.1", 50000))
    assert fresh.get(f"/login?code={code}").status_code == 401  # the link is used up
    assert fresh.post("/login", data={"code": code}, follow_redirects=False).status_code == 401
    assert fresh.get("/").status_code == 401


def test_any_active_loop_can_be_stopped(monitor, project):
    c = client(monitor)
    body = {"project": str(project), "loop": "prompt"}
    assert c.post("/api/loops/stop", json={"project": str(project), "loop": "../x"}).status_code == 400
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), "start", "--session", "S1", "goal"],
        env=lw_env(),
        capture_output=True,
    )
    assert out.returncode == 0
    assert c.post("/api/loops/stop", json=body).status_code == 200
    assert monitor.runs.stopped == [(None, "prompt")]
    subprocess.run([str(REPO / "bin" / "loopwright"), "-C", str(project), "cancel", "prompt"], env=lw_env())
    assert c.post("/api/loops/stop", json=body).status_code == 409


def test_progress_that_repeats_changes_nothing():
    event = {"event": "progress", "iteration": 3, "max_iterations": 5}
    first = runs.fold(event, {})
    assert first["iteration"] == 3 and first["last_capture_hash"]
    assert runs.fold(event, first) == {}  # the same capture: no new signal
    assert runs.fold(dict(event, iteration=4), first)["iteration"] == 4


def test_the_spend_chart_reads_only_the_end_of_a_long_history(tmp_path):
    from loopwright.actions import overview

    history = tmp_path / "loops" / "big" / "history.jsonl"
    history.parent.mkdir(parents=True)
    pad = "x" * 2000
    with open(history, "w") as fh:
        for i in range(1, 1001):  # ~2 MB, far more than the tail read
            fh.write(json.dumps({"iteration": i, "dollars_this_iter": i / 100, "note": pad}) + "\n")
    spend = overview.spend_by_iteration(tmp_path, "big")
    assert [s["iteration"] for s in spend] == list(range(951, 1001))
    assert spend[-1]["dollars"] == 10.0
    assert overview.spend_by_iteration(tmp_path, "missing") == []
