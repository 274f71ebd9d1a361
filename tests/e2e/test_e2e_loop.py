"""End-to-end tests of whole loops through the real Claude Code CLI.

Each test types a ``/loopwright:…`` command (or a plain prompt) into the pinned
Claude Code CLI running offline against the scripted Messages API
(``tests/fakeapi.py``), with this repository loaded as a plugin, and then checks
what the real client did: how many conversation requests it made, what the Stop
hook answered (``--include-hook-events``), which next prompt reached the model
("Stop hook feedback"), and what the loop left on disk.

Every CLI run takes about 1-2 s; the whole module stays well under a minute.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

# The same module objects conftest uses (it puts tests/ on sys.path): the
# ``claude`` fixture type-checks replies against ``fakeapi.Reply``.
import fakeapi  # noqa: E402
from conftest import REPO, lw_env  # noqa: E402
from e2e_support import (
    FEEDBACK,
    conv,
    feedback_prompts,
    history,
    is_block,
    journal,
    loop_dir,
    loop_json,
    prompt_context,
    stop_answers,
)  # noqa: E402

pytestmark = pytest.mark.e2e


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def whole_request(req: fakeapi.Request) -> str:
    return json.dumps(req.body["messages"], ensure_ascii=False)


def assert_blocks_honoured(res) -> None:
    """Every block loopwright answered led to a next turn: Claude Code's block
    cap never overrode it (an overridden block has no feedback request)."""
    blocks = [a for a in stop_answers(res) if is_block(a)]
    prompts = feedback_prompts(res)
    assert len(prompts) == len(blocks), (len(prompts), len(blocks))
    for answer, prompt in zip(blocks, prompts):
        assert answer["reason"] in prompt


def ok(res) -> None:
    assert res.returncode == 0, res.describe()
    assert not res.server.exhausted_requests, "the CLI asked for more turns than scripted\n" + res.describe()


def loopwright(project: Path, *args: str, session: str | None = None) -> subprocess.CompletedProcess:
    env = lw_env(**({"CLAUDE_CODE_SESSION_ID": session} if session else {}))
    return subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


# --------------------------------------------------------------------------
# 1. a loop that finishes on the sentinel
# --------------------------------------------------------------------------


def test_loop_ends_on_sentinel_after_three_iterations(claude, project):
    goal = "Write the greeting module"
    res = claude.run(
        f'/loopwright:loop "{goal}" --max-iterations 3 --completion-promise DONE',
        [
            fakeapi.text("Iteration one: sketched the module."),
            fakeapi.text("Iteration two: wrote the tests."),
            fakeapi.text("Everything is written and checked.\n<promise>DONE</promise>"),
        ],
    )
    ok(res)
    sid = res.session_id

    # completion is checked before the iteration budget: the third and last
    # allowed iteration ends the loop as done, not as MAX_ITERATIONS
    # the real client made exactly three conversation requests, one per iteration
    requests = conv(res)
    assert len(requests) == 3, res.describe()
    assert res.server.remaining == 0
    # the start announcement (added by the UserPromptSubmit hook) reached the model
    first = prompt_context(requests[0])
    assert 'additional context: loopwright: loop "prompt" started' in first and "loop-nonce: lw-" in first
    assert f"<goal>\n{goal}\n</goal>" in first
    assert FEEDBACK not in requests[0].last_user_text()
    # iterations 2 and 3 began with the next prompt carrying the status line and the goal
    for n, req in ((2, requests[1]), (3, requests[2])):
        text = req.last_user_text()
        assert text.lstrip().startswith(FEEDBACK), text
        assert f"iteration {n} of 3" in text
        assert f"<goal>\n{goal}\n</goal>" in text
        assert "<promise>DONE</promise>" in text

    # Stop hook: block, block, then the end summary (no block)
    answers = stop_answers(res)
    assert len(answers) == 3, answers
    assert is_block(answers[0]) and is_block(answers[1])
    assert "iteration 2/3" in answers[0]["systemMessage"]
    assert "iteration 3/3" in answers[1]["systemMessage"]
    assert not is_block(answers[2])
    assert "ended: LOOP_DONE" in answers[2]["systemMessage"]
    assert res.result_text.endswith("<promise>DONE</promise>")

    # on disk
    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"], cfg["owner_session"]) == ("ended", "LOOP_DONE", sid)
    hist = history(project)
    assert [h["iteration"] for h in hist] == [1, 2, 3]
    assert [h["outcome"] for h in hist] == ["continued", "continued", "LOOP_DONE"]
    assert all(h["session"] == sid for h in hist)
    report = (loop_dir(project) / "report.md").read_text()
    assert "**LOOP_DONE**" in report and "Iterations: 3 of 3" in report
    assert not (project / ".loopwright" / "active" / "prompt").exists()
    assert not (loop_dir(project) / "loop.lock").exists()
    status = claude.loops()["prompt"]
    assert (status["status"], status["outcome"], status["iteration"]) == ("ended", "LOOP_DONE", 3)
    assert status["prompt"] == goal


# --------------------------------------------------------------------------
# 2. --max-iterations with a tool call in every turn
# --------------------------------------------------------------------------


def test_max_iterations_with_tool_use_each_turn(claude, project, tmp_path):
    n = 3
    out = tmp_path / "appends.txt"
    script = []
    for i in range(1, n + 1):
        script.append(fakeapi.bash(f"echo iteration-{i} >> {out}", text=f"Appending line {i}."))
        script.append(fakeapi.text(f"Appended line {i}; more to do."))
    res = claude.run(
        f'/loopwright:loop "Append lines to a file" --max-iterations {n}'
        f" --no-wrap-up --completion-promise DONE",
        script,
    )
    ok(res)

    assert out.read_text().splitlines() == [f"iteration-{i}" for i in range(1, n + 1)]
    assert len(conv(res)) == 2 * n, res.describe()
    assert res.server.remaining == 0
    answers = stop_answers(res)
    assert len(answers) == n, answers
    assert all(is_block(a) for a in answers[:-1])
    assert not is_block(answers[-1]) and "ended: MAX_ITERATIONS" in answers[-1]["systemMessage"]
    prompts = feedback_prompts(res)
    assert [f"iteration {i} of {n}" in p for i, p in zip(range(2, n + 1), prompts)] == [True] * (n - 1)

    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "MAX_ITERATIONS")
    hist = history(project)
    assert [h["iteration"] for h in hist] == list(range(1, n + 1))
    assert hist[-1]["outcome"] == "MAX_ITERATIONS"
    assert all(h["used_tool"] for h in hist), hist
    status = claude.loops()["prompt"]
    assert (status["outcome"], status["iteration"]) == ("MAX_ITERATIONS", n)
    assert "**MAX_ITERATIONS**" in (loop_dir(project) / "report.md").read_text()


# --------------------------------------------------------------------------
# 3. another session in the same project is left alone
# --------------------------------------------------------------------------


def test_other_session_is_not_touched_by_the_loop(claude, project):
    sid_a, sid_b = str(uuid.uuid4()), str(uuid.uuid4())
    # The interpreter the hooks run logs every hook script it starts.
    log = project.parent / "python-runs.log"
    recorder = project.parent / "recording-python"
    recorder.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{log}'\nexec '{sys.executable}' \"$@\"\n")
    recorder.chmod(0o755)
    # Session A runs a long loop that Claude Code's block cap (2 here) pauses
    # after three text-only iterations: the loop stays active, owned by A.
    res_a = claude.run(
        '/loopwright:loop "Keep polishing the docs" --max-iterations 50 --completion-promise DONE',
        [fakeapi.text(f"A, iteration {i}.") for i in range(1, 4)],
        session_id=sid_a,
        env={"CLAUDE_CODE_STOP_HOOK_BLOCK_CAP": "2", "LOOPWRIGHT_PYTHON": str(recorder)},
    )
    ok(res_a)
    assert res_a.session_id == sid_a
    assert len(conv(res_a)) == 3, res_a.describe()
    before = claude.loops()["prompt"]
    assert (before["status"], before["owner_session"], before["paused"]) == ("active", sid_a, True)
    hist_before = history(project)
    journal_before = journal(project)

    # Session B, same project, a plain prompt and one reply. B owns no loop, so the Stop
    # launcher must decide without Python (A's Stops, above, ran it: the log shows them).
    assert "stop.py" in log.read_text()
    log.unlink()
    res_b = claude.run(
        "What does this project do?",
        [fakeapi.text("It is a test project.")],
        session_id=sid_b,
        env={"LOOPWRIGHT_PYTHON": str(recorder)},
    )
    ok(res_b)
    assert res_b.session_id == sid_b
    assert len(conv(res_b)) == 1, res_b.describe()
    assert res_b.server.remaining == 0
    assert stop_answers(res_b) == [None]  # B's one Stop passed through silently: no block, no note
    assert res_b.result_text == "It is a test project."
    seen_by_b = whole_request(conv(res_b)[0])
    assert loop_json(project)["nonce"] not in seen_by_b
    assert "Keep polishing the docs" not in seen_by_b and FEEDBACK not in seen_by_b

    after = claude.loops()["prompt"]
    assert (after["status"], after["owner_session"]) == ("active", sid_a)
    assert after["iteration"] == before["iteration"] == 4
    assert after["tokens_in"] == before["tokens_in"] and after["paused"]
    assert history(project) == hist_before
    assert journal(project) == journal_before
    assert all(r.get("session") != sid_b for r in history(project) + journal(project))
    assert (project / ".loopwright" / "active" / "prompt").exists()
    runs = log.read_text() if log.exists() else ""
    assert "stop.py" not in runs, runs


# --------------------------------------------------------------------------
# 4. the sentinel quoted in the goal, fenced or in tool output does not end the loop
# --------------------------------------------------------------------------


def test_quoted_sentinel_does_not_end_the_loop(claude, project):
    goal = "Make the CLI print this line when it finishes:\n<promise>DONE</promise>\nand document it."
    res = claude.run(
        f'/loopwright:loop "{goal}" --max-iterations 6 --completion-promise DONE',
        [
            # iteration 1: the sentinel only inside a code fence
            fakeapi.text("The CLI should print:\n```\n<promise>DONE</promise>\n```\nNot done yet."),
            # iteration 2: the sentinel in tool output, and inline in the text
            fakeapi.bash("printf '<promise>DONE</promise>\\n'", text="Checking the output."),
            fakeapi.text("It printed <promise>DONE</promise> as expected; docs still missing."),
            # iteration 3: really done
            fakeapi.text("Documented and checked.\n<promise>DONE</promise>"),
        ],
    )
    ok(res)
    assert len(conv(res)) == 4, res.describe()
    assert res.server.remaining == 0
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, True, False], answers
    prompts = feedback_prompts(res)
    assert len(prompts) == 2
    assert "iteration 2 of 6" in prompts[0] and "iteration 3 of 6" in prompts[1]
    assert f"<goal>\n{goal}\n</goal>" in prompts[0]

    cfg = loop_json(project)
    assert cfg["prompt"] == goal
    assert (cfg["status"], cfg["outcome"]) == ("ended", "LOOP_DONE")
    assert [h["outcome"] for h in history(project)] == ["continued", "continued", "LOOP_DONE"]


# --------------------------------------------------------------------------
# 5. shell metacharacters in the goal are never run and arrive verbatim
# --------------------------------------------------------------------------


def _nasty(tmp: Path) -> str:
    return (
        f'Fix the "parser" bug; it\'s `touch {tmp}/pwned2` and $(touch {tmp}/pwned1) | tee /dev/null\n'
        f"second line & echo 'single' > {tmp}/pwned3\n"
        f"  third line with $HOME, ${{PATH}}, a literal \\n and a backslash \\ in it; {{}} [x] * ? ~ # ! %"
    )


@pytest.mark.parametrize("form", ["raw", "raw-trailing-options", "double-quoted"])
def test_shell_metacharacters_in_goal_are_verbatim(claude, project, tmp_path, form):
    bait = tmp_path / "bait"
    bait.mkdir()
    nasty = _nasty(bait)
    if form == "raw":
        # Not one quoted string: slashargs keeps the text exactly as typed.
        command = f"/loopwright:loop --max-iterations 2 --no-wrap-up --completion-promise DONE {nasty}"
        expected = nasty
    elif form == "raw-trailing-options":
        command = f"/loopwright:loop {nasty} --max-iterations 2 --no-wrap-up --completion-promise DONE"
        expected = nasty
    else:
        # One double-quoted string: slashargs removes the surrounding quotes (and,
        # inside them, a backslash escapes a double quote or a backslash).
        inner = nasty.replace('"parser"', "parser")  # a quoted goal holds no bare double quote
        escaped = inner.replace("\\", "\\\\")
        command = f'/loopwright:loop "{escaped}" --max-iterations 2 --no-wrap-up --completion-promise DONE'
        expected = inner
    res = claude.run(command, [fakeapi.text("Looking at it."), fakeapi.text("Still on it.")])
    ok(res)

    assert not list(bait.iterdir()), "a shell ran part of the goal"
    cfg = loop_json(project)
    assert cfg["prompt"] == expected
    assert claude.loops()["prompt"]["prompt"] == expected
    assert len(conv(res)) == 2, res.describe()
    prompts = feedback_prompts(res)
    assert len(prompts) == 1
    assert f"<goal>\n{expected}\n</goal>" in prompts[0]
    first = prompt_context(conv(res)[0])
    assert f"<goal>\n{expected}\n</goal>" in first  # the start announcement
    assert cfg["outcome"] == "MAX_ITERATIONS"


# --------------------------------------------------------------------------
# 6. cancel in the middle of a loop
# --------------------------------------------------------------------------


def test_cancel_mid_loop_from_the_agent(claude, project):
    res = claude.run(
        '/loopwright:loop "Refactor the storage layer" --max-iterations 10 --completion-promise DONE',
        [
            fakeapi.text("Iteration one: mapped the code."),
            fakeapi.bash("loopwright cancel --reason 'agent gave up'", text="This cannot work; cancelling."),
            fakeapi.text("I cancelled the loop."),
            fakeapi.text("MUST NOT BE SENT: the loop continued after cancel"),
        ],
    )
    assert res.returncode == 0, res.describe()
    sid = res.session_id

    assert len(conv(res)) == 3, res.describe()
    assert res.server.remaining == 1  # the loop never continued after the cancel
    assert [b["content"] for b in res.tool_results if "CANCELLED" in str(b["content"])], res.tool_results
    answers = stop_answers(res)
    assert is_block(answers[0])
    assert answers[1:] == [None], answers  # after the cancel the Stop hook lets the session stop
    assert len(feedback_prompts(res)) == 1
    assert res.result_text == "I cancelled the loop."

    d = loop_dir(project)
    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "CANCELLED")
    assert (d / "cancelled").exists() and "agent gave up" in (d / "cancelled").read_text()
    assert "**CANCELLED**" in (d / "report.md").read_text()
    assert not (project / ".loopwright" / "active" / "prompt").exists()
    cancels = [j for j in journal(project) if j["event"] == "cancel"]
    assert len(cancels) == 1 and cancels[0]["session"] == sid
    assert [h["iteration"] for h in history(project)] == [1]

    # a later turn of the same session does not revive it
    res2 = claude.run("anything else?", [fakeapi.text("No.")], extra_args=["--resume", sid])
    ok(res2)
    assert len(conv(res2)) == 1 and not any(is_block(a) for a in stop_answers(res2))
    assert loop_json(project)["outcome"] == "CANCELLED"
    assert [h["iteration"] for h in history(project)] == [1]


# --------------------------------------------------------------------------
# 7. bad arguments
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, problem",
    [
        ('--max-iterations abc "x"', "--max-iterations needs a whole number, got 'abc'"),
        ('"x" --max-iteration 3', "unknown option --max-iteration"),
    ],
)
def test_bad_arguments_start_nothing(claude, project, args, problem):
    res = claude.run(f"/loopwright:loop {args}", [fakeapi.text("MUST NOT BE SENT")])
    assert conv(res) == [], res.describe()  # no model turn was spent
    answers = [
        json.loads(e["stdout"])
        for e in res.hook_events("UserPromptSubmit", "hook_response")
        if e.get("stdout", "").strip()
    ]
    assert len(answers) == 1, res.describe()
    assert answers[0]["decision"] == "block"
    assert answers[0]["reason"].startswith("loopwright: error: ") and problem in answers[0]["reason"]
    assert problem in res.stdout  # the user is shown the reason
    assert not (project / ".loopwright" / "loops").exists() or not list(
        (project / ".loopwright" / "loops").iterdir()
    )
    assert claude.loops() == {}


# --------------------------------------------------------------------------
# 8. Claude Code's block cap pauses the loop; the next message resumes it
# --------------------------------------------------------------------------


def test_block_cap_pauses_and_next_message_resumes(claude, project):
    sid = str(uuid.uuid4())
    cap = {"CLAUDE_CODE_STOP_HOOK_BLOCK_CAP": "3"}
    res = claude.run(
        '/loopwright:loop "Tidy the changelog" --max-iterations 10 --completion-promise DONE',
        [fakeapi.text(f"Iteration {i}, text only.") for i in range(1, 5)]
        + [fakeapi.text("MUST NOT BE SENT")],
        session_id=sid,
        env=cap,
    )
    assert res.returncode == 0, res.describe()
    # three blocks are allowed; at the fourth Stop loopwright pauses instead of blocking
    assert len(conv(res)) == 4, res.describe()
    assert res.server.remaining == 1
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, True, True, False], answers
    assert "paused after iteration 4" in answers[3]["systemMessage"]
    assert "block cap" in answers[3]["systemMessage"]
    assert_blocks_honoured(res)
    status = claude.loops()["prompt"]
    assert (status["status"], status["paused"], status["iteration"]) == ("active", True, 5)
    assert history(project)[-1]["outcome"] == "paused"
    human = loopwright(project, "status")
    assert human.returncode == 0 and "PAUSED" in human.stdout, human

    # the user sends another message in the same session: the loop resumes
    res2 = claude.run(
        "continue",
        [
            fakeapi.text("Iteration 5 after the pause."),
            fakeapi.text("Changelog tidy.\n<promise>DONE</promise>"),
        ],
        extra_args=["--resume", sid],
        env=cap,
    )
    ok(res2)
    assert res2.session_id == sid
    assert len(conv(res2)) == 2, res2.describe()
    answers2 = stop_answers(res2)
    assert [is_block(a) for a in answers2] == [True, False], answers2
    assert "iteration 6/10" in answers2[0]["systemMessage"]
    prompts = feedback_prompts(res2)
    assert len(prompts) == 1 and "iteration 6 of 10" in prompts[0]
    assert "paused after the previous iteration" in prompts[0] and "block cap" in prompts[0]

    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "LOOP_DONE")
    hist = history(project)
    assert [h["iteration"] for h in hist] == [1, 2, 3, 4, 5, 6]
    assert [h["outcome"] for h in hist] == ["continued"] * 3 + ["paused", "continued", "LOOP_DONE"]
    final = claude.loops()["prompt"]
    assert [(p["after_iteration"], p["why"]) for p in final["pauses"]] == [(4, "block-cap")]
    assert "Pauses: after iteration 4 (block-cap)" in (loop_dir(project) / "report.md").read_text()
    assert any(j["event"] == "resume" and j.get("why") == "block-cap" for j in journal(project))


@pytest.mark.parametrize(
    "cap, script, used_tool",
    [
        # default cap (8): eight blocks in a row are honoured, the ninth Stop pauses
        (None, [fakeapi.text(f"t{i}") for i in range(1, 10)], [False] * 9),
        # cap 2 with a tool call in iteration 2: the count restarts there
        (
            "2",
            [
                fakeapi.text("t1"),
                fakeapi.bash("true"),
                fakeapi.text("t2"),
                fakeapi.text("t3"),
                fakeapi.text("t4"),
            ],
            [False, True, False, False],
        ),
    ],
    ids=["default-cap", "cap-2-after-tool-turn"],
)
def test_block_cap_counting_matches_claude_code(claude, project, cap, script, used_tool):
    iterations = len(used_tool)
    res = claude.run(
        '/loopwright:loop "Count blocks" --max-iterations 30 --completion-promise DONE',
        script + [fakeapi.text("MUST NOT BE SENT")],
        env={"CLAUDE_CODE_STOP_HOOK_BLOCK_CAP": cap} if cap else None,
    )
    assert res.returncode == 0, res.describe()
    assert res.server.remaining == 1, res.describe()
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True] * (iterations - 1) + [False], answers
    assert f"paused after iteration {iterations}" in answers[-1]["systemMessage"]
    assert_blocks_honoured(res)
    hist = history(project)
    assert [h["used_tool"] for h in hist] == used_tool
    assert [h["outcome"] for h in hist] == ["continued"] * (iterations - 1) + ["paused"]
    assert claude.loops()["prompt"]["status"] == "active"


# --------------------------------------------------------------------------
# 9. /loopwright:cancel typed by the user ends a paused loop
# --------------------------------------------------------------------------


def test_cancel_command_ends_a_paused_loop(claude, project):
    sid = str(uuid.uuid4())
    cap = {"CLAUDE_CODE_STOP_HOOK_BLOCK_CAP": "1"}
    res = claude.run(
        '/loopwright:loop "Write more tests" --max-iterations 10 --completion-promise DONE',
        [fakeapi.text("one"), fakeapi.text("two")],
        session_id=sid,
        env=cap,
    )
    ok(res)
    assert [is_block(a) for a in stop_answers(res)] == [True, False]
    assert claude.loops()["prompt"]["paused"] is True

    res2 = claude.run(
        "/loopwright:cancel",
        [fakeapi.text("The loop was cancelled."), fakeapi.text("MUST NOT BE SENT")],
        extra_args=["--resume", sid],
        env=cap,
    )
    assert res2.returncode == 0, res2.describe()
    assert len(conv(res2)) == 1, res2.describe()
    assert "CANCELLED" in whole_request(conv(res2)[0])  # the hook's note reached the model
    assert not any(is_block(a) for a in stop_answers(res2))
    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "CANCELLED")
    assert (loop_dir(project) / "cancelled").exists()
    assert [h["iteration"] for h in history(project)] == [1, 2]


# --------------------------------------------------------------------------
# 10. /loopwright:resume in a new session takes over a loop whose session ended
# --------------------------------------------------------------------------


def test_resume_command_takes_over_in_a_new_session(claude, project):
    sid_a, sid_c = str(uuid.uuid4()), str(uuid.uuid4())
    res = claude.run(
        '/loopwright:loop "Port the scripts" --max-iterations 10 --completion-promise DONE',
        [fakeapi.text("A1"), fakeapi.text("A2")],
        session_id=sid_a,
        env={"CLAUDE_CODE_STOP_HOOK_BLOCK_CAP": "1"},
    )
    ok(res)
    assert [is_block(a) for a in stop_answers(res)] == [True, False]
    assert claude.loops()["prompt"]["paused"] is True

    # session A's process is gone, so its lock is stale: a new session may take over
    res2 = claude.run(
        "/loopwright:resume",
        [fakeapi.text("C3: picking up."), fakeapi.text("Ported and checked.\n<promise>DONE</promise>")],
        session_id=sid_c,
    )
    ok(res2)
    assert len(conv(res2)) == 2, res2.describe()
    assert 'loop "prompt" resumed' in prompt_context(conv(res2)[0])
    answers = stop_answers(res2)
    assert [is_block(a) for a in answers] == [True, False], answers
    assert "iteration 4/10" in answers[0]["systemMessage"]
    assert "ended: LOOP_DONE" in answers[1]["systemMessage"]

    status = claude.loops()["prompt"]
    assert (status["outcome"], status["owner_session"], status["iteration"]) == ("LOOP_DONE", sid_c, 4)
    hist = history(project)
    assert [(h["iteration"], h["session"]) for h in hist] == [(1, sid_a), (2, sid_a), (3, sid_c), (4, sid_c)]
    takeovers = [j for j in journal(project) if j["event"] == "resume" and "previous_owner" in j]
    assert [(j["session"], j["previous_owner"]) for j in takeovers] == [(sid_c, sid_a)]


def test_second_loop_in_the_same_session_is_refused(claude, project):
    sid = str(uuid.uuid4())
    started = loopwright(
        project,
        "start",
        "--session",
        sid,
        "--max-iterations",
        "5",
        "--completion-promise",
        "DONE",
        "First goal",
    )
    assert started.returncode == 0, started.stderr
    res = claude.run(
        '/loopwright:loop "Second goal" --max-iterations 3 --completion-promise DONE',
        [fakeapi.text("MUST NOT BE SENT")],
        session_id=sid,
    )
    assert conv(res) == [], res.describe()
    answers = [
        json.loads(e["stdout"])
        for e in res.hook_events("UserPromptSubmit", "hook_response")
        if e.get("stdout", "").strip()
    ]
    assert len(answers) == 1 and answers[0]["decision"] == "block", answers
    assert "already runs loop prompt" in answers[0]["reason"]
    assert not any(is_block(a) for a in stop_answers(res))
    loops_now = claude.loops()
    assert list(loops_now) == ["prompt"]
    assert (loops_now["prompt"]["status"], loops_now["prompt"]["iteration"]) == ("active", 1)
    assert loops_now["prompt"]["prompt"] == "First goal"
    assert history(project) == []


def test_wall_clock_budget_ends_the_loop(claude, project):
    res = claude.run(
        '/loopwright:loop "Anything" --max-iterations 10 --max-minutes 0.0005'
        " --no-wrap-up --completion-promise DONE",
        [fakeapi.text("Started."), fakeapi.text("MUST NOT BE SENT")],
    )
    assert res.returncode == 0, res.describe()
    assert len(conv(res)) == 1 and res.server.remaining == 1, res.describe()
    answers = stop_answers(res)
    assert len(answers) == 1 and not is_block(answers[0])
    assert "ended: BUDGET_EXHAUSTED:minutes" in answers[0]["systemMessage"]
    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "BUDGET_EXHAUSTED:minutes")
    assert [h["stop_conditions_fired"] for h in history(project)] == [["wall_clock_budget"]]
