"""End-to-end tests of work mode (``/loopwright:work --loop``) through the real Claude
Code CLI and, for GitHub backlogs, the real ``gh`` CLI against ``tests/fakegithub.py``.

The scripted agent reads the item loopwright handed it from the Stop hook's prompt
and does the work through the real Bash tool: a worktree and a commit, then
``loopwright task complete`` (task registry) or a pull request opened with ``gh api``
(GitHub), then ``loopwright report``. Gates are answered with the real
``loopwright gate answer`` as the user would have told the agent.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import fakeapi  # noqa: E402
import fakegithub  # noqa: E402
from e2e_support import history, is_block, loop_json, loopwright, ok, run_headless, stop_answers  # noqa: E402

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("gh") is None or shutil.which("openssl") is None, reason="needs gh, openssl"
    ),
]

ITEM_RE = re.compile(r"Work item for this iteration: (#\d+|task-\d+)")
BRANCH_RE = re.compile(r"-b (loopwright/\S+?)`")
PATH_RE = re.compile(r"git worktree add (\S+) ")


def git(project: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def init_repo(project: Path) -> None:
    git(project, "config", "user.name", "Test User")
    git(project, "config", "user.email", "test@example.com")
    git(project, "checkout", "-q", "-b", "main")
    (project / "README.md").write_text("# widgets\n")
    git(project, "add", "README.md")
    git(project, "commit", "-q", "-m", "initial commit")


class Agent:
    """Plays the agent of a work loop: one item per turn, as the prompt's contract says."""

    def __init__(self, project: Path, github: bool):
        self.project, self.github = project, github
        self.items: list[str] = []  # the items loopwright handed over, in order

    def work(self, req: fakeapi.Request):
        text = req.last_user_text()
        found = ITEM_RE.findall(text)
        assert found, "no work item in the prompt:\n" + text[-1500:]
        item, branch, path = found[-1], BRANCH_RE.findall(text)[-1], PATH_RE.findall(text)[-1]
        self.items.append(item)
        slug = item.lstrip("#")
        cmd = f"git worktree add {path} -b {branch} && cd {path} && echo '{slug}' > item-{slug}.txt"
        cmd += f" && git add . && git commit -qm 'work on {item}' && cd - >/dev/null"
        if self.github:
            cmd += (
                f" && PR=$(gh api repos/acme/widgets/pulls -f title='Fix {item}' -f head={branch}"
                f" -f base=main -f body='Closes {item}' --jq .number)"
                f" && loopwright report --outcome success --item '{item}' --pr $PR"
            )
        else:
            cmd += f" && loopwright task complete {item} && loopwright report --outcome success --item {item}"
        return fakeapi.bash(cmd, text=f"Working on {item}.")

    def turn(self):
        return [self.work, fakeapi.text("Item done; ending the turn.")]


def answer(gate: str, option: str):
    return [
        fakeapi.bash(f"loopwright gate answer {gate} {option}", text="Recording the user's answer."),
        "Noted.",
    ]


def test_work_loop_over_the_task_registry_ends_backlog_empty(project: Path, claude) -> None:
    init_repo(project)
    assert loopwright(project, "task", "add", "write the parser").returncode == 0
    assert loopwright(project, "task", "add", "document the parser", "--depends-on", "task-1").returncode == 0
    agent = Agent(project, github=False)
    res = claude.run("/loopwright:work --loop", ["Starting the work loop.", *agent.turn(), *agent.turn()])
    ok(res)
    assert agent.items == ["task-1", "task-2"]  # task-2 waited for task-1
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, True, False]
    assert "BACKLOG_EMPTY" in answers[-1]["systemMessage"]
    cfg = loop_json(project, "work")
    assert (cfg["status"], cfg["outcome"]) == ("ended", "BACKLOG_EMPTY")
    lines = history(project, "work")
    assert [(h["iteration"], h.get("counted", True)) for h in lines] == [(0, False), (1, True), (2, True)]
    assert lines[-1]["stop_conditions_fired"] == ["backlog_empty"]
    assert lines[-1]["budget_snapshot"]["iterations_used"] == 2
    worktrees = {w["branch"] for w in lines[-1]["active_worktrees"]}
    assert worktrees == {"loopwright/work/task-1", "loopwright/work/task-2"}
    listed = json.loads(loopwright(project, "task", "list", "--json").stdout)
    assert (listed["open"], sorted(t["id"] for t in listed["done"])) == ([], ["task-1", "task-2"])


@pytest.fixture
def github(tmp_path: Path, project: Path):
    with fakegithub.FakeGitHub(tmp_path / "gh") as fake:
        init_repo(project)
        git(project, "remote", "add", "origin", fake.remote)
        yield fake


CRITERIA = "## Acceptance Criteria\n- the widget renders\n"


def test_work_loop_over_github_skips_work_in_progress_and_stops_on_the_pr_budget(
    project: Path, claude, github
) -> None:
    first = github.add_issue("Render widgets", CRITERIA)
    taken = github.add_issue("Style widgets", CRITERIA, assignees=["alice"])
    labelled = github.add_issue("Theme widgets", CRITERIA, labels=["in-progress"])
    claimed = github.add_issue("Size widgets", CRITERIA)
    github.open_pull("Sizing", "carol/size", f"Fixes #{claimed}")
    second = github.add_issue("Count widgets", CRITERIA)
    github.add_issue("Name widgets", CRITERIA)  # never reached: the PR budget ends the loop first
    agent = Agent(project, github=True)
    res = claude.run(
        "/loopwright:work --loop --source github --max-prs 2 --no-wrap-up",
        ["Starting.", *agent.turn(), *agent.turn()],
        env=github.env(),
    )
    ok(res)
    assert agent.items == [f"#{first}", f"#{second}"]
    prompts = [a["reason"] for a in stop_answers(res) if is_block(a)]
    assert f"not picked: #{taken}, in progress (assigned to alice)" in prompts[0]
    assert f"not picked: #{labelled}, in progress (labelled in-progress)" in prompts[0]
    assert re.search(rf"not picked: #{claimed}, in progress \(open pull request #\d+\)", prompts[0])
    cfg = loop_json(project, "work")
    assert cfg["outcome"] == "BUDGET_EXHAUSTED:prs"
    last = history(project, "work")[-1]
    assert last["stop_conditions_fired"] == ["prs_touched_budget"]
    assert len(last["budget_snapshot"]["prs_touched"]) == 2
    assert {p["branch"] for p in last["tracked_prs"]} == {
        f"loopwright/work/issue-{first}",
        f"loopwright/work/issue-{second}",
    }
    made = [p for p in github.repo.pulls.values() if p["user"]["login"] == fakegithub.LOGIN]
    assert [p["body"] for p in made] == [f"Closes #{first}", f"Closes #{second}"]


def test_backlog_drift_and_ambiguous_criteria_gates_are_asked_and_answered(
    project: Path, claude, github
) -> None:
    first = github.add_issue("Render widgets", CRITERIA)
    vague = github.add_issue("Polish widgets", "## Acceptance Criteria\nTBD\n")
    agent = Agent(project, github=True)
    state = {}

    def work_then_new_issue(req):
        reply = agent.work(req)
        state["new"] = github.add_issue("Urgent: widgets crash", CRITERIA)  # lands while the loop works
        return reply

    script = [
        "Starting.",
        work_then_new_issue,
        "Done with the first item.",
        *answer("backlog-drift", "re-propose"),
        *answer("ambiguous-criteria", "skip"),  # the re-proposed pick, #2, says TBD
        *agent.turn(),  # then the new issue
    ]
    res = claude.run("/loopwright:work --loop --source github", script, env=github.env())
    ok(res)
    prompts = [a["reason"] for a in stop_answers(res) if is_block(a)]
    assert (
        'Gate "backlog-drift": Backlog changed since last iteration. Re-propose the next batch?' in prompts[1]
    )
    assert f"added #{state['new']}" in prompts[1]
    assert (
        f'Gate "ambiguous-criteria": Issue #{vague} has ambiguous criteria. '
        "Skip, escalate, or proceed with my best interpretation?" in prompts[2]
    )
    assert agent.items == [f"#{first}", f"#{state['new']}"]
    cfg = loop_json(project, "work")
    assert cfg["outcome"] == "BACKLOG_EMPTY"  # the vague issue was skipped: nothing is left
    lines = history(project, "work")
    recorded = [(g["name"], g["answer"]) for h in lines for g in h["gates"] if g["answer"]]
    assert recorded == [("backlog-drift", "re-propose"), ("ambiguous-criteria", "skip")]
    assert lines[-1]["budget_snapshot"]["iterations_used"] == 2  # the gate turns were not iterations


def test_work_loop_does_not_start_when_gh_is_not_logged_in(project: Path, claude, github) -> None:
    github.add_issue("Render widgets", CRITERIA)
    res = claude.run(
        "/loopwright:work --loop --source github", ["MUST NOT BE SENT"], env=github.env(logged_in=False)
    )
    assert not res.server.conversation_requests  # the prompt was refused before any model turn
    assert f"loopwright: error: gh is not logged in to {github.host}" in res.stdout
    assert not (project / ".loopwright" / "loops" / "work").exists()


def test_run_work_grinds_the_task_registry_headless(project: Path, tmp_path: Path) -> None:
    init_repo(project)
    assert loopwright(project, "task", "add", "write the parser").returncode == 0
    agent = Agent(project, github=False)
    home = tmp_path / "home"
    home.mkdir()
    with fakeapi.ScriptedServer(["Starting.", *agent.turn()]) as server:
        out, events = run_headless(project, home, server, "work", "--max-iterations", "3")
    assert out.returncode == 0, out.stderr + out.stdout  # an empty backlog is a finished run
    assert events[0]["command"] == "/loopwright:work" and events[-1]["outcome"] == "BACKLOG_EMPTY"
    assert agent.items == ["task-1"]
    assert loop_json(project, "work")["max_iterations"] == 3


def test_work_loop_over_a_backlog_of_several_pages(project: Path, claude, github) -> None:
    # 250 issues and 130 pull requests (#251-#380): the issue listing is four pages of 100 (newest
    # first, so the lowest issues are on the last page) and the pull request listing two.
    for n in range(1, 251):
        github.add_issue(f"Widget task {n}", CRITERIA)
    claims = {251: 3, 300: 6, 380: 240}  # pull request -> the issue it closes, on every pulls page
    for n in range(251, 381):
        github.open_pull(f"Change {n}", f"carol/change-{n}", f"Fixes #{claims[n]}" if n in claims else "")
    for n, who in ((1, "alice"), (5, "bob"), (120, "dave")):
        github.repo.issues[n]["assignees"] = [{"login": who}]
    for n in (2, 200):
        github.repo.issues[n]["labels"] = [{"name": "in-progress"}]
    agent = Agent(project, github=True)
    res = claude.run(
        "/loopwright:work --loop --source github --max-prs 2",
        # The last reply answers the wrap-up turn the spent PR budget earns.
        ["Starting.", *agent.turn(), *agent.turn(), "Handoff written."],
        env=github.env(),
    )
    ok(res)
    assert agent.items == ["#4", "#7"]  # #5 and #6 are taken; #4 is the loop's own by then
    first = [a["reason"] for a in stop_answers(res) if is_block(a)][0]
    for n, why in (
        (1, "assigned to alice"),
        (2, "labelled in-progress"),
        (3, "open pull request #251"),
        (5, "assigned to bob"),
        (6, "open pull request #300"),
        (120, "assigned to dave"),
        (200, "labelled in-progress"),
        (240, "open pull request #380"),
    ):
        assert f"not picked: #{n}, in progress ({why})." in first
    listed = [path for _, path in github.requests if "/issues?" in path]
    assert any(path.endswith("page=4") for path in listed)  # the last page of issues was read
    assert loop_json(project, "work")["outcome"] == "BUDGET_EXHAUSTED:prs"
    made = [p for p in github.repo.pulls.values() if p["user"]["login"] == fakegithub.LOGIN]
    assert [p["body"] for p in made] == ["Closes #4", "Closes #7"]
    # The PR budget, like every budget, ends with one wrap-up turn in work mode's words.
    answers = stop_answers(res)
    assert "WRAP-UP TURN" in answers[-2]["reason"] and "Open no new pull request" in answers[-2]["reason"]
    assert not is_block(answers[-1]) and not res.server.exhausted_requests
