"""Issue 3 through the command line and the hook processes: iteration reports,
gate answers, history, the status line, resume of an ended loop, budget files,
redaction, the token ledger."""

import json
import subprocess

from conftest import REPO, cli, hook_stop, lw_env

CLI = REPO / "bin" / "loopwright"
STOP = REPO / "hooks" / "stop"


def lw(project, *args, session=None, input=None):
    return cli(project, *args, input=input, env={"CLAUDE_CODE_SESSION_ID": session} if session else None)


stop = hook_stop


def loop_file(project, name, loop="prompt"):
    return project / ".loopwright" / "loops" / loop / name


def read(project, name, loop="prompt"):
    return json.loads(loop_file(project, name, loop).read_text())


def history(project, loop="prompt"):
    return [json.loads(x) for x in loop_file(project, "history.jsonl", loop).read_text().splitlines()]


def test_reports_are_validated_and_folded_in_at_the_next_stop(project):
    lw(project, "start", "--session", "S1", "--max-prs", "5", "goal")
    bad = lw(project, "report", "--outcome", "failure", session="S1")
    assert bad.returncode == 1 and "needs --root-cause" in bad.stderr
    bad = lw(project, "report", "--outcome", "success", "--pr", "abc", session="S1")
    assert bad.returncode == 1 and "--pr takes a PR number" in bad.stderr
    bad = lw(project, "report", "--outcome", "success", "--tracked-pr", "1:main:zz:yy:open", session="S1")
    assert bad.returncode == 1 and "--tracked-pr" in bad.stderr
    ok = lw(
        project,
        "report",
        "--outcome",
        "success",
        "--pr",
        "142",
        "--pr",
        "#7",
        "--comments",
        "4",
        "--merges",
        "1",
        "--agents",
        "2",
        "--tracked-pr",
        "142:feature/x:abc1234:def5678:open",
        "--worktree",
        ".wt/x:feature/x:def5678",
        "--task",
        "api",
        session="S1",
    )
    assert ok.returncode == 0, ok.stderr
    stop(project)
    b = read(project, "budget.json")
    assert b["prs_touched"] == ["#142", "#7"] and b["comments_pushed"] == 4 and b["agents_dispatched"] == 2
    (h,) = history(project)
    assert h["prs_touched_this_iter"] == ["#142", "#7"]
    assert h["tracked_prs"] == [
        {
            "number": 142,
            "branch": "feature/x",
            "head_sha_at_iteration_start": "abc1234",
            "head_sha_at_iteration_end": "def5678",
            "state_at_end": "open",
        }
    ]
    assert h["active_worktrees"] == [{"path": ".wt/x", "branch": "feature/x", "head_sha": "def5678"}]
    ledger = read(project, "token-ledger.json")
    assert ledger["tasks"]["api"]["iterations"] == 1 and ledger["sessions"]["S1"]["iterations"] == 1
    # A second Stop does not count the same report again.
    stop(project)
    assert read(project, "budget.json")["comments_pushed"] == 4


def test_gate_answer_through_the_cli(project):
    lw(project, "start", "--session", "S1", "--max-iterations", "5", "goal")
    for _ in range(4):
        answer = stop(project)
    assert 'Gate "budget-escalation"' in answer["reason"]
    listed = lw(project, "gate", "list", "--json", session="S1")
    assert json.loads(listed.stdout)["gates"][0]["name"] == "budget-escalation"
    bad = lw(project, "gate", "answer", "budget-escalation", "maybe", session="S1")
    assert bad.returncode == 1 and "not an option" in bad.stderr
    bad = lw(project, "gate", "answer", "force-unlock", "yes", session="S1")
    assert bad.returncode == 1 and "no gate force-unlock is waiting" in bad.stderr
    ok = lw(project, "gate", "answer", "budget-escalation", "raise", "--max-iterations", "9", session="S1")
    assert ok.returncode == 0, ok.stderr
    answer = stop(project)
    assert answer["decision"] == "block" and "iteration 6/9" in answer["systemMessage"]
    hist = lw(project, "history").stdout
    assert "budget-escalation=None" in hist and "budget-escalation=raise" in hist
    status = lw(project, "status").stdout
    assert "gate budget-escalation (iteration 5): raise (user)" in status


def test_gate_stop_ends_the_loop_and_resume_refuses_it(project):
    lw(project, "start", "--session", "S1", "--max-iterations", "5", "goal")
    for _ in range(4):
        stop(project)
    lw(project, "gate", "answer", "budget-escalation", "stop", session="S1")
    answer = stop(project)
    assert "GATE_STOP:budget-escalation" in answer["systemMessage"]
    report = loop_file(project, "report.md").read_text()
    assert (
        'budget-escalation: "Approaching iterations (4/5). Continue, raise ceiling, or stop?" → stop (user'
        in report
    )
    res = lw(project, "resume", "prompt", "--session", "S2")
    assert res.returncode == 1
    assert "Loop already stopped at gate budget-escalation in iteration 5" in res.stderr


def test_an_exhausted_loop_resumes_only_with_a_higher_ceiling(project):
    lw(
        project,
        "start",
        "--session",
        "S1",
        "--max-iterations",
        "2",
        "--no-wrap-up",
        "--gates",
        "continue",
        "goal",
    )
    stop(project)
    assert "MAX_ITERATIONS" in stop(project)["systemMessage"]
    res = lw(project, "resume", "prompt", "--session", "S2")
    assert res.returncode == 1 and "higher --max-iterations" in res.stderr
    res = lw(project, "resume", "prompt", "--session", "S2", "--max-iterations", "4")
    assert res.returncode == 0, res.stderr
    assert "reopened after MAX_ITERATIONS" in res.stdout and "max_iterations 2 → 4" in res.stdout
    answer = stop(project, session="S2")
    assert answer["decision"] == "block" and "iteration 4/4" in answer["systemMessage"]
    journal = [json.loads(x) for x in loop_file(project, "journal.jsonl").read_text().splitlines()]
    assert any(j["event"] == "ceilings" and j["changed"] == {"max_iterations": 4} for j in journal)


def test_resume_restores_counters_from_the_last_history_line(project):
    lw(project, "start", "--session", "S1", "goal")
    stop(project)
    stop(project)
    started = read(project, "budget.json")["started_at"]
    # The machine died after the history line but before budget.json was written.
    b = read(project, "budget.json")
    b["iterations_used"] = 0
    loop_file(project, "budget.json").write_text(json.dumps(b))
    lock = read(project, "loop.lock")
    lock["pid"] = 999_999_999
    loop_file(project, "loop.lock").write_text(json.dumps(lock))
    res = lw(project, "resume", "--session", "S2")
    assert res.returncode == 0, res.stderr
    assert (
        "Reaped stale lock for pid 999999999" in res.stdout
        and "counters restored from history line 2" in res.stdout
    )
    b = read(project, "budget.json")
    assert b["iterations_used"] == 2 and b["started_at"] == started
    assert "iteration 4/20" in stop(project, session="S2")["systemMessage"]


def test_budget_file_override(project, tmp_path):
    (project / "budgets").mkdir()
    target = project / "budgets" / "elsewhere.json"
    lw(project, "start", "--session", "S1", "--budget-file", str(target), "goal")
    stop(project)
    assert json.loads(target.read_text())["iterations_used"] == 1
    assert not loop_file(project, "budget.json").exists()
    again = lw(project, "start", "--session", "S9", "--budget-file", str(target), "goal")
    assert again.returncode == 1 and "already exists" in again.stderr


def test_redaction_from_claude_md(project):
    (project / "CLAUDE.md").write_text("### Loop Logging\n- redact: `sk-live-[a-z0-9]+`\n")
    lw(
        project,
        "start",
        "--session",
        "S1",
        "--max-iterations",
        "1",
        "--no-wrap-up",
        "deploy with key sk-live-abc123",
    )
    lw(project, "report", "--outcome", "failure", "--root-cause", "token sk-live-zzz9 rejected", session="S1")
    stop(project)
    for name in ("history.jsonl", "journal.jsonl", "report.md"):
        text = loop_file(project, name).read_text()
        assert "sk-live-" not in text, name
    assert "[REDACTED]" in loop_file(project, "report.md").read_text()


def test_rate_table_source_and_unknown_models(project, tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text(
        json.dumps(
            {
                "type": "assistant",
                "timestamp": "2026-11-22T10:00:00.000Z",
                "message": {
                    "id": "m1",
                    "model": "house-model-1",
                    "content": [{"type": "text", "text": "hi"}],
                    "usage": {"input_tokens": 1000, "output_tokens": 10},
                },
            }
        )
        + "\n"
    )
    lw(project, "start", "--session", "S1", "goal")
    answer = stop(project, transcript=t, message="hi")
    assert "no price is known for model(s) house-model-1" in answer["reason"]
    assert read(project, "budget.json")["unknown_models"] == ["house-model-1"]
    (project / "CLAUDE.md").write_text(
        "### Loop Cost Rates\n| model | input | output | cache_write | cache_read |\n|-|-|-|-|-|\n"
        "| house-model | 1 | 1 | 1 | 1 |\n"
    )
    with open(t, "a") as fh:
        fh.write(
            json.dumps(
                {
                    "type": "assistant",
                    "timestamp": "2026-11-22T10:01:00.000Z",
                    "message": {
                        "id": "m2",
                        "model": "house-model-1",
                        "content": [{"type": "text", "text": "again"}],
                        "usage": {"input_tokens": 1000, "output_tokens": 0},
                    },
                }
            )
            + "\n"
        )
    stop(project, transcript=t, message="again")
    b = read(project, "budget.json")
    assert b["rate_table_source"] == "CLAUDE.md Loop Cost Rates" and b["unknown_models"] == []
    assert abs(b["dollars_estimate"] - 2010 / 1_000_000) < 1e-9


def test_statusline(project):
    out = subprocess.run(
        [str(CLI), "statusline"],
        input=json.dumps({"session_id": "S1", "workspace": {"project_dir": str(project)}}),
        capture_output=True,
        text=True,
        env=lw_env(),
    )
    assert out.returncode == 0 and out.stdout == ""
    lw(project, "start", "--session", "S1", "--max-dollars", "5", "goal")

    def line(sid):
        return subprocess.run(
            [str(CLI), "statusline"],
            input=json.dumps({"session_id": sid, "workspace": {"project_dir": str(project)}}),
            capture_output=True,
            text=True,
            env=lw_env(),
        ).stdout.strip()

    assert line("S1") == "loopwright · prompt · iteration 1/20 · starting"
    stop(project)
    assert line("S1") == "loopwright · prompt · iteration 2/20 · 0/60 min · $0.00/$5.00"
    assert line("OTHER") == ""
    garbage = subprocess.run(
        [str(CLI), "statusline"], input="not json", capture_output=True, text=True, env=lw_env()
    )
    assert garbage.returncode == 0 and garbage.stdout == ""


def test_status_json_shows_spend_against_ceilings(project):
    lw(project, "start", "--session", "S1", "--max-dollars", "5", "--max-tokens", "1000", "goal")
    stop(project)
    (s,) = json.loads(lw(project, "status", "--json").stdout)["loops"]
    assert (s["dollars_estimate"], s["max_dollars"], s["max_tokens"]) == (0.0, 5.0, 1000)
    text = lw(project, "status").stdout
    assert "spend $0.00/$5.00" in text and "tokens 0/1000" in text


def test_resume_reconciles_worktrees_and_prs_once(project, tmp_path):
    subprocess.run(
        ["git", "-C", str(project), "commit", "-q", "--allow-empty", "-m", "base"],
        check=True,
        env={
            **lw_env(),
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@x",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@x",
        },
    )
    lw(project, "start", "--session", "S1", "goal")
    lw(
        project,
        "report",
        "--outcome",
        "success",
        "--tracked-pr",
        "142:feature/x:abc1234:def5678:merged",
        "--tracked-pr",
        "7:feature/y:abc1234:def5678:open",
        "--worktree",
        "wt/gone:feature/z:abc1234",
        session="S1",
    )
    stop(project)
    lock = read(project, "loop.lock")
    lock["pid"] = 999_999_999
    loop_file(project, "loop.lock").write_text(json.dumps(lock))
    res = lw(project, "resume", "--session", "S2")
    assert res.returncode == 0, res.stderr
    assert "PR #142 was already merged at prior iteration end — not re-attaching" in res.stdout
    assert "PR #7: the remote head of feature/y could not be read" in res.stdout
    assert "worktree wt/gone is missing; not re-attached" in res.stdout


def test_resume_divergence_gate_fires_when_a_pr_branch_moved(project, tmp_path):
    genv = {
        **lw_env(),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }

    def g(*a):
        cmd = ["git", "-C", str(project), *a]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, env=genv).stdout

    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    g("commit", "-q", "--allow-empty", "-m", "base")
    g("remote", "add", "origin", str(origin))
    g("push", "-q", "origin", "HEAD:refs/heads/feature/y")
    pushed = g("rev-parse", "HEAD").strip()
    lw(project, "start", "--session", "S1", "goal")
    lw(
        project,
        "report",
        "--outcome",
        "success",
        "--tracked-pr",
        f"7:feature/y:abc1234:{pushed[:10]}:open",
        session="S1",
    )
    stop(project)
    g("commit", "-q", "--allow-empty", "-m", "someone force-pushed")
    g("push", "-q", "-f", "origin", "HEAD:refs/heads/feature/y")
    lock = read(project, "loop.lock")
    lock["pid"] = 999_999_999
    loop_file(project, "loop.lock").write_text(json.dumps(lock))
    res = lw(project, "resume", "--session", "S2")
    assert "resume-divergence gate decides" in res.stdout
    gate = json.loads(lw(project, "gate", "list", "--json", session="S2").stdout)["gates"][0]
    assert gate["name"] == "resume-divergence"
    assert (
        gate["question"]
        == "PR #7 has diverged since the prior iteration crashed — re-attach, skip, or stop the loop?"
    )
    assert 'Gate "resume-divergence"' in stop(project, session="S2")["reason"]
    lw(project, "gate", "answer", "resume-divergence", "stop", session="S2")
    assert "GATE_STOP:resume-divergence" in stop(project, session="S2")["systemMessage"]
