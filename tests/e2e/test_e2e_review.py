"""End-to-end test of review mode (``/loopwright:review --loop --pr N``) through the real
Claude Code CLI and the real ``gh`` CLI against ``tests/fakegithub.py``.

The test plays the humans and CI around the watched pull request (a reviewer asks
for changes, the author pushes) while the scripted agent does what each prompt asks:
a review-response round with real ``gh api`` comments, a bounded
``loopwright review wait``, a gate answer, ``loopwright review merge``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import fakeapi  # noqa: E402
import fakegithub  # noqa: E402
from e2e_support import history, is_block, loop_json, ok, run_headless, stop_answers  # noqa: E402

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("gh") is None or shutil.which("openssl") is None, reason="needs gh, openssl"
    ),
]

API = "gh api repos/acme/widgets"


def git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, timeout=60)


@pytest.fixture
def github(tmp_path: Path, project: Path):
    with fakegithub.FakeGitHub(tmp_path / "gh") as fake:
        git(project, "remote", "add", "origin", fake.remote)
        yield fake


def test_review_loop_defers_reviews_after_a_push_gates_the_merge_and_ends_when_merged(
    project: Path, claude, github
) -> None:
    pr = github.open_pull("Add widgets", "feature/widgets", "Adds the widget module.")
    github.set_checks(pr)

    def round_one(req):
        assert f"one review-response round on PR #{pr}" in req.last_user_text()
        return fakeapi.bash(
            f"{API}/pulls/{pr}/reviews -f event=COMMENT -f body='Please add a test.' --silent"
            f" && {API}/issues/{pr}/comments -f body='Reviewed the whole change.' --silent",
            text="Reviewing.",
        )

    def wait_quietly(req):
        assert "no new commits since iteration 1" in req.last_user_text()
        return fakeapi.bash("loopwright review wait --poll 0.2 --max-wait 1", text="Waiting for the PR.")

    def wait_for_push(req):
        github.review(pr, "CHANGES_REQUESTED", "Rename make() to build().", login="alice")
        github.push(pr, "carol")  # the author pushes while the loop waits
        github.set_checks(pr)
        return fakeapi.bash("loopwright review wait --poll 0.2 --max-wait 30", text="Waiting again.")

    def round_two(req):
        text = req.last_user_text()
        assert "Review the changes since" in text, text[-800:]
        github.push(pr, fakegithub.LOGIN)  # the responder's fix for alice's review
        github.set_checks(pr)
        return fakeapi.bash(
            f"{API}/pulls/{pr}/comments -f body='Renamed as asked.' -F in_reply_to=1 --silent"
            " && loopwright review merge; echo merge-exit=$?",
            text="Responding and trying to merge.",
        )

    script = [
        "Watching the PR.",
        round_one,
        "Round done.",
        wait_quietly,
        "Nothing yet.",
        wait_for_push,
        "The PR moved.",
        round_two,
        "Round done; the merge needs the user.",
        fakeapi.bash("loopwright gate answer post-feedback-merge merge", text="The user said merge."),
        "Recorded.",
        fakeapi.bash("loopwright review merge", text="Merging."),
        "Merged.",
    ]
    res = claude.run(f"/loopwright:review --loop --pr {pr}", script, env=github.env())
    ok(res)
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True] * 6 + [False]
    prompts = [a["reason"] for a in answers[:-1]]
    assert (
        f"PR #{pr}: no new commits since iteration 1 (head_sha_at_iteration_end matches remote HEAD)"
        in prompts[1]
    )
    assert "loopwright review wait" in prompts[2]
    assert (
        f'Gate "post-feedback-merge": Responder addressed human feedback on PR #{pr}. '
        "Merge now or hold for human re-review?" in prompts[4]
    )
    assert f"The user approved the merge of PR #{pr}" in prompts[5]
    assert "PR_TERMINAL" in answers[-1]["systemMessage"]

    assert github.pull(pr)["merged"]
    cfg = loop_json(project, "review")
    assert cfg["outcome"] == "PR_TERMINAL"
    lines = history(project, "review")
    counted = [h["iteration"] for h in lines if h.get("counted", True)]
    assert counted == [1, 2, 3]  # round, round, merge: the waits and the gate turn were not iterations
    last = lines[-1]
    assert last["stop_conditions_fired"] == ["pr_terminal"]
    snap = last["budget_snapshot"]
    assert snap["prs_touched"] == [f"#{pr}"]
    assert snap["comments_pushed"] == 3  # a review with a body, a top-level comment, a reply
    assert snap["merges_attempted"] == 1
    assert last["tracked_prs"][0]["state_at_end"] == "merged"
    recorded = [(g["name"], g["answer"]) for h in lines for g in h["gates"] if g["answer"]]
    assert recorded == [("post-feedback-merge", "merge")]


def test_run_review_headless_waits_without_a_stall_and_merges(project: Path, tmp_path: Path, github) -> None:
    import threading

    pr = github.open_pull("Add widgets", "feature/widgets", "Adds the widget module.")
    github.set_checks(pr)

    def wait_while_the_author_pushes(req):
        def push():
            github.push(pr, "carol")
            github.set_checks(pr)

        # The wait is quiet for twice the stall window (8 polls of 0.5 s: room for a starved
        # `review wait` to start and beat on a busy machine); its heartbeats keep it alive.
        threading.Timer(8.0, push).start()
        return fakeapi.bash("loopwright review wait --poll 0.3 --max-wait 30", text="Waiting.")

    script = [
        "Watching.",
        fakeapi.bash(f"{API}/issues/{pr}/comments -f body='Looks right.' --silent", text="Reviewing."),
        "Round done.",
        wait_while_the_author_pushes,
        "The PR moved.",
        fakeapi.bash("loopwright review merge", text="Ready: merging."),
        "Merged.",
    ]
    home = tmp_path / "home"
    home.mkdir()
    with fakeapi.ScriptedServer(script) as server:
        out, events = run_headless(
            project, home, server, "--stall-polls", "8", "review", "--pr", str(pr), env=github.env()
        )
    assert out.returncode == 0, out.stderr + out.stdout
    assert "stall" not in [e["event"] for e in events], events
    assert events[-1]["outcome"] == "PR_TERMINAL" and github.pull(pr)["merged"]
    assert [h["iteration"] for h in history(project, "review") if h.get("counted", True)] == [1, 2]
