"""End-to-end tests of task mode (``/loopwright:task auto``) through the real
Claude Code CLI.

Each test prepares a real git project with ``loopwright lifecycle init demo``
and a filled-in ``.target.md``, types ``/loopwright:task auto demo`` into the
pinned Claude Code CLI running offline against the scripted Messages API
(``tests/fakeapi.py``), and plays the agent: every turn performs exactly the one
step the prompt names, through the Bash tool and the real ``loopwright
lifecycle …`` / ``loopwright signal …`` commands, then ends the turn. The Stop
hook reads ``.index.md`` and ``.auto-signal`` and hands over the next step.

The scripted agent reads the step and "auto iteration N" from the prompt it was
given (callable replies), so the signal carries the right ``--iteration`` and the
test can check the order of the steps the router asked for.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Callable

import pytest

import fakeapi  # noqa: E402  (the same module object conftest uses)
from conftest import REPO, lw_env  # noqa: E402
from e2e_support import conv, feedback_prompts, is_block, read_jsonl, stop_answers  # noqa: E402

pytestmark = pytest.mark.e2e

MODULE = "demo"
LOOP = "task"
STEP_RE = re.compile(r"Step for this turn: (.+?) on TASK/demo \(auto iteration (\d+)\)\.")
FLOW_COMMIT = re.compile(r"^-- ai-cli-task\(demo\):(init|plan|check|exec|feat|merge|report) ")
INITIAL = "initial commit"
TARGET_COMMIT = "describe the widget task"
NOT_SENT = "MUST NOT BE SENT"


# --------------------------------------------------------------------------
# project helpers
# --------------------------------------------------------------------------


def git(project: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(project), *args], capture_output=True, text=True, check=check, timeout=60
    )


def loopwright(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), *args],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )


def setup_task(project: Path, *, fill_target: bool = True) -> None:
    """main with one commit, then `lifecycle init demo` (task/demo, draft) and a real target."""
    git(project, "config", "user.name", "Test User")
    git(project, "config", "user.email", "test@example.com")
    git(project, "checkout", "-q", "-b", "main")
    (project / "README.md").write_text("# widget project\n")
    git(project, "add", "README.md")
    git(project, "commit", "-q", "-m", INITIAL)
    out = loopwright(project, "lifecycle", "init", MODULE)
    assert out.returncode == 0, out.stderr
    assert git(project, "branch", "--show-current").stdout.strip() == "task/demo"
    if fill_target:
        with open(project / "TASK" / MODULE / ".target.md", "a", encoding="utf-8") as fh:
            fh.write(
                "\nAdd a module `widget.py` with a function `make_widget()`"
                ' that returns the string "widget".\n'
                "It must be importable from the project root and covered by a one-line smoke check.\n"
            )
        git(project, "commit", "-q", "-am", TARGET_COMMIT)


def index_meta(path: Path) -> dict:
    """The YAML-ish frontmatter of an .index.md as a flat dict of strings."""
    text = path.read_text(encoding="utf-8")
    front = text.split("---", 2)[1]
    meta = {}
    for line in front.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            meta[k.strip()] = v.strip().strip('"')
    return meta


def task_status(project: Path) -> dict:
    out = loopwright(project, "lifecycle", "status", MODULE, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def loop_dir(project: Path, name: str = LOOP) -> Path:
    return project / ".loopwright" / "loops" / name


def loop_json(project: Path, name: str = LOOP) -> dict:
    return json.loads((loop_dir(project, name) / "loop.json").read_text())


def history(project: Path) -> list[dict]:
    return read_jsonl(loop_dir(project) / "history.jsonl")


def journal(project: Path) -> list[dict]:
    return read_jsonl(loop_dir(project) / "journal.jsonl")


def subjects(project: Path, *rev: str) -> list[str]:
    return git(project, "log", "--format=%s", *rev).stdout.splitlines()


# --------------------------------------------------------------------------
# stream / request helpers (same conventions as test_e2e_loop.py)
# --------------------------------------------------------------------------


def request_text(req: fakeapi.Request) -> str:
    """Every text of the request's user and system messages (the command's expansion,
    the UserPromptSubmit hook's additionalContext, Stop hook feedback, tool results)."""
    parts = []
    for message in req.body.get("messages") or []:
        if message.get("role") not in ("user", "system"):
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
            continue
        for block in content or []:
            if isinstance(block, dict):
                parts.append(fakeapi._block_text(block))
    return "\n".join(parts)


def ok(res) -> None:
    assert res.returncode == 0, res.describe()
    assert not res.server.exhausted_requests, "the CLI asked for more turns than scripted\n" + res.describe()


# --------------------------------------------------------------------------
# the scripted agent
# --------------------------------------------------------------------------


class Agent:
    """Builds script items for one step per turn: a Bash call built from the
    iteration the prompt names, then a short text that ends the turn."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []  # (step text, iteration) the agent saw, per turn
        self.snapshots: dict[int, dict] = {}

    def step(
        self,
        build: Callable[[int], str],
        *,
        done: str = "Step recorded.",
        before: Callable[[int], None] | None = None,
    ):
        def first(req: fakeapi.Request):
            found = STEP_RE.findall(request_text(req))
            if not found:
                self.asked.append(("<no step in prompt>", -1))
                return fakeapi.text("I could not find a step to perform.")
            what, n = found[-1][0], int(found[-1][1])
            self.asked.append((what, n))
            if before is not None:
                before(n)
            return fakeapi.bash(build(n), text=f"Performing: {what}.")

        return [first, fakeapi.text(done)]


LW = "loopwright"


def plan_cmd(n: int) -> str:
    return (
        "printf '# Plan: widget\\n\\n1. Add widget.py with make_widget().\\n2. Smoke-check it.\\n'"
        " > TASK/demo/plan.md"
        f" && {LW} lifecycle plan demo"
        f" && {LW} signal demo --step plan --result '(generated)' --next check --checkpoint post-plan"
        f" --iteration {n}"
    )


def check_cmd(checkpoint: str, result: str, nxt: str, signal_checkpoint: str = "") -> Callable[[int], str]:
    def build(n: int) -> str:
        cp = f" --checkpoint {signal_checkpoint}" if signal_checkpoint else ""
        return (
            f"{LW} lifecycle check demo --checkpoint {checkpoint} --result {result}"
            f" && {LW} signal demo --step check --result {result} --next '{nxt}'{cp} --iteration {n}"
        )

    return build


def exec_cmd(kind: str, message: str, content: str, result: str = "(done)") -> Callable[[int], str]:
    nxt_cp = "post-exec" if result == "(done)" else "mid-exec"

    def build(n: int) -> str:
        return (
            f"{LW} lifecycle exec demo"
            f" && printf '{content}' > widget.py"
            f" && {LW} lifecycle commit demo --type {kind} -m '{message}'"
            f" && {LW} lifecycle exec demo --result '{result}'"
            f" && {LW} signal demo --step exec --result '{result}' --next check --checkpoint {nxt_cp}"
            f" --iteration {n}"
        )

    return build


def merge_cmd(n: int) -> str:
    return (
        f"{LW} lifecycle merge demo && {LW} signal demo --step merge --result success --next report"
        f" --iteration {n}"
    )


def report_cmd(n: int) -> str:
    return (
        f"{LW} lifecycle report demo && {LW} signal demo --step report --result '(generated)'"
        f" --next '(stop)' --iteration {n}"
    )


WIDGET_V1 = 'def make_widget():\\n    return \\"widget\\"\\n'
WIDGET_V2 = 'def make_widget() -> str:\\n    return \\"widget\\"\\n'
WIDGET_V3 = '\\"\\"\\"Widgets.\\"\\"\\"\\n\\n\\ndef make_widget() -> str:\\n    return \\"widget\\"\\n'


def expected_prompt(what: str, n: int) -> str:
    return f"Step for this turn: {what} on TASK/demo (auto iteration {n})."


def assert_flow_commits(project: Path, rev: str, allowed: re.Pattern = FLOW_COMMIT) -> list[str]:
    subs = subjects(project, rev)
    flow = [s for s in subs if s not in (INITIAL, TARGET_COMMIT)]
    assert len(flow) == len(subs) - 2, subs
    bad = [s for s in flow if not allowed.match(s)]
    assert not bad, f"commits outside the convention: {bad}\nall: {subs}"
    return flow


# --------------------------------------------------------------------------
# 1. happy path: plan → check PASS → exec → check ACCEPT → merge → report
# --------------------------------------------------------------------------


def test_auto_happy_path_to_complete(claude, project):
    setup_task(project)
    agent = Agent()
    script = (
        agent.step(plan_cmd, done="Plan written.")
        + agent.step(check_cmd("post-plan", "PASS", "exec"), done="The plan passes.")
        + agent.step(exec_cmd("feat", "add widget", WIDGET_V1), done="Widget implemented.")
        + agent.step(check_cmd("post-exec", "ACCEPT", "merge"), done="Accepted.")
        + agent.step(merge_cmd, done="Merged into main.")
        + agent.step(report_cmd, done="Report written; the task is complete.")
        + [fakeapi.text(NOT_SENT)]
    )
    res = claude.run(f"/loopwright:task auto {MODULE}", script)
    ok(res)

    # the real client made one tool request and one closing request per step
    assert len(conv(res)) == 12, res.describe()
    assert res.server.remaining == 1
    first = request_text(conv(res)[0])
    assert 'auto loop "task" started for TASK/demo (status draft)' in first, first
    assert "up to 20 iterations and 30 minutes" in first
    assert expected_prompt("plan", 1) in first

    # the steps the agent was asked for, in order, each with its iteration
    steps = [
        ("plan", 1),
        ("check --checkpoint post-plan", 2),
        ("exec", 3),
        ("check --checkpoint post-exec", 4),
        ("merge", 5),
        ("report", 6),
    ]
    assert agent.asked == steps
    # the Stop hook blocked five times and then let the session end
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True] * 5 + [False], answers
    prompts = feedback_prompts(res)
    assert len(prompts) == 5
    for (what, n), prompt, answer in zip(steps[1:], prompts, answers):
        assert expected_prompt(what, n) in prompt, prompt
        assert answer["reason"] in prompt
        assert "Correction:" not in prompt
    assert "ended: LOOP_DONE" in answers[-1]["systemMessage"], answers[-1]
    assert not [b for b in res.tool_results if b.get("is_error")], res.tool_results

    # loop state
    cfg = loop_json(project)
    assert (cfg["mode"], cfg["status"], cfg["outcome"]) == ("task", "ended", "LOOP_DONE")
    st = claude.loops()[LOOP]
    assert (st["status"], st["outcome"], st["iteration"]) == ("ended", "LOOP_DONE", 6)
    hist = history(project)
    assert [h["iteration"] for h in hist] == [1, 2, 3, 4, 5, 6]
    assert [h["outcome"] for h in hist] == ["continued"] * 5 + ["LOOP_DONE"]
    assert hist[-1]["stop_conditions_fired"] == ["task_lifecycle"]
    assert not (project / ".loopwright" / "active" / LOOP).exists()

    # the task on disk, on main
    assert git(project, "branch", "--show-current").stdout.strip() == "main"
    meta = index_meta(project / "TASK" / MODULE / ".index.md")
    assert (meta["status"], meta["phase"]) == ("complete", "")
    assert "complete" in (project / "TASK" / ".index.md").read_text()
    assert task_status(project)["status"] == "complete"
    assert git(project, "show", "main:TASK/demo/.index.md").stdout.count("status: complete") == 1
    assert git(project, "rev-parse", "--verify", "-q", "refs/heads/task/demo", check=False).returncode != 0
    assert "task/demo" not in git(project, "branch", "--list").stdout
    main_log = subjects(project, "main")
    assert "-- ai-cli-task(demo):feat add widget" in main_log
    assert (project / "widget.py").read_text() == 'def make_widget():\n    return "widget"\n'
    assert git(project, "show", "main:widget.py").returncode == 0
    flow = assert_flow_commits(project, "main")
    kinds = [FLOW_COMMIT.match(s).group(1) for s in reversed(flow)]
    assert kinds == ["init", "plan", "check", "exec", "feat", "exec", "check", "merge", "merge", "report"], (
        flow
    )
    assert not git(project, "status", "--porcelain").stdout.strip()

    assert not (project / "TASK" / MODULE / ".auto-signal").exists()
    assert not (project / "TASK" / MODULE / ".auto-stop").exists()
    report = project / "TASK" / MODULE / ".report.md"
    assert report.exists()
    text = report.read_text()
    assert "**Status**: complete" in text and "add widget" in text


# --------------------------------------------------------------------------
# 2. REPLAN mid-exec and NEEDS_FIX post-exec, still ends complete
# --------------------------------------------------------------------------


def test_auto_replan_and_needs_fix_still_complete(claude, project):
    setup_task(project)
    agent = Agent()

    def snapshot(n: int) -> None:
        agent.snapshots[n] = index_meta(project / "TASK" / MODULE / ".index.md")

    script = (
        agent.step(plan_cmd)  # 1
        + agent.step(check_cmd("post-plan", "PASS", "exec"))  # 2
        + agent.step(exec_cmd("feat", "add widget", WIDGET_V1, result="(mid-exec)"))  # 3
        + agent.step(check_cmd("mid-exec", "REPLAN", "plan"))  # 4
        + agent.step(plan_cmd, before=snapshot)  # 5
        + agent.step(check_cmd("post-plan", "PASS", "exec"), before=snapshot)  # 6
        + agent.step(exec_cmd("feat", "type the widget", WIDGET_V2))  # 7
        + agent.step(check_cmd("post-exec", "NEEDS_FIX", "exec", signal_checkpoint="post-exec"))  # 8
        + agent.step(exec_cmd("fix", "document the widget", WIDGET_V3), before=snapshot)  # 9
        + agent.step(check_cmd("post-exec", "ACCEPT", "merge"))  # 10
        + agent.step(merge_cmd)  # 11
        + agent.step(report_cmd)  # 12
        + [fakeapi.text(NOT_SENT)]
    )
    res = claude.run(f"/loopwright:task auto {MODULE}", script, timeout=240)
    ok(res)
    assert len(conv(res)) == 24, res.describe()
    assert res.server.remaining == 1

    expected = [
        "plan",
        "check --checkpoint post-plan",
        "exec",
        "check --checkpoint mid-exec",  # exec (mid-exec) → check mid-exec
        "plan",  # REPLAN → plan
        "check --checkpoint post-plan",  # plan → check post-plan
        "exec",  # PASS → exec
        "check --checkpoint post-exec",  # exec (done) → check post-exec
        "exec, fixing what check --checkpoint post-exec found",  # NEEDS_FIX → exec
        "check --checkpoint post-exec",  # exec (done) → check post-exec again
        "merge",  # ACCEPT → merge
        "report",  # success → report
    ]
    assert agent.asked == [(what, i) for i, what in enumerate(expected, 1)], agent.asked
    prompts = feedback_prompts(res)
    assert len(prompts) == len(expected) - 1
    for i, (what, prompt) in enumerate(zip(expected[1:], prompts), 2):
        assert expected_prompt(what, i) in prompt, (i, prompt)
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True] * 11 + [False], answers
    assert "ended: LOOP_DONE" in answers[-1]["systemMessage"]

    # REPLAN left re-planning / needs-plan; the new plan asked for a check; the fix ran while executing
    assert (agent.snapshots[5]["status"], agent.snapshots[5]["phase"]) == ("re-planning", "needs-plan")
    assert (agent.snapshots[6]["status"], agent.snapshots[6]["phase"]) == ("re-planning", "needs-check")
    assert (agent.snapshots[9]["status"], agent.snapshots[9]["phase"]) == ("executing", "")

    # the journal records one task.step decision per iteration, in the routing table's order
    steps = [j for j in journal(project) if j["event"] == "task.step"]
    assert [j["decision"] for j in steps] == [
        "check",
        "exec",
        "check",
        "plan",
        "check",
        "exec",
        "check",
        "exec",
        "check",
        "merge",
        "report",
        "LOOP_DONE",
    ], steps
    assert [j["iteration"] for j in steps] == list(range(1, 13))
    assert "REPLAN" in steps[3]["reason"] and "NEEDS_FIX" in steps[7]["reason"]
    hist = history(project)
    assert [h["outcome"] for h in hist] == ["continued"] * 11 + ["LOOP_DONE"]
    assert (loop_json(project)["outcome"], claude.loops()[LOOP]["iteration"]) == ("LOOP_DONE", 12)

    # the task's own log saw the same transitions
    log = json.loads((project / "TASK" / MODULE / ".lifecycle.json").read_text())["history"]
    assert [(e["command"], e.get("result")) for e in log if e["command"].startswith("check")] == [
        ("check post-plan", "PASS"),
        ("check mid-exec", "REPLAN"),
        ("check post-plan", "PASS"),
        ("check post-exec", "NEEDS_FIX"),
        ("check post-exec", "ACCEPT"),
    ]

    # complete on main, branch gone, all three code commits reachable, conventions kept
    assert git(project, "branch", "--show-current").stdout.strip() == "main"
    assert index_meta(project / "TASK" / MODULE / ".index.md")["status"] == "complete"
    assert "task/demo" not in git(project, "branch", "--list").stdout
    main_log = subjects(project, "main")
    for s in (
        "-- ai-cli-task(demo):feat add widget",
        "-- ai-cli-task(demo):feat type the widget",
        "-- ai-cli-task(demo):fix document the widget",
        "-- ai-cli-task(demo):check mid-exec REPLAN → re-planning",
    ):
        assert s in main_log, main_log
    assert_flow_commits(
        project, "main", re.compile(r"^-- ai-cli-task\(demo\):(init|plan|check|exec|feat|fix|merge|report) ")
    )
    assert (project / "widget.py").read_text().startswith('"""Widgets."""')
    assert not (project / "TASK" / MODULE / ".auto-signal").exists()
    assert (project / "TASK" / MODULE / ".report.md").exists()


# --------------------------------------------------------------------------
# 3. .auto-stop ends the loop between steps
# --------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["agent", "user"])
def test_auto_stop_ends_loop_between_steps(claude, project, who):
    setup_task(project)
    agent = Agent()
    script = agent.step(plan_cmd)
    if who == "agent":
        # the agent runs the stop command itself after the plan step
        script = [
            script[0],
            fakeapi.bash(f"{LW} lifecycle stop {MODULE}", text="Stopping auto as asked."),
            script[1],
        ]
    else:
        # the user runs it from another terminal while the turn is still going
        def user_stops(req):
            out = loopwright(project, "lifecycle", "stop", MODULE)
            return fakeapi.text("Plan written." if out.returncode == 0 else f"stop failed: {out.stderr}")

        script = [script[0], user_stops]
    script += [fakeapi.text(NOT_SENT), fakeapi.text(NOT_SENT)]
    res = claude.run(f"/loopwright:task auto {MODULE}", script)
    ok(res)

    assert agent.asked == [("plan", 1)]
    assert len(conv(res)) == (3 if who == "agent" else 2), res.describe()
    assert res.server.remaining == 2  # no further step was handed over
    assert feedback_prompts(res) == []
    answers = stop_answers(res)
    assert len(answers) == 1 and not is_block(answers[0]), answers
    assert "STOPPED:user_stop" in answers[0]["systemMessage"], answers[0]
    assert res.result_text != NOT_SENT and "stop failed" not in (res.result_text or "")

    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "STOPPED:user_stop")
    assert claude.loops()[LOOP]["outcome"] == "STOPPED:user_stop"
    assert [h["outcome"] for h in history(project)] == ["STOPPED:user_stop"]
    st = task_status(project)
    assert (st["status"], st["phase"]) == ("planning", "")
    assert st["auto_signal"] is None and st["auto_stop"] is False
    assert not (project / "TASK" / MODULE / ".auto-stop").exists()
    assert not (project / "TASK" / MODULE / ".auto-signal").exists()
    assert git(project, "branch", "--show-current").stdout.strip() == "task/demo"
    assert_flow_commits(project, "task/demo")


# --------------------------------------------------------------------------
# extras: a missing signal, refusals before any model turn
# --------------------------------------------------------------------------


def test_missing_signal_gets_corrections_then_stops(claude, project):
    setup_task(project)
    res = claude.run(
        f"/loopwright:task auto {MODULE}",
        [
            fakeapi.text("I thought about the plan."),
            fakeapi.text("Still thinking."),
            fakeapi.text("Thinking more."),
            fakeapi.text(NOT_SENT),
        ],
    )
    ok(res)
    assert len(conv(res)) == 3, res.describe()
    assert res.server.remaining == 1
    prompts = feedback_prompts(res)
    assert len(prompts) == 2
    for n, prompt in ((2, prompts[0]), (3, prompts[1])):
        assert "Correction: no .auto-signal was written" in prompt, prompt
        assert expected_prompt("plan", n) in prompt  # the same step again
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, True, False], answers
    assert "STOPPED:no-signal" in answers[-1]["systemMessage"]
    assert "reminder 1 of 2" in answers[0]["reason"] or "reminder 1 of 2" in str(journal(project))
    assert loop_json(project)["outcome"] == "STOPPED:no-signal"
    assert [j["decision"] for j in journal(project) if j["event"] == "task.step"] == [
        "plan",
        "plan",
        "STOPPED:no-signal",
    ]
    assert task_status(project)["status"] == "draft"


def _prompt_submit_answers(res) -> list[dict]:
    return [
        json.loads(e["stdout"])
        for e in res.hook_events("UserPromptSubmit", "hook_response")
        if (e.get("stdout") or "").strip()
    ]


@pytest.mark.parametrize(
    "args, problem",
    [
        ("../evil", "invalid module name '../evil'"),
        ("TASK/../../evil", "invalid module name"),
        ("nosuch", "no task module TASK/nosuch"),
        ("link", "TASK/link resolves outside TASK/"),
    ],
)
def test_bad_module_is_refused_before_any_turn(claude, project, tmp_path, args, problem):
    setup_task(project)
    if args == "link":  # a module directory that is a symlink to a look-alike outside TASK/
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / ".index.md").write_text((project / "TASK" / MODULE / ".index.md").read_text())
        (outside / ".target.md").write_text("Objective: escape.\n")
        (project / "TASK" / "link").symlink_to(outside, target_is_directory=True)
    res = claude.run(f"/loopwright:task auto {args}", [fakeapi.text(NOT_SENT)])
    assert conv(res) == [], res.describe()
    answers = _prompt_submit_answers(res)
    assert len(answers) == 1 and answers[0]["decision"] == "block", res.describe()
    assert problem in answers[0]["reason"], answers[0]
    assert claude.loops() == {}
    assert not (tmp_path / "evil").exists() and not (project / "evil").exists()
    assert not (project / "TASK" / MODULE / ".auto-signal").exists()
    if args == "link":
        assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == [".index.md", ".target.md"]


def test_template_only_target_is_refused(claude, project):
    setup_task(project, fill_target=False)
    res = claude.run(f"/loopwright:task auto {MODULE}", [fakeapi.text(NOT_SENT)])
    assert conv(res) == [], res.describe()
    answers = _prompt_submit_answers(res)
    assert len(answers) == 1 and answers[0]["decision"] == "block"
    assert "fill .target.md first" in answers[0]["reason"]
    assert claude.loops() == {}
    assert task_status(project)["status"] == "draft"


def test_restart_after_stop_enters_by_status_and_max_iterations_ends(claude, project):
    """A stopped task resumes by the entry table (planning → check post-plan), and
    --max-iterations ends the new loop after that one step, cleaning up the signal."""
    setup_task(project)
    first = Agent()
    script = first.step(plan_cmd) + [fakeapi.text(NOT_SENT)]
    script.insert(1, fakeapi.bash(f"{LW} lifecycle stop {MODULE}", text="Stopping here."))
    res = claude.run(f"/loopwright:task auto {MODULE}", script)
    ok(res)
    assert loop_json(project)["outcome"] == "STOPPED:user_stop"
    assert task_status(project)["status"] == "planning"

    again = Agent()
    res2 = claude.run(
        f"/loopwright:task auto {MODULE} --max-iterations 1 --no-wrap-up",
        again.step(check_cmd("post-plan", "PASS", "exec")) + [fakeapi.text(NOT_SENT)],
    )
    ok(res2)
    assert again.asked == [("check --checkpoint post-plan", 1)]
    # the ended loop keeps its name and record; the new one gets the next free name
    assert (
        'auto loop "task-2" started for TASK/demo (status planning): up to 1 iteration and'
        in request_text(conv(res2)[0])
    )
    assert len(conv(res2)) == 2 and res2.server.remaining == 1, res2.describe()
    answers = stop_answers(res2)
    assert len(answers) == 1 and not is_block(answers[0]), answers
    assert "MAX_ITERATIONS" in answers[0]["systemMessage"]
    cfg = loop_json(project, "task-2")
    assert (cfg["status"], cfg["outcome"], cfg["max_iterations"]) == ("ended", "MAX_ITERATIONS", 1)
    assert loop_json(project)["outcome"] == "STOPPED:user_stop"
    assert sorted(claude.loops()) == ["task", "task-2"]
    st = task_status(project)
    assert st["status"] == "review"
    assert st["auto_signal"] is None and not st["auto_stop"]


def test_stop_command_from_a_resumed_session_and_no_second_loop(claude, project):
    """A paused auto loop is still active: another session cannot start a second one
    for the same module, and `/loopwright:task auto demo --stop` typed in the owning
    session ends it at the next Stop."""
    setup_task(project)
    sid_a, sid_b = str(uuid.uuid4()), str(uuid.uuid4())
    cap = {"CLAUDE_CODE_STOP_HOOK_BLOCK_CAP": "1"}
    res = claude.run(
        f"/loopwright:task auto {MODULE}",
        [fakeapi.text("Reading."), fakeapi.text("Still reading.")],
        session_id=sid_a,
        env=cap,
    )
    ok(res)
    assert [is_block(a) for a in stop_answers(res)] == [True, False]
    before = claude.loops()[LOOP]
    assert (before["status"], before["paused"], before["owner_session"]) == ("active", True, sid_a)

    res_b = claude.run(f"/loopwright:task auto {MODULE}", [fakeapi.text(NOT_SENT)], session_id=sid_b)
    assert conv(res_b) == [], res_b.describe()
    refusals = _prompt_submit_answers(res_b)
    assert len(refusals) == 1 and refusals[0]["decision"] == "block"
    assert "already runs in auto loop task" in refusals[0]["reason"]

    res_a = claude.run(
        f"/loopwright:task auto {MODULE} --stop",
        [fakeapi.text("Auto mode will stop."), fakeapi.text(NOT_SENT)],
        extra_args=["--resume", sid_a],
        env=cap,
    )
    ok(res_a)
    assert len(conv(res_a)) == 1, res_a.describe()
    assert "stop requested for the auto loop of TASK/demo" in request_text(conv(res_a)[0])
    answers = stop_answers(res_a)
    assert len(answers) == 1 and not is_block(answers[0]), answers
    assert "STOPPED:user_stop" in answers[0]["systemMessage"]
    assert loop_json(project)["outcome"] == "STOPPED:user_stop"
    assert not (project / "TASK" / MODULE / ".auto-stop").exists()
    assert task_status(project)["status"] == "draft"


# --------------------------------------------------------------------------
# merge that does not go through: the loop stops, the task stays executing
# --------------------------------------------------------------------------


def _accepted_with_cli(project: Path, *, conflict: bool) -> None:
    """Bring TASK/demo to executing with the work committed, by hand (no model turns)."""
    (project / "TASK" / MODULE / "plan.md").write_text("# Plan: widget\n\n1. Add widget.py.\n")
    for args in (
        ("plan", MODULE),
        ("check", MODULE, "--checkpoint", "post-plan", "--result", "PASS"),
        ("exec", MODULE),
    ):
        out = loopwright(project, "lifecycle", *args)
        assert out.returncode == 0, out.stderr
    (project / "widget.py").write_text('def make_widget():\n    return "widget"\n')
    if conflict:
        (project / "README.md").write_text("# widget project (task side)\n")
    for args in (
        ("commit", MODULE, "--type", "feat", "-m", "add widget"),
        ("exec", MODULE, "--result", "(done)"),
    ):
        out = loopwright(project, "lifecycle", *args)
        assert out.returncode == 0, out.stderr
    if conflict:  # meanwhile main moved on the same line
        git(project, "checkout", "-q", "main")
        (project / "README.md").write_text("# widget project (main side)\n")
        git(project, "commit", "-q", "-am", "main: retitle the readme")
        git(project, "checkout", "-q", "task/demo")


@pytest.mark.parametrize("how", ["conflict", "verify-fails"])
def test_merge_that_fails_stops_loop_and_task_stays_executing(claude, project, how):
    setup_task(project)
    _accepted_with_cli(project, conflict=(how == "conflict"))
    verify = " --verify false" if how == "verify-fails" else ""
    agent = Agent()
    script = (
        agent.step(check_cmd("post-exec", "ACCEPT", "merge"))
        + agent.step(
            lambda n: (
                f"{LW} lifecycle merge demo{verify}; "
                f"{LW} signal demo --step merge --result conflict --next '(stop)' --iteration {n}"
            ),
            done="The merge did not go through; stopping.",
        )
        + [fakeapi.text(NOT_SENT)]
    )
    res = claude.run(f"/loopwright:task auto {MODULE}", script)
    ok(res)
    # entry table: executing → check post-exec; ACCEPT → merge
    assert agent.asked == [("check --checkpoint post-exec", 1), ("merge", 2)]
    assert len(conv(res)) == 4 and res.server.remaining == 1, res.describe()
    merge_output = str(res.tool_results[-1]["content"])
    assert "merge conflict" in merge_output, merge_output
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, False], answers
    # The seed: merge | conflict | (stop), the task stays executing (retryable).
    # verify-fails currently ends STOPPED:task-unreadable: `lifecycle merge --verify`
    # undoes the merge but leaves the checkout on main, where TASK/demo does not exist,
    # so the agent's `loopwright signal` fails and so does any retry (see modes/task/ops/merge.py).
    outcome = loop_json(project)["outcome"]
    assert outcome == "STOPPED:merge-conflict", (outcome, merge_output)
    # the agent could record the outcome of the merge step
    assert "signal written" in merge_output, merge_output
    # the task stays executing and a later merge can be retried
    st = task_status(project)
    assert st["status"] == "executing" and "merge" in st["allowed_commands"]
    assert st["auto_signal"] is None


# --------------------------------------------------------------------------
# the headless runner drives a task-mode loop from its command line
# --------------------------------------------------------------------------


def test_loopwright_run_drives_task_auto_to_complete(project, tmp_path):
    import sys

    import claude_cli
    from conftest import KEY_HOME

    setup_task(project)
    agent = Agent()
    script = (
        agent.step(plan_cmd, done="Plan written.")
        + agent.step(check_cmd("post-plan", "PASS", "exec"), done="The plan passes.")
        + agent.step(exec_cmd("feat", "add widget", WIDGET_V1), done="Widget implemented.")
        + agent.step(check_cmd("post-exec", "ACCEPT", "merge"), done="Accepted.")
        + agent.step(merge_cmd, done="Merged into main.")
        + agent.step(report_cmd, done="Report written; the task is complete.")
    )
    env = {"LOOPWRIGHT_PYTHON": sys.executable, "XDG_CONFIG_HOME": KEY_HOME}
    with fakeapi.ScriptedServer(script) as server:
        out = subprocess.run(
            [
                str(REPO / "bin" / "loopwright"),
                "-C",
                str(project),
                "run",
                f"/loopwright:task auto {MODULE}",
                "--claude",
                claude_cli.claude_binary(),
                "--claude-arg=--dangerously-skip-permissions",
                "--json",
            ],
            env=claude_cli.offline_env(server.url, tmp_path / "home", env),
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert out.returncode == 0, out.stderr + out.stdout
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert events[0]["event"] == "started" and events[0]["loop"] == LOOP
    assert events[-1]["event"] == "ended" and events[-1]["outcome"] == "LOOP_DONE", events
    assert [n for _, n in agent.asked] == [1, 2, 3, 4, 5, 6]
    assert task_status(project)["status"] == "complete"
