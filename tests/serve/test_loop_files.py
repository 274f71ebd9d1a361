"""What the monitor's page reads of a loop through the API, in process: the history in
bounded slices however long it is, report.md and handoff.md as plain text of trusted loops
only (never through a link, never a path from the request), and starting a run without
naming the project when the monitor serves only one."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from starlette.testclient import TestClient

from conftest import REPO, lw_env
from loopwright.registry import open_registry
from loopwright.serve import app as api
from loopwright.serve import files

TOKEN = "t" * 40


class FakeRuns:
    def __init__(self, reg):
        self.registry, self.started = reg, []

    def start(self, project, what, limits, session=None, task_dir=None):
        row = self.registry.add(session or "S-auto", project, task_dir)
        self.started.append((project, what))
        return self.registry.get(row["id"])


@pytest.fixture
def monitor(tmp_path, project):
    reg = open_registry(str(tmp_path / "runs.sqlite"))
    yield api.Monitor([project], reg, FakeRuns(reg), TOKEN)
    reg.close()


def client(monitor):
    return TestClient(
        api.make_app(monitor), client=("127.0.0.1", 50000), headers={"Authorization": f"Bearer {TOKEN}"}
    )


def start(project, *args, **env):
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), "start", *args],
        env=lw_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr


def loop_dir(project, name="prompt"):
    return project / ".loopwright" / "loops" / name


def line(i: int, pad: int = 0) -> str:
    """A history line as the Stop writes it (the fields the timeline shows, and a snapshot)."""
    snap = {"iterations_used": i, "max_iterations": 20_000, "max_minutes": 600, "minutes_elapsed": i / 10}
    snap.update(tokens_in=i * 10, tokens_out=i, dollars_estimate=i / 100, max_dollars=500.0)
    rec = {"iteration": i, "outcome": "continued", "dollars_this_iter": 0.01, "tokens_in_this_iter": 10}
    rec.update(gates=[], stop_conditions_fired=[], budget_snapshot=snap, ended_at="2026-01-01T00:00:00Z")
    if i % 1000 == 0:
        rec["gates"] = [
            {"name": "budget-escalation", "question": "q", "options": ["continue"], "answer": "continue"}
        ]
    if pad:
        rec["note"] = "x" * pad
    return json.dumps(rec) + "\n"


def test_a_long_history_is_read_in_bounded_slices(monitor, project, monkeypatch):
    start(project, "--session", "S1", "--max-iterations", "20000", "goal")
    history = loop_dir(project) / "history.jsonl"
    with open(history, "w") as fh:
        for i in range(1, 10_001):
            fh.write(line(i, pad=700) if i != 5000 else "{not json\n")  # ~1 KB, as the Stop writes
        fh.write('{"iteration": 10001, "outc')  # a line still being written
    size = history.stat().st_size
    counted = []

    def pread(fd, n, offset):
        data = os.pread(fd, n, offset)
        counted.append(len(data))
        return data

    monkeypatch.setattr(files, "_pread", pread)
    c = client(monitor)
    newest = c.get("/api/loops/prompt/history", params={"limit": 20}).json()
    assert [e["iteration"] for e in newest["entries"]] == list(range(9981, 10001))
    assert newest["size"] == size and newest["end"] == size - len('{"iteration": 10001, "outc')
    assert sum(counted) == newest["bytes_read"] <= files.HISTORY_READ and size > 15 * files.HISTORY_READ
    last = newest["entries"][-1]
    assert last["status_line"].endswith(
        "iteration 10000/20000 · 1000/600 min · 110k tokens · $100.00/$500.00"
    )
    assert last["gates"] == [{"name": "budget-escalation", "answer": "continue"}]

    # Walking back from the end reaches every line once, each request bounded, however many.
    seen, problems, before, requests = [], [], None, 0
    while before != 0:
        requests += 1
        assert requests <= 10_000 // files.MAX_ENTRIES + 2, "the walk back did not end"
        counted.clear()
        params = {"limit": 10_000} if before is None else {"limit": 10_000, "before": before}
        page = c.get("/api/loops/prompt/history", params=params).json()
        assert len(page["entries"]) <= files.MAX_ENTRIES and sum(counted) <= files.HISTORY_READ
        seen = [e["iteration"] for e in page["entries"] if "iteration" in e] + seen
        problems += [e for e in page["entries"] if "problem" in e]
        before = page["before"]
    assert seen == [i for i in range(1, 10_001) if i != 5000]
    assert len(problems) == 1 and "damaged history line" in problems[0]["problem"]
    bad = c.get("/api/loops/prompt/history", params={"before": "-1"})
    assert bad.status_code == 400 and "whole number" in bad.json()["error"]


def test_a_line_longer_than_a_slice_is_stepped_over(monitor, project):
    start(project, "--session", "S1", "goal")
    history = loop_dir(project) / "history.jsonl"
    history.write_text("".join(line(i, pad=files.HISTORY_READ + 1000 if i == 6 else 0) for i in range(1, 11)))
    c = client(monitor)
    found, before = [], None
    for _ in range(5):
        params = {} if before is None else {"before": before}
        page = c.get("/api/loops/prompt/history", params=params).json()
        assert page["bytes_read"] <= files.HISTORY_READ
        found = [e.get("iteration", "skipped") for e in page["entries"]] + found
        before = page["before"]
        if before == 0:
            break
    assert found == [1, 2, 3, 4, 5, "skipped", 7, 8, 9, 10]


def test_report_and_handoff_are_plain_text_of_trusted_loops_only(monitor, project, tmp_path):
    start(project, "--session", "S1", "goal")
    start(
        project, "--session", "S2", "--name", "foreign", "theirs", XDG_CONFIG_HOME=str(tmp_path / "other-key")
    )
    c = client(monitor)
    assert c.get("/api/loops/prompt/report").status_code == 404  # none yet
    handoff = loop_dir(project) / "handoff.md"
    handoff.write_text("## Left\n<script>alert(1)</script>\n")
    res = c.get("/api/loops/prompt/handoff")
    assert res.status_code == 200 and res.text == "## Left\n<script>alert(1)</script>\n"
    assert res.headers["content-type"].startswith("text/plain")
    assert res.headers["x-content-type-options"] == "nosniff"

    (loop_dir(project) / "report.md").write_text("r" * (files.DOC_LIMIT + 10))
    cut = c.get("/api/loops/prompt/report").text
    assert (
        cut.startswith("r" * files.DOC_LIMIT) and "cut at" in cut and "r" * (files.DOC_LIMIT + 1) not in cut
    )

    secret = tmp_path / "secret.txt"
    secret.write_text("not for the page")
    handoff.unlink()
    handoff.symlink_to(secret)  # a link is never followed
    assert c.get("/api/loops/prompt/handoff").status_code == 404

    (loop_dir(project, "foreign") / "handoff.md").write_text("theirs")
    untrusted = c.get("/api/loops/foreign/handoff")
    assert untrusted.status_code == 403 and "not trusted" in untrusted.json()["error"]
    assert c.get("/api/loops/foreign/history").status_code == 403
    assert c.get("/api/loops/nope/report").status_code == 404
    assert c.get("/api/loops/..%2f..%2fsecret/report").status_code == 404
    other = c.get("/api/loops/prompt/report", params={"project": str(tmp_path)})
    assert other.status_code == 403  # only the served projects
    no_token = TestClient(api.make_app(monitor), client=("127.0.0.1", 50000))
    assert no_token.get("/api/loops/prompt/handoff").status_code == 401


def test_a_run_starts_without_naming_the_only_project(monitor, project, tmp_path):
    res = client(monitor).post("/api/loops", json={"goal": "ship"})
    assert res.status_code == 201 and monitor.runs.started == [(str(project), "ship")]
    second = tmp_path / "second"
    second.mkdir()
    two = api.Monitor([project, second], monitor.registry, monitor.runs, TOKEN)
    res = client(two).post("/api/loops", json={"goal": "ship"})
    assert res.status_code == 400 and 'name one with "project"' in res.json()["error"]
    assert str(second) in res.json()["error"] and len(monitor.runs.started) == 1
