"""End-to-end tests of budgets, the budget-escalation gate and resume (issue 3),
through the real Claude Code CLI.

Every test drives the pinned Claude Code CLI offline against the scripted
Messages API (``tests/fakeapi.py``) with this repository loaded as a plugin,
then checks what the real client did (conversation requests, Stop hook
answers, the prompts that reached the model) and what the loop left on disk
(``budget.json``, ``history.jsonl``, ``journal.jsonl``, ``report.md``,
``loopwright status --json``).

Expected dollars are computed here, independently of ``lib/loopwright/rates.py``,
from the usage of every conversation reply the server really sent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

import claude_cli  # noqa: E402
import fakeapi  # noqa: E402
from conftest import REPO, lw_env  # noqa: E402
from e2e_support import (
    FEEDBACK,
    conv,
    history,
    is_block,
    journal,
    loop_dir,
    loop_json,
    prompt_context,
    stop_answers,
    usage,
)  # noqa: E402

pytestmark = pytest.mark.e2e

GATE = 'Gate "budget-escalation"'

# USD per million tokens: input, output, cache write, cache read (published list prices).
RATES = {
    "claude-sonnet-4-5": (3.0, 15.0, 3.75, 0.30),
    "claude-haiku-4-5": (1.0, 5.0, 1.25, 0.10),
}


# --------------------------------------------------------------------------
# helpers (the same patterns as test_e2e_loop.py)
# --------------------------------------------------------------------------


def budget_json(project: Path, name: str = "prompt") -> dict:
    return json.loads((loop_dir(project, name) / "budget.json").read_text())


def report_md(project: Path, name: str = "prompt") -> str:
    return (loop_dir(project, name) / "report.md").read_text()


def prompt_answers(res) -> list[dict]:
    """What the UserPromptSubmit hook printed, parsed."""
    return [
        json.loads(e["stdout"])
        for e in res.hook_events("UserPromptSubmit", "hook_response")
        if (e.get("stdout") or "").strip()
    ]


def ok(res) -> None:
    assert res.returncode == 0, res.describe()
    assert not res.server.exhausted_requests, "the CLI asked for more turns than scripted\n" + res.describe()


def loopwright(
    project: Path, *args: str, session: str | None = None, **env: str
) -> subprocess.CompletedProcess:
    extra = dict(env)
    if session:
        extra["CLAUDE_CODE_SESSION_ID"] = session
    return subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), *args],
        capture_output=True,
        text=True,
        env=lw_env(**extra),
        timeout=60,
    )


def rate_key(model: str) -> str:
    for key in sorted(RATES, key=len, reverse=True):
        if model == key or model.startswith(key + "-"):
            return key
    raise KeyError(model)


def dollars_of(u: dict[str, int], model: str) -> float:
    r_in, r_out, r_cw, r_cr = RATES[rate_key(model)]
    return (
        u["input_tokens"] * r_in
        + u["output_tokens"] * r_out
        + u["cache_creation_input_tokens"] * r_cw
        + u["cache_read_input_tokens"] * r_cr
    ) / 1_000_000


def sent(req: fakeapi.Request, server: fakeapi.ScriptedServer) -> tuple[dict[str, int], str]:
    """Usage and model of the reply the server really sent for ``req``."""
    assert req.reply is not None and not req.reply.is_error and req.reply.message_id
    return req.reply.effective_usage(), req.reply.model or server.model


def spent(reqs: list[fakeapi.Request], server: fakeapi.ScriptedServer) -> float:
    return sum(dollars_of(*sent(r, server)) for r in reqs)


def summed(reqs: list[fakeapi.Request], field: str) -> int:
    return sum(r.reply.effective_usage()[field] for r in reqs)


def wait_for(pred, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log and log.exists() else ""
            raise AssertionError(f"claude exited ({proc.returncode}) while waiting for {what}\n{tail}")
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_claude(
    claude,
    prompt: str,
    server: fakeapi.ScriptedServer,
    *,
    session_id: str,
    log: Path,
    env: dict | None = None,
) -> subprocess.Popen:
    """``claude -p`` as :func:`claude_cli.run_claude` runs it, but in the background
    (own process group, output to ``log``) so a test can kill it mid-loop."""
    home = Path(claude.home)
    home.mkdir(parents=True, exist_ok=True)
    args = [
        claude_cli.claude_binary(),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-hook-events",
        "--dangerously-skip-permissions",
        "--plugin-dir",
        str(REPO),
        "--session-id",
        session_id,
    ]
    extra = {"LOOPWRIGHT_PYTHON": sys.executable, **(env or {})}
    with open(log, "w") as out:
        return subprocess.Popen(
            args,
            cwd=claude.project,
            env=claude_cli.offline_env(server.url, home, extra),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


# --------------------------------------------------------------------------
# 1. --max-dollars: the spend matches the scripted usage to the cent
# --------------------------------------------------------------------------


def test_max_dollars_stops_at_the_known_iteration_with_exact_spend(claude, project):
    # Per iteration (built-in rates): 1 → $0.9525; 2 → $0.21 (haiku, tool turn) + $0.45
    # = $0.66, total $1.6125 (past 80% of $2: the gate fires, policy continue);
    # 3 → $0.9465, total $2.559 ≥ $2: BUDGET_EXHAUSTED:dollars at iteration 3.
    u1 = usage(200_000, 20_000, 10_000, 50_000)
    u2 = usage(150_000, 10_000, 0, 100_000)
    u3 = usage(100_000, 5_000, 20_000, 0)
    u4 = usage(200_000, 20_000, 10_000, 30_000)
    res = claude.run(
        '/loopwright:loop "Grow the test suite" --max-iterations 10 --max-dollars 2 --gates continue'
        " --no-wrap-up "
        "--completion-promise DONE",
        [
            fakeapi.text("Iteration one: planned the suite.", usage=u1),
            fakeapi.bash("true", text="Checking the tree.", usage=u2, model="claude-haiku-4-5-20251001"),
            fakeapi.text("Iteration two: wrote two tests.", usage=u3),
            fakeapi.text("Iteration three: wrote three more.", usage=u4),
            fakeapi.text("MUST NOT BE SENT: a turn after the dollar stop", usage=u1),
        ],
    )
    ok(res)
    server = res.server
    requests = conv(res)
    # no extra turn ran after the stop
    assert len(requests) == 4, res.describe()
    assert server.remaining == 1
    per_iter = [requests[0:1], requests[1:3], requests[3:4]]
    assert [sent(r, server)[0] for r in requests] == [dict(u1), dict(u2), dict(u3), dict(u4)]

    expected = spent(requests, server)
    assert abs(expected - 2.559) < 1e-9  # the scripted numbers are what this test thinks they are

    # the Stop hook: block, block, then the end with the dollar outcome
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, True, False], answers
    final = answers[-1]["systemMessage"]
    assert "ended: BUDGET_EXHAUSTED:dollars" in final, final
    assert "the dollars budget ran out" in final
    assert f"${expected:,.2f}/$2.00" in final, final
    assert "iteration 2/10" in answers[0]["systemMessage"] and "$0.95/$2.00" in answers[0]["systemMessage"]
    assert "iteration 3/10" in answers[1]["systemMessage"] and "$1.61/$2.00" in answers[1]["systemMessage"]

    # budget.json: exact to 1e-6 and to the cent
    b = budget_json(project)
    assert abs(b["dollars_estimate"] - expected) < 1e-6, (b["dollars_estimate"], expected)
    assert round(b["dollars_estimate"], 2) == round(expected, 2) == 2.56
    assert b["rate_table_source"] == "built-in default"
    assert b["unknown_models"] == []
    assert b["tokens_in"] == summed(requests, "input_tokens") == 650_000
    assert b["tokens_out"] == summed(requests, "output_tokens") == 55_000
    assert b["cache_creation_input_tokens"] == summed(requests, "cache_creation_input_tokens")
    assert b["cache_read_input_tokens"] == summed(requests, "cache_read_input_tokens")
    assert b["iterations_used"] == 3

    # history.jsonl: the spend of every iteration, counted in its own tick
    hist = history(project)
    assert [h["iteration"] for h in hist] == [1, 2, 3]
    for h, reqs in zip(hist, per_iter):
        assert abs(h["dollars_this_iter"] - spent(reqs, server)) < 1e-6, (
            h["iteration"],
            h["dollars_this_iter"],
        )
        assert h["tokens_in_this_iter"] == summed(reqs, "input_tokens")
        assert h["tokens_out_this_iter"] == summed(reqs, "output_tokens")
        assert h["cache_creation_tokens_this_iter"] == summed(reqs, "cache_creation_input_tokens")
        assert h["cache_read_tokens_this_iter"] == summed(reqs, "cache_read_input_tokens")
    assert [h["outcome"] for h in hist] == ["continued", "continued", "BUDGET_EXHAUSTED:dollars"]
    assert hist[-1]["stop_conditions_fired"] == ["cost_budget"]
    assert abs(hist[-1]["budget_snapshot"]["dollars_estimate"] - expected) < 1e-6
    # the 80% crossing in iteration 2 was answered by the policy, not asked
    assert hist[0]["gates"] == []
    assert [(g["name"], g["answer"], g["by"]) for g in hist[1]["gates"]] == [
        ("budget-escalation", "continue", "policy")
    ]
    assert (
        hist[1]["gates"][0]["question"]
        == "Approaching dollars ($1.61/$2.00). Continue, raise ceiling, or stop?"
    )
    assert hist[2]["gates"] == []
    assert not any(GATE in r.last_user_text() for r in requests)

    # loop.json, report.md and status --json agree
    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "BUDGET_EXHAUSTED:dollars")
    report = report_md(project)
    assert "**BUDGET_EXHAUSTED:dollars**" in report
    assert f"- Spend: ${expected:,.2f}/$2.00 (rates: built-in default)" in report, report
    assert "Cost budget reached: $2.56 / $2.00" in report
    assert "Iterations: 3 of 10" in report
    status = claude.loops()["prompt"]
    assert abs(status["dollars_estimate"] - expected) < 1e-6
    assert round(status["dollars_estimate"], 2) == 2.56
    assert (status["outcome"], status["iteration"], status["max_dollars"]) == (
        "BUDGET_EXHAUSTED:dollars",
        3,
        2.0,
    )
    assert not (loop_dir(project) / "loop.lock").exists()


# --------------------------------------------------------------------------
# 2. --max-tokens: input + output, cache traffic not counted
# --------------------------------------------------------------------------


def test_max_tokens_counts_input_and_output_only(claude, project):
    # 4,000 tokens (in + out) per iteration, plus 500k cache reads that must not count:
    # 4,000 / 8,000 (80% of 10,000: policy continue) / 12,000 ≥ 10,000 → stop at iteration 3.
    u = usage(3_000, 1_000, 2_000, 500_000)
    res = claude.run(
        '/loopwright:loop "Refine the docs" --max-iterations 10 --max-tokens 10000 --gates continue'
        " --no-wrap-up "
        "--completion-promise DONE",
        [fakeapi.text(f"Iteration {i}.", usage=u) for i in (1, 2, 3)]
        + [fakeapi.text("MUST NOT BE SENT", usage=u)],
    )
    ok(res)
    requests = conv(res)
    assert len(requests) == 3 and res.server.remaining == 1, res.describe()
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, True, False], answers
    assert "ended: BUDGET_EXHAUSTED:tokens" in answers[-1]["systemMessage"]

    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "BUDGET_EXHAUSTED:tokens")
    b = budget_json(project)
    assert b["tokens_in"] == summed(requests, "input_tokens") == 9_000
    assert b["tokens_out"] == summed(requests, "output_tokens") == 3_000
    assert b["cache_read_input_tokens"] == summed(requests, "cache_read_input_tokens") == 1_500_000
    assert b["cache_creation_input_tokens"] == summed(requests, "cache_creation_input_tokens") == 6_000
    assert abs(b["dollars_estimate"] - spent(requests, res.server)) < 1e-6
    hist = history(project)
    assert [(h["iteration"], h["tokens_in_this_iter"], h["tokens_out_this_iter"]) for h in hist] == [
        (1, 3_000, 1_000),
        (2, 3_000, 1_000),
        (3, 3_000, 1_000),
    ]
    assert [h["outcome"] for h in hist] == ["continued", "continued", "BUDGET_EXHAUSTED:tokens"]
    assert hist[-1]["stop_conditions_fired"] == ["token_budget"]
    assert [g["question"] for g in hist[1]["gates"]] == [
        "Approaching tokens (8000/10000). Continue, raise ceiling, or stop?"
    ]
    status = claude.loops()["prompt"]
    assert (status["tokens_in"], status["tokens_out"], status["outcome"]) == (
        9_000,
        3_000,
        "BUDGET_EXHAUSTED:tokens",
    )
    report = report_md(project)
    assert "**BUDGET_EXHAUSTED:tokens**" in report
    assert "(in 9000, out 3000, cache write 6000, cache read 1500000)" in report


# --------------------------------------------------------------------------
# 3. the 80% gate asked and answered; and the stop policy
# --------------------------------------------------------------------------


def gate_answerer(option: str, seen: list[str]):
    """A scripted agent turn: if the prompt shows the gate, record ``option`` with the CLI."""

    def reply(request: fakeapi.Request):
        text = request.last_user_text()
        seen.append(text)
        if GATE in text:
            return fakeapi.bash(
                f"loopwright gate answer budget-escalation {option}",
                text=f"The user chose {option}; recording it.",
                usage=usage(10, 5),
            )
        return fakeapi.text("I saw no gate in this prompt.", usage=usage(10, 5))

    return reply


def test_budget_gate_asked_and_answered_continue(claude, project):
    seen: list[str] = []
    res = claude.run(
        '/loopwright:loop "Polish the parser" --max-iterations 5 --no-wrap-up --completion-promise DONE',
        [fakeapi.text(f"Iteration {i}.") for i in (1, 2, 3, 4)]
        + [
            gate_answerer("continue", seen),
            fakeapi.text("Recorded; iteration five done."),
            fakeapi.text("MUST NOT BE SENT"),
        ],
    )
    ok(res)
    requests = conv(res)
    assert len(requests) == 6 and res.server.remaining == 1, res.describe()
    question = "Approaching iterations (4/5). Continue, raise ceiling, or stop?"

    # the gate appears in the prompt for iteration 5 (the 5th request), and only there
    fifth = requests[4].last_user_text()
    assert seen == [fifth]
    assert fifth.lstrip().startswith(FEEDBACK) and "iteration 5 of 5" in fifth
    assert f"{GATE}: {question}" in fifth, fifth
    assert "Options: continue, raise, stop" in fifth
    assert "AskUserQuestion" in fifth and "loopwright gate answer <gate> <option>" in fifth
    assert [GATE in r.last_user_text() for r in requests[:4]] == [False] * 4
    # the real Bash tool ran the CLI, which found the loop through the session id
    results = [str(b["content"]) for b in res.tool_results]
    assert any("recorded 'continue' for gate budget-escalation of loop prompt" in r for r in results), results

    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True] * 4 + [False], answers
    assert "ended: MAX_ITERATIONS" in answers[-1]["systemMessage"]

    hist = history(project)
    assert [h["iteration"] for h in hist] == [1, 2, 3, 4, 5]
    assert [h["gates"] for h in hist[:3]] == [[], [], []]
    (asked,) = hist[3]["gates"]
    assert (asked["name"], asked["question"], asked["answer"], asked["by"]) == (
        "budget-escalation",
        question,
        None,
        "asked",
    )
    (answered,) = hist[4]["gates"]
    assert (answered["name"], answered["question"], answered["answer"], answered["by"]) == (
        "budget-escalation",
        question,
        "continue",
        "user",
    )
    assert [h["outcome"] for h in hist] == ["continued"] * 4 + ["MAX_ITERATIONS"]
    assert hist[-1]["stop_conditions_fired"] == ["iteration_budget"]
    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "MAX_ITERATIONS")
    status = claude.loops()["prompt"]
    assert [(g["name"], g["answer"], g["by"], g["iteration"]) for g in status["gates"]] == [
        ("budget-escalation", "continue", "user", 5)
    ]
    assert status["pending_gates"] == []
    assert f'budget-escalation: "{question}" → continue (user' in report_md(project)


def test_budget_gate_answered_stop_ends_the_loop(claude, project):
    # $0.45 per work iteration against $1.00: iteration 2 crosses 80% ($0.90), the
    # prompt for iteration 3 asks; the answer stop ends the loop at iteration 3's Stop
    # (its own spend keeps the total under $1.00, so only the gate stops it).
    work = usage(100_000, 10_000, 0, 0)  # $0.30 + $0.15
    seen: list[str] = []
    res = claude.run(
        '/loopwright:loop "Tune the cache" --max-iterations 10 --max-dollars 1'
        " --no-wrap-up --completion-promise DONE",
        [
            fakeapi.text("Iteration 1.", usage=work),
            fakeapi.text("Iteration 2.", usage=work),
            gate_answerer("stop", seen),
            fakeapi.text("The user chose to stop.", usage=usage(10, 5)),
            fakeapi.text("MUST NOT BE SENT"),
        ],
    )
    ok(res)
    requests = conv(res)
    assert len(requests) == 4 and res.server.remaining == 1, res.describe()
    question = "Approaching dollars ($0.90/$1.00). Continue, raise ceiling, or stop?"
    assert len(seen) == 1 and f"{GATE}: {question}" in seen[0], seen
    assert "iteration 3 of 10" in seen[0]

    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, True, False], answers
    assert "ended: GATE_STOP:budget-escalation" in answers[-1]["systemMessage"]
    assert "the user answered stop at gate budget-escalation" in answers[-1]["systemMessage"]

    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "GATE_STOP:budget-escalation")
    hist = history(project)
    assert [h["outcome"] for h in hist] == ["continued", "continued", "GATE_STOP:budget-escalation"]
    assert [(g["answer"], g["by"]) for g in hist[1]["gates"]] == [(None, "asked")]
    assert [(g["name"], g["question"], g["answer"], g["by"]) for g in hist[2]["gates"]] == [
        ("budget-escalation", question, "stop", "user")
    ]
    assert hist[2]["stop_conditions_fired"] == ["prior_gate_stop"]
    assert budget_json(project)["dollars_estimate"] < 1.0
    report = report_md(project)
    assert "**GATE_STOP:budget-escalation**" in report
    assert f'- iteration 3: budget-escalation: "{question}" → stop (user' in report, report
    # a loop stopped at a gate is not resumed
    again = loopwright(project, "resume", "--session", str(uuid.uuid4()))
    assert (
        again.returncode != 0
        and "Loop already stopped at gate budget-escalation in iteration 3" in again.stderr
    ), again


def test_gate_policy_stop_ends_without_asking(claude, project):
    res = claude.run(
        '/loopwright:loop "Trim the logs" --max-iterations 5 --gates stop --completion-promise DONE',
        [fakeapi.text(f"Iteration {i}.") for i in (1, 2, 3, 4)] + [fakeapi.text("MUST NOT BE SENT")],
    )
    ok(res)
    requests = conv(res)
    assert len(requests) == 4 and res.server.remaining == 1, res.describe()
    assert not any(GATE in r.last_user_text() or "AskUserQuestion" in r.last_user_text() for r in requests)
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, True, True, False], answers
    assert "ended: GATE_STOP:budget-escalation" in answers[-1]["systemMessage"]
    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"]) == ("ended", "GATE_STOP:budget-escalation")
    hist = history(project)
    assert [h["iteration"] for h in hist] == [1, 2, 3, 4]
    assert [(g["name"], g["answer"], g["by"]) for g in hist[3]["gates"]] == [
        ("budget-escalation", "stop", "policy")
    ]
    assert (
        hist[3]["gates"][0]["question"] == "Approaching iterations (4/5). Continue, raise ceiling, or stop?"
    )
    assert hist[3]["stop_conditions_fired"] == ["prior_gate_stop"]
    assert "→ stop (policy" in report_md(project)


# --------------------------------------------------------------------------
# 4. SIGKILL mid-loop, then resume in a new session
# --------------------------------------------------------------------------


def test_sigkill_mid_loop_then_resume_in_new_session(claude, project, tmp_path):
    sid_a, sid_b = str(uuid.uuid4()), str(uuid.uuid4())
    u = usage(40_000, 4_000, 1_000, 2_000)
    server_a = fakeapi.ScriptedServer(
        [
            fakeapi.text("A: iteration 1.", usage=u),
            fakeapi.text("A: iteration 2.", usage=u),
            fakeapi.bash("sleep 60", text="A: running the long job.", usage=u),
            fakeapi.text("MUST NOT BE SENT: A was killed", usage=u),
        ]
    ).start()
    log = tmp_path / "claude-a.log"
    proc = start_claude(
        claude,
        '/loopwright:loop "Migrate the database" --max-iterations 10 --completion-promise DONE',
        server_a,
        session_id=sid_a,
        log=log,
    )
    sleepers: list[psutil.Process] = []
    try:
        wait_for(lambda: len(history(project)) >= 2, 90, "two history lines", proc, log)
        wait_for(lambda: len(server_a.conversation_requests) >= 3, 30, "the third request", proc, log)

        def sleeping():
            try:
                kids = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                return []
            found = []
            for k in kids:
                with contextlib.suppress(psutil.Error):
                    if k.cmdline()[:2] == ["sleep", "60"]:
                        found.append(k)
            return found

        sleepers = wait_for(sleeping, 30, "the sleep 60 tool call", proc, log)
        before_cfg = loop_json(project)
        before_budget = budget_json(project)
        before_hist = history(project)
        lock = json.loads((loop_dir(project) / "loop.lock").read_text())
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for s in sleepers:  # the Bash tool may have put the command in its own group
            with contextlib.suppress(psutil.Error):
                s.kill()
        server_a.stop()

    # killed between iterations 2 and 3: still active, owned by A, lock names a dead process
    assert len(server_a.conversation_requests) == 3 and not server_a.exhausted_requests
    cfg = loop_json(project)
    assert (cfg["status"], cfg["owner_session"]) == ("active", sid_a)
    assert cfg["started_at"] == before_cfg["started_at"]
    assert [h["iteration"] for h in history(project)] == [1, 2]
    assert lock["owner"] == f"session:{sid_a}"
    assert lock["pid"] == proc.pid  # the Claude Code process itself
    wait_for(
        lambda: (
            not psutil.pid_exists(lock["pid"]) or psutil.Process(lock["pid"]).status() == psutil.STATUS_ZOMBIE
        ),
        10,
        "the lock's process to be gone",
    )
    a_reqs = server_a.conversation_requests[:2]  # the two iterations A finished
    assert before_budget["tokens_in"] == summed(a_reqs, "input_tokens") == 80_000
    assert abs(before_budget["dollars_estimate"] - spent(a_reqs, server_a)) < 1e-6
    assert before_hist[-1]["budget_snapshot"]["tokens_in"] == 80_000

    # session B takes the loop over with /loopwright:loop --resume
    res = claude.run(
        "/loopwright:loop --resume",
        [
            fakeapi.text("B: iteration 3, picking up the migration.", usage=u),
            fakeapi.text("B: migrated and checked.\n<promise>DONE</promise>", usage=u),
            fakeapi.text("MUST NOT BE SENT"),
        ],
        session_id=sid_b,
    )
    ok(res)
    requests = conv(res)
    assert len(requests) == 2 and res.server.remaining == 1, res.describe()
    first = prompt_context(requests[0])
    assert 'loop "prompt" resumed' in first, first
    assert f"Reaped stale lock for pid {lock['pid']}" in first, first
    assert "counters restored from history line 2" in first, first
    answers = stop_answers(res)
    assert [is_block(a) for a in answers] == [True, False], answers
    assert "iteration 4/10" in answers[0]["systemMessage"]
    assert "ended: LOOP_DONE" in answers[1]["systemMessage"]

    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"], cfg["owner_session"]) == ("ended", "LOOP_DONE", sid_b)
    assert cfg["started_at"] == before_cfg["started_at"]
    hist = history(project)
    assert [(h["iteration"], h["session"]) for h in hist] == [(1, sid_a), (2, sid_a), (3, sid_b), (4, sid_b)]
    assert hist[:2] == before_hist
    b = budget_json(project)
    assert b["started_at"] == before_budget["started_at"]
    assert b["iterations_used"] == 4
    assert b["tokens_in"] >= before_budget["tokens_in"]
    # A's two finished iterations plus B's two (A's killed turn was never counted)
    assert b["tokens_in"] == summed(a_reqs, "input_tokens") + summed(requests, "input_tokens")
    assert b["tokens_out"] == summed(a_reqs, "output_tokens") + summed(requests, "output_tokens")
    assert abs(b["dollars_estimate"] - (spent(a_reqs, server_a) + spent(requests, res.server))) < 1e-6
    takeovers = [j for j in journal(project) if j["event"] == "resume" and "previous_owner" in j]
    assert [(j["session"], j["previous_owner"]) for j in takeovers] == [(sid_b, sid_a)]
    assert any("Reaped stale lock" in n for n in takeovers[0]["notes"])
    status = claude.loops()["prompt"]
    assert (status["outcome"], status["owner_session"], status["iteration"]) == ("LOOP_DONE", sid_b, 4)
    assert status["started_at"] == before_cfg["started_at"]


# --------------------------------------------------------------------------
# 5. resume refused while the owner lives; allowed once it is gone
# --------------------------------------------------------------------------


def test_resume_refused_against_live_owner_then_taken_over(claude, project):
    sid_a, sid_b = str(uuid.uuid4()), str(uuid.uuid4())
    # Lives until killed below, however long the resume attempt takes on a busy machine.
    owner = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    try:
        started = loopwright(
            project,
            "start",
            "--session",
            sid_a,
            "--max-iterations",
            "5",
            "--completion-promise",
            "DONE",
            "Rewrite the installer",
            LOOPWRIGHT_OWNER_PID=str(owner.pid),
        )
        assert started.returncode == 0, started.stderr
        lock = json.loads((loop_dir(project) / "loop.lock").read_text())
        assert (lock["owner"], lock["pid"]) == (f"session:{sid_a}", owner.pid)

        res = claude.run("/loopwright:resume", [fakeapi.text("MUST NOT BE SENT")], session_id=sid_b)
        assert res.returncode == 0, res.describe()
        assert conv(res) == [], res.describe()  # blocked: no model turn was spent
        refused = prompt_answers(res)
        assert len(refused) == 1 and refused[0]["decision"] == "block", refused
        reason = refused[0]["reason"]
        assert reason.startswith("loopwright: error: ") and "still active" in reason, reason
        assert f"pid {owner.pid}" in reason
        assert "still active" in res.stdout  # the user is shown the reason
        cfg = loop_json(project)
        assert (cfg["status"], cfg["owner_session"]) == ("active", sid_a)
        assert json.loads((loop_dir(project) / "loop.lock").read_text())["owner"] == f"session:{sid_a}"
        assert not [j for j in journal(project) if j["event"] == "resume"]
    finally:
        owner.kill()
        owner.wait(timeout=10)

    # the owner is gone: the same command, again in session B, now takes over
    res2 = claude.run(
        "/loopwright:resume",
        [fakeapi.text("B: installer rewritten.\n<promise>DONE</promise>"), fakeapi.text("MUST NOT BE SENT")],
        extra_args=["--resume", sid_b],
    )
    ok(res2)
    assert res2.session_id == sid_b
    assert len(conv(res2)) == 1 and res2.server.remaining == 1, res2.describe()
    first = prompt_context(conv(res2)[0])
    assert 'loop "prompt" resumed' in first and f"Reaped stale lock for pid {owner.pid}" in first, first
    answers = stop_answers(res2)
    assert len(answers) == 1 and "ended: LOOP_DONE" in answers[0]["systemMessage"], answers
    cfg = loop_json(project)
    assert (cfg["status"], cfg["outcome"], cfg["owner_session"]) == ("ended", "LOOP_DONE", sid_b)
    assert [(h["iteration"], h["session"]) for h in history(project)] == [(1, sid_b)]
    takeovers = [j for j in journal(project) if j["event"] == "resume"]
    assert [(j["session"], j["previous_owner"]) for j in takeovers] == [(sid_b, sid_a)]
