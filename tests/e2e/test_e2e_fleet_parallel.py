"""`loopwright submit work --source github --parallel 2` end to end: two work loops over one
backlog of GitHub issues, on two workers as if on two machines (one PostgreSQL), each driving its
loop with the real Claude Code CLI against the scripted Messages API and the real `gh` against
the fake GitHub (tests/fakegithub.py). The fleet's database gives each issue to one loop: every
issue is worked by one loop only, the one the database says holds it, and both loops end
BACKLOG_EMPTY. A worker killed in the middle of an item: its loop goes on on the other worker
with the same item.

One scripted model serves both loops, routed by what each request holds: an item's turn (the
Stop hook's prompt names it) opens the issue's pull request with `gh` and reports it; any other
turn (the first, or a wait for the worker to reserve the next item) is one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
from pathlib import Path

import pytest

import fakeapi
import fakegithub
from fleetkit import lw_here, make_remote, row_of, start_worker, stop_worker, working_in
from loopwright.registry import open_registry
from proctree import kill_tree
from waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("gh") is None or shutil.which("openssl") is None, reason="needs gh, openssl"
    ),
]

WITHIN = 240  # bound on any one wait: generous, the machine may be busy
CRITERIA = "## Acceptance Criteria\n- the widget renders\n"
ITEM_RE = re.compile(r"Work item for this iteration: (#\d+)")
WHERE_RE = re.compile(r"/data-(\w)/work/(grind-\d)\b")  # the client's working directory: the loop's clone


class Agent:
    """The model of both loops. ``hold(machine, loop, first)`` may give an Event that an item's
    reply waits for (``first``: the loop's first item on that machine)."""

    def __init__(self, hold) -> None:
        self.hold = hold
        self.worked: list[tuple[str, str, str]] = []  # (machine, loop, item) in the order handed over
        self.lock = threading.Lock()

    def loops(self) -> set[str]:
        with self.lock:
            return {loop for _, loop, _ in self.worked}

    def __call__(self, request):
        last = (request.body.get("messages") or [{}])[-1]
        content = last.get("content") if isinstance(last.get("content"), list) else []
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return fakeapi.text("Item done; ending the turn.")
        found = ITEM_RE.findall(request.last_user_text())
        if not found:
            return fakeapi.text("Ready.")
        machine, loop = WHERE_RE.findall(json.dumps(request.body))[0]
        with self.lock:
            first = (machine, loop) not in {(m, lo) for m, lo, _ in self.worked}
            self.worked.append((machine, loop, found[-1]))
        wait = self.hold(machine, loop, first)
        reply = self.pull_request(found[-1])
        return fakeapi.hang(WITHIN, then=reply, release=wait) if wait is not None else reply

    @staticmethod
    def pull_request(item: str):
        n = item.lstrip("#")
        cmd = (
            f"PR=$(gh api repos/acme/widgets/pulls -f title='Fix {item}' -f head=fix-{n} -f base=main "
            f"-f body='Closes {item}' --jq .number) "
            f"&& loopwright report --outcome success --item '{item}' --pr $PR"
        )
        return fakeapi.bash(cmd, text=f"Working on {item}.")


@pytest.fixture
def remote(tmp_path) -> Path:
    return make_remote(tmp_path)


@pytest.fixture
def github(tmp_path):
    with fakegithub.FakeGitHub(tmp_path / "gh") as fake:
        yield fake


def submit_parallel(url: str, remote: Path) -> dict[str, dict]:
    out = lw_here("submit", "--db", url, "--repo", f"file://{remote}", "--name", "grind", "--parallel", "2",
             "--max-iterations", "8", "--no-wrap-up", "--json",
             "--", "work", "--source", "github", "--repo", "acme/widgets")  # fmt: skip
    assert out.returncode == 0, out.stderr
    return {r["name"]: r for r in json.loads(out.stdout)}


def worker(url, remote, tmp_path, server, github, tag: str, *extra: str):
    data, home = tmp_path / f"data-{tag}", tmp_path / f"home-{tag}"
    return start_worker(url, remote, data, server, home, "--name", f"worker-{tag}", *extra, env=github.env())


def finished(url: str, name: str, proc) -> dict:
    return wait_for(lambda: (r := row_of(url, name)).get("status") == "ended" and r,
                    f"{name} to end", within=WITHIN, every=0.5, proc=proc)  # fmt: skip


def item_states(url: str, backlog: str) -> list[dict]:
    reg = open_registry(url)
    try:
        return reg.item_states(backlog)
    finally:
        reg.close()


def check_each_issue_worked_by_one_loop(url, rows, agent, github, issues) -> None:
    """As the scripted model was asked, as GitHub saw it, and as the database holds it."""
    by_loop: dict[str, set[str]] = {}
    for _, loop, item in agent.worked:
        by_loop.setdefault(item, set()).add(loop)
    assert sorted(by_loop) == sorted(issues) and all(len(v) == 1 for v in by_loop.values()), agent.worked
    made = sorted((p["body"], p["user"]["login"]) for p in github.repo.pulls.values())
    assert made == sorted((f"Closes {i}", fakegithub.LOGIN) for i in issues)  # one pull request each
    states = item_states(url, next(iter(rows.values()))["spec"]["backlog"])
    assert sorted(s["item"] for s in states) == sorted(issues)
    assert {s["state"] for s in states} == {"done"}
    assert {s["item"]: s["loop_id"] for s in states} == {i: rows[lo.pop()]["id"] for i, lo in by_loop.items()}


def test_two_loops_share_a_github_backlog_and_each_issue_is_worked_once(pg_url, remote, tmp_path, github):
    rows = submit_parallel(pg_url, remote)
    issues = [f"#{github.add_issue(f'Widget {n}', CRITERIA)}" for n in range(1, 5)]
    both = threading.Event()  # each loop's first item waits until both loops have one in hand
    agent = Agent(lambda machine, loop, first: both if first and not both.is_set() else None)
    with fakeapi.ScriptedServer(default=agent) as server:
        workers = [worker(pg_url, remote, tmp_path, server, github, t) for t in "ab"]
        try:
            wait_for(lambda: len(agent.loops()) == 2, "both loops to hold an item", within=WITHIN,
                     every=0.2, proc=workers[0])  # fmt: skip
            both.set()
            ended = {name: finished(pg_url, name, workers[0]) for name in rows}
        finally:
            both.set()
            logs = [stop_worker(w) for w in workers]
        assert not server.exhausted_requests
    assert [r["outcome"] for r in ended.values()] == ["BACKLOG_EMPTY"] * 2, logs
    assert [log.count('"event":"claimed"') for log in logs] == [1, 1]  # one loop on each worker
    check_each_issue_worked_by_one_loop(pg_url, rows, agent, github, issues)


def kill_machine(proc) -> None:
    """SIGKILL a worker and everything under it, as a machine that died: frozen first (SIGSTOP,
    until nothing new appears under it), so that nothing of it says goodbye."""
    kill_tree(proc.pid)
    proc.wait(timeout=60)


def test_a_loop_whose_worker_dies_keeps_its_item_on_the_other_worker(pg_url, remote, tmp_path, github):
    rows = submit_parallel(pg_url, remote)
    issues = [f"#{github.add_issue(f'Widget {n}', CRITERIA)}" for n in range(1, 5)]
    never = threading.Event()  # grind-1's first item on machine a is never answered: a dies in it
    agent = Agent(
        lambda machine, loop, first: never if (machine, loop, first) == ("a", "grind-1", True) else None
    )
    backlog, lost = rows["grind-1"]["spec"]["backlog"], rows["grind-1"]["id"]
    with fakeapi.ScriptedServer(default=agent) as server:
        a = worker(pg_url, remote, tmp_path, server, github, "a")
        workers = [a]
        try:
            wait_for(lambda: row_of(pg_url, "grind-1").get("worker") == "worker-a", "a to claim grind-1",
                     within=WITHIN, every=0.2, proc=a)  # fmt: skip
            workers.append(worker(pg_url, remote, tmp_path, server, github, "b", "--slots", "2"))

            def taken_on_a():  # the item handed over on a, and the database says grind-1 took it
                done = {
                    s["item"]
                    for s in item_states(pg_url, backlog)
                    if (s["loop_id"], s["state"]) == (lost, "done")
                }
                held = [i for m, lo, i in agent.worked if (m, lo) == ("a", "grind-1")]
                return held and held[0] in done and held[0]

            item = wait_for(
                taken_on_a, "grind-1 to take its first item on a", within=WITHIN, every=0.2, proc=a
            )
            kill_machine(a)
            ended = {name: finished(pg_url, name, workers[1]) for name in rows}
        finally:
            never.set()
            for proc in workers:
                stop_worker(proc)
    again = [i for m, lo, i in agent.worked if (m, lo) == ("b", "grind-1")]
    assert again[:1] == [item], agent.worked  # on b, grind-1 went on with the item it held
    failed_over = ended["grind-1"]
    assert (failed_over["outcome"], failed_over["generation"], failed_over["failovers"]) == (
        "BACKLOG_EMPTY",
        2,
        1,
    )
    assert ended["grind-2"]["outcome"] == "BACKLOG_EMPTY"
    check_each_issue_worked_by_one_loop(pg_url, rows, agent, github, issues)


def test_the_item_taken_at_the_last_stop_stays_the_loops_when_its_worker_looks_only_after(
    pg_url, remote, tmp_path, github
):
    """The worker marks what a loop took when it looks between Stops; a loop that takes its last
    item and ends before the worker looks again (a busy machine) still took it: the worker looks
    once more before the loop's row ends, so the item is done, not handed back to the backlog.
    Here the worker is frozen (SIGSTOP) from the item's turn until its runner has gone."""
    rows = submit_parallel(pg_url, remote)
    issue = f"#{github.add_issue('Widget 1', CRITERIA)}"
    frozen: list[int] = []

    def freeze_the_worker(machine, loop, first):
        if not frozen:
            frozen.append(workers[0].pid)
            os.kill(workers[0].pid, signal.SIGSTOP)  # its runner and client go on

    agent = Agent(freeze_the_worker)
    with fakeapi.ScriptedServer(default=agent) as server:
        # A lease no freeze here outlasts: the claim stands when the worker goes on.
        workers = [worker(pg_url, remote, tmp_path, server, github, "a", "--lease", "600")]
        clone = tmp_path / "data-a" / "work" / "grind-1"
        try:
            wait_for(lambda: frozen, "grind-1's item turn", within=WITHIN, every=0.2, proc=workers[0])
            wait_for(lambda: not working_in(clone), "grind-1's runner and client to end", within=WITHIN)
            os.kill(workers[0].pid, signal.SIGCONT)
            ended = finished(pg_url, "grind-1", workers[0])
        finally:
            if frozen:
                os.kill(workers[0].pid, signal.SIGCONT)
            logs = [stop_worker(w) for w in workers]
    assert [i for _, _, i in agent.worked] == [issue] and ended["status"] == "ended", logs
    states = item_states(pg_url, rows["grind-1"]["spec"]["backlog"])
    assert [(s["item"], s["state"], s["loop_id"]) for s in states] == [(issue, "done", rows["grind-1"]["id"])]
