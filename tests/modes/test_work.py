"""Work mode: the backlog rules (pure), the mode's step, and its shell over the task
registry through the real Stop hook and CLI (GitHub backlogs run in tests/e2e)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import cli, hook_stop
from loopwright.core import gates
from loopwright.core.modeapi import Tick
from loopwright.events import slash
from loopwright.modes.work import backlog, mode, source


def item(n, body="## Acceptance Criteria\n- works\n", deps=(), busy=None, blocks=()):
    return {
        "id": f"#{n}",
        "title": f"issue {n}",
        "body": body,
        "depends_on": list(deps),
        "blocks": [f"#{b}" for b in blocks],
        "in_progress": busy,
        "url": None,
    }


# --- backlog rules ---------------------------------------------------------------------------------


def test_issue_links_read_depends_blocked_by_and_blocks_lines():
    body = "Text\nDepends on: #3, #4\n- Blocked by #9\nBlocks: #12 and #13\n"
    assert backlog.issue_links(body) == (["#3", "#4", "#9"], ["#12", "#13"])


def test_closing_keywords_name_the_issues_a_pr_closes():
    assert backlog.closes("Fixes #4, closes #5 and resolved: #6; mentions #7") == ["#4", "#5", "#6"]


def test_a_two_issue_cycle_is_found_through_blocks_lines_and_named_like_the_seed():
    items = [item(50, blocks=[51]), item(51, blocks=[50])]
    found = backlog.cycle(items)
    assert backlog.describe_cycle(found) == "#50 ↔ #51"
    assert backlog.cycle([item(1, deps=["#2"]), item(2)]) is None


def test_split_skips_items_in_progress_waiting_or_skipped_and_keeps_number_order():
    items = [item(5), item(2, busy="assigned to bob"), item(3, deps=["#5"]), item(4), item(1)]
    workable, passed = backlog.split(items, skipped=["#4"])
    assert [i["id"] for i in workable] == ["#1", "#5"]
    assert passed == [
        ("#2", "in progress (assigned to bob)"),
        ("#3", "waits for #5"),
        ("#4", "skipped at a gate in this loop"),
    ]


def test_a_dependency_on_a_closed_issue_does_not_block():
    workable, _ = backlog.split([item(3, deps=["#1"])], [])
    assert [i["id"] for i in workable] == ["#3"]


def test_github_links_hold_an_item_outside_the_backlog_and_unlisted_ones_by_count():
    items = [
        item(1),
        dict(item(2), open_deps=["#9", "o/r#4"]),  # open on GitHub, neither in this backlog
        dict(item(3), unread_deps=2),
        dict(item(4, deps=["#1"]), unread_deps=1),
    ]
    workable, passed = backlog.split(items, [])
    assert [i["id"] for i in workable] == ["#1"]
    linked = "open issue{} linked on GitHub (blocked-by or sub-issues)"
    assert passed == [
        ("#2", "waits for o/r#4, #9"),
        ("#3", "waits for 2 " + linked.format("s")),
        ("#4", "waits for #1, 1 " + linked.format("")),
    ]


@pytest.mark.parametrize(
    "body, why",
    [
        ("Make it faster.", "it has no Acceptance Criteria section"),
        ("### Acceptance Criteria\n\n## Notes\nx", "its Acceptance Criteria section is empty"),
        ("## Acceptance criteria\n- TBD\n", "its Acceptance Criteria section says TBD/TODO"),
        ("## Acceptance Criteria\n- p95 under 20 ms\n## Notes\nTODO later", None),
    ],
)
def test_ambiguous_criteria_for_issues(body, why):
    assert backlog.ambiguous({"body": body}, needs_section=True) == why


def test_a_task_is_its_own_criteria_unless_marked_tbd():
    assert backlog.ambiguous({"body": "write the parser"}, needs_section=False) is None
    assert backlog.ambiguous({"body": "parser: TODO decide"}, needs_section=False)


def test_drift_ignores_what_the_loop_itself_took():
    assert backlog.drift(None, ["#1"], []) == ([], [])
    assert backlog.drift(["#1", "#2"], ["#2", "#9"], handled=["#1"]) == (["#9"], [])
    assert backlog.drift(["#1", "#2"], ["#1"], handled=[]) == ([], ["#2"])


@given(st.lists(st.integers(1, 30), unique=True), st.data())
def test_pick_returns_a_workable_item_and_keeps_the_one_in_hand(numbers, data):
    workable = [item(n) for n in sorted(numbers)]
    current = data.draw(st.sampled_from([None, "#99"] + [i["id"] for i in workable]))
    chosen = backlog.pick(workable, current, None)
    if not workable:
        assert chosen is None
    elif current in {i["id"] for i in workable}:
        assert chosen["id"] == current
    else:
        assert chosen["id"] == workable[0]["id"]


# --- the mode's step -------------------------------------------------------------------------------


def run(state, view, answers=(), policy="ask", iteration=2):
    return mode.MODE.step(
        state, view, Tick(iteration, "2027-01-01T00:00:00Z", answers=answers, gate_policy=policy)
    )


def test_the_first_turn_is_not_an_iteration_and_an_empty_backlog_ends_the_loop():
    step = run({"turn": "survey"}, source.View(items=[]), iteration=1)
    assert (step.outcome, step.counted, step.fired) == ("BACKLOG_EMPTY", False, ["backlog_empty"])
    assert step.reason == "Backlog empty — 0 iterations used"


def test_a_cycle_stops_before_the_backlog_looks_empty():
    step = run({"turn": "work"}, source.View(items=[item(50, blocks=[51]), item(51, blocks=[50])]))
    assert step.outcome == "DEPENDENCY_CYCLE"
    assert step.reason == "Dependency cycle detected: #50 ↔ #51 — please resolve manually"


def test_an_ambiguous_pick_asks_first_and_skip_moves_on():
    view = source.View(items=[item(1, body="vague"), item(2)])
    asked = run({"turn": "survey"}, view)
    assert [g["name"] for g in asked.gates] == [gates.AMBIGUOUS_CRITERIA]
    assert asked.gates[0]["question"] == (
        "Issue #1 has ambiguous criteria. Skip, escalate, or proceed with my best interpretation?"
    )
    assert asked.handover == {"turn": "gate"}
    answered = run(
        dict(asked.state, turn="gate"), view, answers=[{"name": gates.AMBIGUOUS_CRITERIA, "answer": "skip"}]
    )
    assert answered.counted is False and answered.handover["item"]["id"] == "#2"


def test_escalate_skips_the_item_and_asks_the_agent_to_escalate_it_next_turn():
    view = source.View(items=[item(1, body="vague"), item(2)])
    asked = run({"turn": "survey"}, view)
    answered = run(
        dict(asked.state, turn="gate"),
        view,
        answers=[{"name": gates.AMBIGUOUS_CRITERIA, "answer": "escalate"}],
    )
    assert answered.handover["escalate_now"] == ["#1"] and answered.handover["item"]["id"] == "#2"


def test_the_continue_policy_proceeds_and_the_gate_is_still_recorded():
    step = run({"turn": "survey"}, source.View(items=[item(1, body="vague")]), policy="continue")
    assert step.handover["item"]["id"] == "#1"
    assert [g["name"] for g in step.gates] == [
        gates.AMBIGUOUS_CRITERIA
    ]  # the engine records the policy answer


def test_drift_asks_and_continue_keeps_the_old_order():
    first = run({"turn": "survey"}, source.View(items=[item(3), item(4)]))
    assert first.handover["item"]["id"] == "#3"
    st_ = dict(first.state, **first.handover)
    moved = source.View(items=[item(1), item(3, busy="open pull request #7"), item(4)])
    drift = run(st_, moved)
    assert [g["name"] for g in drift.gates] == [gates.BACKLOG_DRIFT]
    answered = run(
        dict(drift.state, turn="gate"), moved, answers=[{"name": gates.BACKLOG_DRIFT, "answer": "continue"}]
    )
    assert answered.handover["item"]["id"] == "#4"  # the order proposed before: #1 is new
    again = run(
        dict(drift.state, turn="gate"), moved, answers=[{"name": gates.BACKLOG_DRIFT, "answer": "re-propose"}]
    )
    assert again.handover["item"]["id"] == "#1"


def test_a_backlog_that_cannot_be_read_twice_ends_the_loop():
    once = run({"turn": "work"}, source.View(problem="gh api failed: boom"))
    assert once.outcome is None and once.handover == {"turn": "survey"}
    twice = run(once.state, source.View(problem="gh api failed: boom"))
    assert twice.outcome == "EXTERNAL_UNREACHABLE"


def test_the_loops_own_prs_are_counted_and_tracked_from_github():
    view = source.View(
        items=[item(2)],
        prs=[{"number": 7, "branch": "loopwright/work/issue-1", "head_sha": "ab", "state": "open"}],
    )
    step = run({"turn": "work"}, view)
    assert step.report["prs"] == ["#7"]
    assert step.report["tracked_prs"][0]["head_sha_at_iteration_end"] == "ab"


# --- the shell over the task registry -----------------------------------------------------------


def start(project, args="--loop"):
    raw = json.dumps({"prompt": f"/loopwright:work {args}", "session_id": "S1", "cwd": str(project)})
    return slash.handle(raw.encode())


def test_without_loop_the_command_names_one_item_and_writes_nothing(project, state):
    cli(project, "task", "add", "write the parser")
    answer = start(project, "")
    text = answer["hookSpecificOutput"]["additionalContext"]
    assert "one pass over the task registry" in text and "Work item for this iteration: task-1" in text
    assert not (state / "loops").exists()


def test_github_filters_without_the_github_source_are_refused(project, state):
    answer = start(project, "--loop --label bug")
    assert answer["decision"] == "block" and "add --source github" in answer["reason"]


def test_a_missing_gh_is_one_line_and_no_loop(project, state, monkeypatch):
    monkeypatch.setenv("LOOPWRIGHT_GH", "/nonexistent/gh")
    answer = start(project, "--loop --source github --repo acme/widgets")
    assert answer["reason"].startswith("loopwright: error: the GitHub CLI `/nonexistent/gh` is not installed")
    assert not (state / "loops").exists()


def test_the_agents_task_commands_reach_the_project_backlog_inside_the_loop(project, state):
    cli(project, "task", "add", "write the parser")
    start(project)
    first = hook_stop(project, "S1", "ok")
    assert "Work item for this iteration: task-1" in first["reason"]
    done = cli(project, "task", "complete", "task-1", env={"CLAUDE_CODE_SESSION_ID": "S1"})
    assert done.returncode == 0, done.stderr
    end = hook_stop(project, "S1", "done")
    assert "BACKLOG_EMPTY" in end["systemMessage"]
    status = json.loads(cli(project, "status", "--json").stdout)["loops"][0]
    assert status["outcome"] == "BACKLOG_EMPTY" and status["work"]["source"] == "tasks"


def test_a_remote_on_an_unknown_host_is_refused_unless_named(project, monkeypatch):
    from loopwright.modes import gh

    monkeypatch.delenv("GH_HOST", raising=False)
    import subprocess

    subprocess.run(
        ["git", "-C", str(project), "remote", "add", "origin", "git@evil.example:o/r.git"], check=True
    )
    with pytest.raises(gh.GhError, match="points at evil.example, which is not github.com"):
        gh.resolve_repo(str(project), None)
    assert gh.resolve_repo(str(project), "evil.example/o/r").host == "evil.example"
    monkeypatch.setenv("GH_HOST", "evil.example")
    assert gh.resolve_repo(str(project), None).slug == "o/r"


@pytest.mark.parametrize("bad", ["o/r/../x", "o", "a b/c", "o/r;rm"])
def test_a_bad_repository_name_is_refused(bad):
    from loopwright.modes import gh

    with pytest.raises(gh.GhError):
        gh.resolve_repo("/nowhere", bad)


def test_run_turns_a_mode_and_its_options_into_its_command(monkeypatch):
    from loopwright.cli import run as run_cli

    text = run_cli._mode_command(("work", "--source", "github", "--label", "a b"), {"max_iterations": 3})
    assert text == "/loopwright:work --loop --source github --label 'a b' --max-iterations 3"
    assert run_cli._mode_command(("fix", "the", "tests"), {"max_iterations": None}) is None
    with pytest.raises(SystemExit):
        run_cli._mode_command(("fix", "--oops"), {})
    # A flag travels as a bare option, and lands in the start request the slash command builds.
    flagged = run_cli._mode_command(("work",), {"accept_project_rates": True, "max_iterations": None})
    assert flagged == "/loopwright:work --loop --accept-project-rates"
    from loopwright.actions import start
    from loopwright.core import slashargs
    from loopwright.modes.work import slash as work_slash

    _, opts = slashargs.parse(flagged.split(" ", 1)[1], work_slash.OPTIONS)
    req = start.StartRequest(prompt="x")
    start.apply_limits(req, opts)
    assert req.accept_project_rates is True


def test_skip_at_the_repeated_failure_gate_leaves_the_item_out():
    view = source.View(items=[item(1), item(2)])
    answers = [{"name": gates.REPEATED_FAILURE, "answer": "skip", "item": "1"}]
    step = run({"turn": "work", "current": "#1"}, view, answers=answers)
    assert step.handover["item"]["id"] == "#2" and "#1" in step.state["skipped"]


def test_route_explain_says_the_first_turn_is_not_an_iteration(project, state):
    cli(project, "task", "add", "write the parser")
    start(project, "--loop --max-iterations 2")
    out = cli(project, "route", "--explain", env={"CLAUDE_CODE_SESSION_ID": "S1"})
    assert "does not count as an iteration (a wait or a gate); iteration 1 is next (of 2)" in out.stdout
    assert "Work item for this iteration: task-1" in out.stdout


# --- what GitHub sends is data, never instructions to loopwright ------------------------------------

needs_gh = pytest.mark.skipif(
    __import__("shutil").which("gh") is None or __import__("shutil").which("openssl") is None,
    reason="needs gh",
)


@pytest.fixture
def github(tmp_path, project, state, monkeypatch, request):
    """The fake GitHub, as github.com (``param`` False: a server without sub-issues and dependencies)."""
    import subprocess

    import fakegithub

    with fakegithub.FakeGitHub(tmp_path / "gh", dependencies=getattr(request, "param", True)) as fake:
        for k, v in fake.env().items():
            monkeypatch.setenv(k, v)
        subprocess.run(["git", "-C", str(project), "remote", "add", "origin", fake.remote], check=True)
        yield fake


@needs_gh
def test_hostile_issue_text_reaches_the_agent_bounded_and_without_escape_sequences(project, github):
    github.add_issue("\x1b[2J\x1b]0;pwned\x07Render", "## Acceptance Criteria\n- ok\n" + "A" * 50_000)
    start(project, "--loop --source github")
    answer = hook_stop(project, "S1", "ok")
    reason = answer["reason"]
    # gh itself shows control characters in caret notation (^[); loopwright's own escaping
    # of hook answers covers anything that gets past it.
    assert "\x1b" not in reason and "\x07" not in reason and "pwned" in reason
    assert "more characters)" in reason and len(reason) < 12_000


@needs_gh
def test_filter_values_cannot_change_the_query(project, github):
    github.add_issue("Render", "## Acceptance Criteria\n- ok\n", labels=["bug"])
    start(project, "--loop --source github --label 'bug&state=closed'")
    end = hook_stop(project, "S1", "ok")
    assert "BACKLOG_EMPTY" in end["systemMessage"]  # one label that no issue has: nothing matched
    listed = [path for method, path in github.requests if "/issues?" in path]
    assert listed and all("labels=bug%26state%3Dclosed" in p and p.count("state=") == 1 for p in listed)


@needs_gh
def test_a_garbled_github_answer_is_a_problem_line_not_a_crash(project, github, monkeypatch):
    github.add_issue("Render", "## Acceptance Criteria\n- ok\n")
    start(project, "--loop --source github")
    bindir = project.parent / "garbled-bin"
    bindir.mkdir()
    (bindir / "gh").write_text("#!/bin/sh\necho '{not json'\n")
    (bindir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")  # the hook finds this gh
    first = hook_stop(project, "S1", "ok")
    assert "the backlog could not be read (gh api gave an answer that is not JSON)" in first["reason"]
    second = hook_stop(project, "S1", "ok")
    assert "EXTERNAL_UNREACHABLE" in second["systemMessage"]


# --- GitHub backlogs of several pages, and GitHub's own dependencies --------------------------------

CRITERIA = "## Acceptance Criteria\n- it works\n"


def counting_gh(directory, monkeypatch):
    """The real gh behind a script that logs each call: the hook's gh calls, counted."""
    import shutil

    real, log = shutil.which("gh"), directory / "gh-calls.log"
    bindir = directory / "counting-bin"
    bindir.mkdir()
    (bindir / "gh").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    (bindir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
    log.touch()
    return log


def work_loop(project, github) -> dict:
    return {
        "name": "work",
        "project_dir": str(project),
        "work": {
            "source": "github",
            "repo": {"host": github.host, "slug": github.repo.slug},
            "login": "loop-bot",
        },
    }


@needs_gh
def test_a_backlog_of_several_pages_is_read_whole_in_two_gh_calls(project, github, tmp_path, monkeypatch):
    # 250 issues, then 130 pull requests (#251, the oldest, is on the last page of the pulls listing):
    # 380 entries in the issue listing, four pages of 100, newest first.
    for n in range(1, 251):
        github.add_issue(f"issue {n}", CRITERIA)
    github.open_pull("Fix the third", "carol/three", "Fixes #3")
    for n in range(252, 381):
        github.open_pull(f"pr {n}", f"carol/{n}", "Closes #240" if n == 380 else "")
    for n, who in ((1, "alice"), (120, "bob")):
        github.repo.issues[n]["assignees"] = [{"login": who}]
    for n in (2, 200):
        github.repo.issues[n]["labels"] = [{"name": "in-progress"}]
    calls = counting_gh(tmp_path, monkeypatch)
    view = source.read(work_loop(project, github))
    assert view.problem is None and len(view.items) == 250
    busy = {i["id"]: i["in_progress"] for i in view.items if i["in_progress"]}
    assert busy == {
        "#1": "assigned to alice",  # the last page of the issue listing
        "#2": "labelled in-progress",
        "#3": "open pull request #251",  # a claim on the last page of the pull request listing
        "#120": "assigned to bob",
        "#200": "labelled in-progress",
        "#240": "open pull request #380",
    }
    assert len(calls.read_text().splitlines()) == 2  # one gh call each for issues and pulls, however long
    listed = [path for _, path in github.requests]
    issue_pages = [p for p in listed if "/issues?" in p]
    assert len(issue_pages) == 4 and {"page=2", "page=3", "page=4"} <= {
        q for p in issue_pages for q in p.split("&")
    }
    assert len([p for p in listed if "/pulls?" in p]) == 2
    workable, _ = backlog.split(view.items, [])
    assert workable[0]["id"] == "#4"


@needs_gh
def test_github_blockers_and_sub_issues_hold_issues_until_they_close(project, github):
    render = github.add_issue("Render", CRITERIA)
    epic = github.add_issue("Widgets epic", CRITERIA)
    child = github.add_issue("Draw one widget", CRITERIA)
    done = github.add_issue("Measure widgets", CRITERIA)
    github.block(render, epic)  # Render is blocked by the epic (GitHub's issue dependencies)
    github.add_sub_issue(epic, child)
    github.add_sub_issue(epic, done)
    github.close(done)
    start(project, "--loop --source github")
    first = hook_stop(project, "S1", "ok")["reason"]
    assert f"Work item for this iteration: #{child}" in first
    assert f"not picked: #{render}, waits for #{epic}." in first
    assert f"not picked: #{epic}, waits for #{child}." in first  # the closed sub-issue does not hold it
    github.close(child)
    assert f"Work item for this iteration: #{epic}" in hook_stop(project, "S1", "ok")["reason"]
    github.close(epic)
    assert f"Work item for this iteration: #{render}" in hook_stop(project, "S1", "ok")["reason"]


@needs_gh
def test_a_cycle_of_github_dependencies_stops_the_loop(project, state, github):
    one, two = github.add_issue("One", CRITERIA), github.add_issue("Two", CRITERIA)
    github.block(one, two)
    github.block(two, one)
    start(project, "--loop --source github")
    assert "DEPENDENCY_CYCLE" in hook_stop(project, "S1", "ok")["systemMessage"]
    report = (state / "loops" / "work" / "report.md").read_text()
    assert f"Dependency cycle detected: #{one} ↔ #{two} — please resolve manually" in report


@needs_gh
def test_an_open_blocker_outside_the_label_filter_still_holds_the_issue(project, github):
    held = github.add_issue("Render", CRITERIA, labels=["bug"])
    blocker = github.add_issue("Refactor the canvas", CRITERIA)  # not a bug: outside the backlog
    free = github.add_issue("Crash on resize", CRITERIA, labels=["bug"])
    github.block(held, blocker)
    start(project, "--loop --source github --label bug")
    reason = hook_stop(project, "S1", "ok")["reason"]
    assert f"Work item for this iteration: #{free}" in reason
    assert f"not picked: #{held}, waits for #{blocker}." in reason


@needs_gh
@pytest.mark.parametrize("github", [True, False], ids=["github.com", "no-dependencies"], indirect=True)
def test_body_lines_link_issues_with_or_without_githubs_dependencies(project, github):
    held = github.add_issue("Render", "Depends on: #2\n" + CRITERIA)
    first = github.add_issue("Draw", CRITERIA)
    start(project, "--loop --source github")
    reason = hook_stop(project, "S1", "ok")["reason"]
    assert f"Work item for this iteration: #{first}" in reason
    assert f"not picked: #{held}, waits for #{first}." in reason
    assert not [p for _, p in github.requests if "/sub_issues" in p or "/dependencies/" in p]


@needs_gh
def test_dependency_lists_read_at_one_stop_are_bounded(project, github, tmp_path, monkeypatch):
    held = [github.add_issue(f"held {n}", CRITERIA) for n in range(12)]
    blockers = [github.add_issue(f"blocker {n}", CRITERIA) for n in range(12)]
    for h, b in zip(held, blockers):
        github.block(h, b)
    start(project, "--loop --source github")
    calls = counting_gh(tmp_path, monkeypatch)
    reason = hook_stop(project, "S1", "ok")["reason"]
    assert len(calls.read_text().splitlines()) == 2 + source.DETAIL_CALLS
    read = [p for _, p in github.requests if "/dependencies/blocked_by" in p]
    assert len(read) == source.DETAIL_CALLS == 8
    assert f"Work item for this iteration: #{blockers[0]}" in reason
    for h, b in zip(held[:8], blockers[:8]):  # the lowest numbers are named
        assert f"not picked: #{h}, waits for #{b}." in reason
    for h in held[8:]:  # the rest wait on GitHub's count
        assert (
            f"not picked: #{h}, waits for 1 open issue linked on GitHub (blocked-by or sub-issues)." in reason
        )
