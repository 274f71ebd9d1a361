"""Completion is checked, not just claimed: the task gate, the --verify check,
backprop directives, and the PostToolUseFailure hook."""

import json
import subprocess
import sys

from conftest import REPO, hook_stop, lw_env
from loopwright import modes
from loopwright.core import router
from loopwright.state import tasks, verify
from loopwright.state.transcript import Cursor, Increment

CLI = REPO / "bin" / "loopwright"
TOOL_FAILURE = REPO / "hooks" / "tool-failure"
T0 = 1_800_000_000.0


def loop(**kw):
    d = {
        "name": "prompt",
        "mode": "prompt",
        "prompt": "goal",
        "completion_promise": "DONE",
        "max_iterations": 10,
        "max_minutes": 60,
        "max_dollars": 25.0,
        "owner_session": "S",
        "started_at": "2027-01-15T08:00:00Z",
        "status": "active",
        # These tests are about the rules before a wrap-up turn; tests/core/test_wrapup.py has it.
        "wrap_up": False,
    }
    d.update(kw)
    return d


def registry(*specs):
    lines = []
    for i, (text, status) in enumerate(specs, 1):
        e = {
            "id": f"task-{i}",
            "type": "task",
            "text": text,
            "status": status,
            "created": f"2027-01-15T08:00:0{i}Z",
        }
        if status == "done":
            e["completed"] = f"2027-01-15T08:10:0{i}Z"
        lines.append(json.dumps(e).encode())
    return tasks.materialize_lines(lines)


def snap(lp, message="working", **kw):
    """A Stop's snapshot, with the tasks section rendered as the shell renders it."""
    reg = kw.get("tasks")
    if reg is not None:
        kw.setdefault("tasks_text", tasks.render(reg, tasks.DEFAULT_PROMPT_BUDGET))
        kw.setdefault("tasks_pressure", tasks.pressure_line(reg) if reg.total else None)
    turn = Increment(cursor=Cursor(path="/t", offset=1), used_tool=True)
    return router.Snapshot(
        mode=modes.for_loop(lp),
        now=T0 + 60,
        session_id="S",
        loop=lp,
        budget=router.initial_budget(lp),
        turn=turn,
        last_message=message,
        stop_hook_active=True,
        **kw,
    )


CLAIM = "all done\n<promise>DONE</promise>"


def test_a_claim_with_open_tasks_is_rejected_and_names_them():
    reg = registry(("write parser", "done"), ("write tests", "open"), ("docs", "open"))
    d = router.decide(snap(loop(), CLAIM, tasks=reg))
    assert d.action == router.CONTINUE
    assert {"event": "task.gate", "open": ["task-2", "task-3"], "open_count": 2} in d.journal
    assert "task-2, task-3" in d.prompt and "Tasks: 2 open, 1 done (3 total)" in d.prompt
    assert "- [ ] [task-2] write tests" in d.prompt and "- [x] [task-1] write parser (done)" in d.prompt
    assert d.history["completion_rejected"] == "tasks"


def test_a_claim_with_all_tasks_done_is_accepted():
    d = router.decide(snap(loop(), CLAIM, tasks=registry(("a", "done"))))
    assert d.outcome == router.LOOP_DONE


def test_open_tasks_do_not_stop_the_budget_from_ending_the_loop():
    lp = loop(max_iterations=1)
    d = router.decide(snap(lp, CLAIM, tasks=registry(("a", "open"))))
    assert d.outcome == router.MAX_ITERATIONS


def test_verification_is_needed_only_for_a_claim_without_open_tasks():
    lp = loop(verify="pytest -q")
    assert router.needs_verification(snap(lp, CLAIM))
    assert not router.needs_verification(snap(lp, "not yet"))
    assert not router.needs_verification(snap(lp, CLAIM, tasks=registry(("a", "open"))))
    assert not router.needs_verification(snap(loop(), CLAIM))


def test_failed_check_rejects_and_opens_the_next_prompt_with_backprop():
    lp = loop(verify="pytest -q")
    result = {
        "command": "pytest -q",
        "exit_code": 1,
        "timed_out": False,
        "seconds": 1.5,
        "output_tail": "E   assert 2 == 3\n1 failed",
    }
    d = router.decide(snap(lp, CLAIM, verify_result=result))
    assert d.action == router.CONTINUE and d.history["completion_rejected"] == "verify"
    assert d.prompt.startswith("BACKPROP: The completion check failed")
    assert "Command: pytest -q (exit 1, 1.5 s)" in d.prompt and "assert 2 == 3" in d.prompt
    assert d.backprop_new["source"] == "verify" and d.backprop_delivered is d.backprop_new
    assert "completion check failed" in d.system_message


def test_passed_check_ends_done():
    lp = loop(verify="true")
    d = router.decide(
        snap(
            lp,
            CLAIM,
            verify_result={
                "command": "true",
                "exit_code": 0,
                "timed_out": False,
                "seconds": 0.1,
                "output_tail": "",
            },
        )
    )
    assert d.outcome == router.LOOP_DONE and "check passed" in d.reason


def test_pending_backprop_from_a_tool_failure_is_delivered():
    pending = {
        "source": "post-tool",
        "command": "npm test",
        "exit_code": 1,
        "output_tail": "FAIL src/a.test.js",
    }
    d = router.decide(snap(loop(), backprop_pending=pending))
    assert d.prompt.startswith("BACKPROP: A test run failed during the last iteration.")
    assert d.backprop_delivered == pending and d.backprop_new is None


def test_dependency_cycle_stops_the_loop():
    lines = [
        json.dumps(
            {
                "id": "task-1",
                "type": "task",
                "text": "a",
                "status": "open",
                "created": "x",
                "depends_on": ["task-2"],
            }
        ).encode(),
        json.dumps(
            {
                "id": "task-2",
                "type": "task",
                "text": "b",
                "status": "open",
                "created": "y",
                "depends_on": ["task-1"],
            }
        ).encode(),
    ]
    d = router.decide(snap(loop(), tasks=tasks.materialize_lines(lines)))
    assert d.outcome == router.DEPENDENCY_CYCLE
    assert "Dependency cycle detected: task-1 → task-2 → task-1" in d.reason


def test_verify_runner_times_out_and_caps_output(tmp_path):
    res = verify.run(
        f"{sys.executable} -c \"print('x'*10000); import time; time.sleep(3600)\"", tmp_path, timeout=1.0
    )
    assert res["timed_out"] and res["exit_code"] is None and not verify.passed(res)
    assert len(res["output_tail"]) <= verify.TAIL_CHARS
    ok = verify.run("echo fine; exit 0", tmp_path)
    assert verify.passed(ok) and ok["output_tail"].strip() == "fine"
    bad = verify.run("exit 4", tmp_path)
    assert bad["exit_code"] == 4 and not verify.passed(bad)


# --- through the processes ------------------------------------------------------------------------


def lw(project, *args, session="S1"):
    return subprocess.run(
        [str(CLI), "-C", str(project), *args],
        capture_output=True,
        text=True,
        env=lw_env(CLAUDE_CODE_SESSION_ID=session),
        timeout=60,
    )


def stop(project, message=CLAIM):
    return hook_stop(project, message=message)


def test_task_cli_inside_a_loop_uses_the_loops_file_and_the_hook_sees_it(project):
    lw(project, "start", "--session", "S1", "--completion-promise", "DONE", "goal")
    assert lw(project, "task", "add", "write", "the", "parser").stdout.strip() == "task-1"
    assert (project / ".loopwright/loops/prompt/tasks.jsonl").exists()
    answer = stop(project)
    assert (
        answer["decision"] == "block"
        and "task-1" in answer["reason"]
        and "Tasks: 1 open, 0 done (1 total)" in answer["reason"]
    )
    assert lw(project, "task", "complete", "task-1").stdout.strip() == "task-1 done"
    assert "LOOP_DONE" in stop(project)["systemMessage"]
    # Outside any loop, the project's own registry.
    out = lw(project, "task", "add", "later", session="NOBODY")
    assert out.stdout.strip() == "task-1" and (project / ".loopwright/tasks.jsonl").exists()


def test_tasks_file_from_env_and_config(project, tmp_path):
    (project / ".loopwright.json").write_text(json.dumps({"tasks_file": "work/tasks.jsonl"}))
    (project / "work").mkdir()
    assert lw(project, "task", "add", "x").returncode == 0
    assert (project / "work/tasks.jsonl").exists()
    env_file = tmp_path / "abs.jsonl"
    res = subprocess.run(
        [str(CLI), "-C", str(project), "task", "add", "y"],
        capture_output=True,
        text=True,
        env=lw_env(LOOPWRIGHT_TASKS_FILE=str(env_file)),
    )
    assert res.returncode == 0 and env_file.exists()
    rel = subprocess.run(
        [str(CLI), "-C", str(project), "task", "list"],
        capture_output=True,
        text=True,
        env=lw_env(LOOPWRIGHT_TASKS_FILE="relative.jsonl"),
    )
    assert rel.returncode == 1 and "must be an absolute path" in rel.stderr
    (project / ".loopwright.json").write_text("{broken")
    res = lw(project, "task", "list", session="NOBODY")
    assert res.returncode == 0 and ".loopwright.json is not valid JSON" in res.stderr


def test_task_list_json_and_errors(project):
    lw(project, "task", "add", "a", session="NOBODY")
    lw(project, "task", "add", "b", session="NOBODY")
    lw(project, "task", "complete", "task-2", session="NOBODY")
    data = json.loads(lw(project, "task", "list", "--json", session="NOBODY").stdout)
    assert [t["id"] for t in data["open"]] == ["task-1"] and [t["id"] for t in data["done"]] == ["task-2"]
    again = lw(project, "task", "complete", "task-2", session="NOBODY")
    assert again.returncode == 0 and "already done" in again.stdout
    gone = lw(project, "task", "remove", "task-1", session="NOBODY")
    assert gone.stdout.strip() == "task-1 removed (manual)"
    missing = lw(project, "task", "update", "task-1", "x", session="NOBODY")
    assert (
        missing.returncode == 1
        and missing.stderr.strip()
        == "loopwright: error: no task task-1 (it may have been removed); see loopwright task list"
    )


def test_verify_through_the_hook_writes_the_log(project):
    (project / "check.sh").write_text("test -f ok.txt || { echo 'CHECK: ok.txt missing'; exit 2; }\n")
    lw(project, "start", "--session", "S1", "--completion-promise", "DONE", "--verify", "sh check.sh", "goal")
    answer = stop(project)
    assert answer["reason"].startswith("BACKPROP: The completion check failed")
    assert "CHECK: ok.txt missing" in answer["reason"] and "exit 2" in answer["reason"]
    log = (project / ".loopwright/loops/prompt/backprop-log.md").read_text()
    assert "`sh check.sh` (exit 2)" in log
    assert not (project / ".loopwright/loops/prompt/backprop-pending.json").exists()
    (project / "ok.txt").write_text("")
    assert "LOOP_DONE" in stop(project)["systemMessage"]


def tool_failure(project, command, error, session="S1"):
    payload = {
        "session_id": session,
        "cwd": str(project),
        "hook_event_name": "PostToolUseFailure",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "error": error,
        "is_interrupt": False,
    }
    out = subprocess.run(
        [str(TOOL_FAILURE)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project)),
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout == ""


def test_failed_test_run_raises_the_backprop_flag(project):
    pending = project / ".loopwright/loops/prompt/backprop-pending.json"
    tool_failure(project, "pytest -q", "Exit code 1\nboom")  # no loop: nothing happens
    assert not (project / ".loopwright").exists()
    lw(project, "start", "--session", "S1", "goal")
    tool_failure(project, "ls /nonexistent", "Exit code 2\nno such file")
    assert not pending.exists()
    tool_failure(
        project,
        "cd src && python -m pytest -q tests/",
        "Exit code 1\nFAILED tests/test_a.py::test_x",
        session="OTHER",
    )
    assert not pending.exists()
    tool_failure(
        project, "cd src && python -m pytest -q tests/", "Exit code 1\nFAILED tests/test_a.py::test_x"
    )
    data = json.loads(pending.read_text())
    assert data["exit_code"] == 1 and "FAILED tests/test_a.py::test_x" in data["output_tail"]
    answer = stop(project, message="working")
    assert answer["reason"].startswith("BACKPROP: A test run failed during the last iteration.")
    assert not pending.exists()
    assert "BACKPROP" not in stop(project, message="working")["reason"]
