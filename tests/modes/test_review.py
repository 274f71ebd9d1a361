"""Review mode: the PR rules (pure), the mode's step, and `loopwright review merge|wait`
against the fake GitHub through the real gh CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fakegithub
from conftest import cli, hook_stop
from loopwright.core import gates
from loopwright.core.modeapi import Tick
from loopwright.events import slash
from loopwright.modes.review import mode, watch
from loopwright.modes.review import pr as prs

T0 = "2027-01-01T00:00:00Z"


def view(head="h2", commits=(("h1", "t1"), ("h2", "t3")), feedback=(), checks=(), state="open", labels=()):
    v = prs.PrView(7)
    v.head, v.branch, v.state, v.labels = head, "feature", state, list(labels)
    v.commits = [{"sha": s, "at": a} for s, a in commits]
    v.feedback = [{"author": a, "at": t, "kind": "review", "approve": ok} for a, t, ok in feedback]
    v.checks = [{"name": "ci", "status": s, "conclusion": c} for s, c in checks]
    return v


# --- the rules -------------------------------------------------------------------------------------


def test_feedback_answered_by_a_later_commit_needs_the_gate():
    v = view(feedback=[("alice", "t2", False)])
    assert prs.human_feedback_addressed(v, since_sha="h1") == ["alice"]


def test_no_new_commit_or_a_later_human_approval_needs_no_gate():
    assert prs.human_feedback_addressed(view(feedback=[("alice", "t2", False)]), since_sha="h2") == []
    approved = view(feedback=[("alice", "t2", False), ("alice", "t4", True)])
    assert prs.human_feedback_addressed(approved, since_sha="h1") == []


def test_feedback_after_the_newest_commit_was_not_addressed_yet():
    assert prs.human_feedback_addressed(view(feedback=[("alice", "t5", False)]), since_sha="h1") == []


@given(
    st.lists(st.tuples(st.sampled_from(["alice", "bob"]), st.sampled_from(["t0", "t2", "t4"]), st.booleans()))
)
def test_the_gate_is_needed_only_for_people_who_commented(feedback):
    who = prs.human_feedback_addressed(view(feedback=feedback), since_sha="h1")
    assert set(who) <= {a for a, _, ok in feedback if not ok}


def test_terminal_states_and_ci():
    assert prs.terminal(view(state="merged"), "do-not-merge") == "merged"
    assert prs.terminal(view(labels=["do-not-merge"]), "do-not-merge") == "labelled do-not-merge"
    assert prs.terminal(view(), "do-not-merge") is None
    assert prs.ci_running(view(checks=[("in_progress", None)])) == ["ci"]
    assert not prs.ci_green(view(checks=[("completed", "failure")]))


# --- the mode's step -------------------------------------------------------------------------------


def step(state, v, waited=None, request=None, answers=(), policy="ask", iteration=2):
    obs = watch.Observation(v, waited, request)
    return mode.MODE.step(state, obs, Tick(iteration, T0, answers=answers, gate_policy=policy))


BASE = {"turn": "round", "hold_label": "do-not-merge", "mine_seen": 0, "failures": 0}


def test_a_merged_pr_ends_the_loop_pr_terminal():
    s = step(BASE, view(state="merged"))
    assert (s.outcome, s.fired) == ("PR_TERMINAL", ["pr_terminal"])
    assert s.reason == "PR #7 reached terminal state: merged"


def test_after_a_round_an_unmoved_pr_is_a_wait_with_the_seeds_note():
    s = step(BASE, view())
    assert s.counted and s.handover["turn"] == "wait"
    assert (
        "PR #7: no new commits since iteration 2 (head_sha_at_iteration_end matches remote HEAD)" in s.notes
    )


def test_a_wait_turn_counts_only_when_the_agent_did_not_wait():
    waiting = dict(BASE, turn="wait", asked_at=T0, last_end_sha="h2", activity_seen=0, last_round=1)
    assert not step(waiting, view(), waited={"at": "2027-01-01T00:05:00Z"}).counted
    assert step(waiting, view(), waited={"at": "2026-12-31T00:00:00Z"}).counted  # an old wait: spinning
    assert step(waiting, view(), waited=None).counted


def test_ci_in_flight_is_a_wait_and_a_push_is_a_round():
    waiting = dict(BASE, turn="wait", asked_at=T0, last_end_sha="h1", activity_seen=0)
    busy = step(waiting, view(checks=[("queued", None)]), waited={"at": T0})
    assert busy.handover["turn"] == "wait" and busy.handover["wait_ci"] is True
    moved = step(waiting, view(checks=[("completed", "success")]), waited={"at": T0})
    assert moved.handover["turn"] == "round" and moved.handover["since"] == "h1"


def test_a_merge_request_fires_the_gate_and_merge_hold_are_heard():
    s = step(dict(BASE, asked_at=T0), view(), request={"sha": "h2", "at": "2027-01-01T00:01:00Z"})
    assert [g["name"] for g in s.gates] == [gates.POST_FEEDBACK_MERGE] and s.handover == {"turn": "gate"}
    gate_state = dict(s.state, turn="gate")
    merge = step(gate_state, view(), answers=[{"name": gates.POST_FEEDBACK_MERGE, "answer": "merge"}])
    assert merge.handover["turn"] == "merge" and not merge.counted
    hold = step(gate_state, view(), answers=[{"name": gates.POST_FEEDBACK_MERGE, "answer": "hold"}])
    assert hold.handover["turn"] == "wait" and "held for a human" in hold.handover["why"]


def test_comments_are_counted_from_github_and_the_pr_is_the_only_one_touched():
    v = view()
    v.mine = 4
    s = step(dict(BASE, mine_seen=1), v)
    assert s.report["comments"] == 3 and s.report["prs"] == ["#7"]
    assert mode.MODE.self_counted == ("prs", "comments") and "prs" not in mode.MODE.counted


# --- the CLI against the fake GitHub -----------------------------------------------------------


needs_gh = pytest.mark.skipif(
    shutil.which("gh") is None or shutil.which("openssl") is None, reason="needs gh"
)


@pytest.fixture
def github(tmp_path, project, state, monkeypatch):
    with fakegithub.FakeGitHub(tmp_path / "gh") as fake:
        for k, v in fake.env().items():
            monkeypatch.setenv(k, v)
        subprocess.run(["git", "-C", str(project), "remote", "add", "origin", fake.remote], check=True)
        yield fake


def _journal(project) -> list[str]:
    """The review loop's journal, to show why a Stop answered as it did."""
    path = project / ".loopwright/loops/review/journal.jsonl"
    env = [f"{k}={v}" for k, v in os.environ.items() if k.startswith(("CLAUDE", "LOOPWRIGHT"))]
    return (path.read_text().splitlines()[-8:] if path.exists() else ["no journal"]) + env


def start(project, args):
    raw = json.dumps({"prompt": f"/loopwright:review {args}", "session_id": "S1", "cwd": str(project)})
    return slash.handle(raw.encode())


@needs_gh
def test_merge_refuses_while_ci_is_red_and_a_merged_pr_cannot_be_watched(project, github):
    pr = github.open_pull("Add", "feature/add")
    github.set_checks(pr, conclusion="failure")
    answer = start(project, f"--loop --pr {pr}")
    context = answer.get("hookSpecificOutput", {}).get("additionalContext", "")
    assert "started (review mode)" in context, answer
    out = cli(project, "review", "merge", env={"CLAUDE_CODE_SESSION_ID": "S1", **github.env()})
    assert out.returncode == 3 and "CI is not green" in out.stderr
    assert not github.pull(pr)["merged"]
    other = github.open_pull("Old", "feature/old")
    github.repo.pulls[other].update(state="closed", merged=True)
    refused = start(project, f"--loop --pr {other} --name second")
    assert f"PR #{other} is already merged" in refused["reason"]


@needs_gh
def test_wait_returns_when_the_pr_moves_and_leaves_its_marker(project, github):
    pr = github.open_pull("Add", "feature/add")
    github.set_checks(pr)
    started = start(project, f"--loop --pr {pr}")
    assert "started (review mode)" in started.get("hookSpecificOutput", {}).get("additionalContext", ""), (
        started
    )
    first = hook_stop(project, "S1", "ok")  # the first turn: a round
    assert first and first.get("decision") == "block", (first, _journal(project))
    github.comment(pr, "looks fine", login="loop-bot")
    after = hook_stop(project, "S1", "round done")
    assert after and "loopwright review wait" in after["reason"], (after, _journal(project))
    github.comment(pr, "one more thing", login="alice")
    env = {"CLAUDE_CODE_SESSION_ID": "S1", **github.env()}
    out = cli(project, "review", "wait", "--max-wait", "20", "--poll", "0.2", env=env)
    assert "new reviews or comments" in out.stdout
    marker = json.loads((project / ".loopwright/loops/review" / watch.WAIT_FILE).read_text())
    assert marker["changed"].startswith("new reviews or comments")
    again = hook_stop(project, "S1", "waited")
    assert "do not submit a new review" in again["reason"]  # new comments only: respond, no new review
    status = json.loads(cli(project, "status", "--json").stdout)["loops"][0]
    assert status["comments_pushed"] == 1 and status["prs_touched"] == [f"#{pr}"]


def test_a_quiet_wait_keeps_the_headless_runner_from_calling_it_a_stall(tmp_path):
    from loopwright.runner import run as runner
    from loopwright.state import loops

    job = runner.Run.__new__(runner.Run)  # only what _busy_moved reads
    job.paths, job._busy_seen = loops.LoopPaths(tmp_path, "review"), None
    job.paths.dir.mkdir(parents=True)
    assert not job._busy_moved()  # no wait has run
    cfg = {"pr": 7, "repo": {"host": "github.com", "slug": "a/b"}, "login": "me"}
    polls = []

    def fake_read(_cfg):
        polls.append(1)
        return view(head="h2") if len(polls) < 3 else view(head="h3")

    import loopwright.modes.review.watch as w

    original, w.read = w.read, fake_read
    try:
        changed, _ = w.wait(
            cfg, {"head": "h2", "activity": 0}, 60, 0.01, busy=job.paths.busy, tick=lambda s: None
        )
    finally:
        w.read = original
    assert changed.startswith("new commits") and len(polls) == 3
    assert job._busy_moved() and not job._busy_moved()  # seen once per rewrite
