"""The hook launchers as Claude Code runs them: separate processes, JSON on
stdin, JSON (or nothing) on stdout, always exit 0."""

import json
import os
import subprocess
import venv

import pytest

from conftest import REPO, lw_env

STOP = REPO / "hooks" / "stop"
PROMPT = REPO / "hooks" / "prompt"
CLI = REPO / "bin" / "loopwright"


def run_hook(hook, project, payload, **env):
    data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    out = subprocess.run(
        [str(hook)],
        input=data if isinstance(data, bytes) else data.encode(),
        capture_output=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project), **env),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def start_loop(project, *args):
    out = subprocess.run(
        [str(CLI), "-C", str(project), "start", *args],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def stop_event(project, session="S1", message="working", active=True, transcript=None):
    return {
        "session_id": session,
        "transcript_path": str(transcript or project / "none.jsonl"),
        "cwd": str(project),
        "hook_event_name": "Stop",
        "stop_hook_active": active,
        "last_assistant_message": message,
    }


def test_fast_path_without_loops_prints_nothing_and_creates_nothing(project):
    assert run_hook(STOP, project, stop_event(project)) is None
    assert not (project / ".loopwright").exists()


def test_fast_path_with_only_ended_loops(project):
    start_loop(project, "--session", "S1", "--max-iterations", "1", "--no-wrap-up", "goal")
    assert run_hook(STOP, project, stop_event(project))["systemMessage"].startswith(
        "loopwright · prompt ended"
    )
    assert not any((project / ".loopwright" / "active").iterdir())
    assert run_hook(STOP, project, stop_event(project)) is None


@pytest.mark.parametrize("payload", [b"", b"garbage", b"[1,2]", b'{"no_session": 1}', b"\xff\xfe"])
def test_bad_stdin_never_blocks(project, payload):
    start_loop(project, "--session", "S1", "goal")
    answer = run_hook(STOP, project, payload)
    assert answer is not None and "decision" not in answer
    assert "could not read" in answer["systemMessage"]
    # The loop is untouched.
    assert json.loads((project / ".loopwright/loops/prompt/budget.json").read_text())["iterations_used"] == 0


def test_oversized_stdin_never_blocks(project):
    start_loop(project, "--session", "S1", "goal")
    big = json.dumps(stop_event(project, message="x" * (17 * 1024 * 1024)))
    answer = run_hook(STOP, project, big)
    assert "decision" not in answer and "larger than" in answer["systemMessage"]


def test_foreign_session_passes_through_silently(project):
    start_loop(project, "--session", "S1", "goal")
    assert run_hook(STOP, project, stop_event(project, session="S2")) is None
    journal = (project / ".loopwright/loops/prompt/journal.jsonl").read_text()
    assert "S2" not in journal


def test_owner_session_is_blocked_with_the_next_prompt(project):
    start_loop(project, "--session", "S1", "--completion-promise", "DONE", "goal text")
    answer = run_hook(STOP, project, stop_event(project))
    assert answer["decision"] == "block" and "goal text" in answer["reason"]
    assert "iteration 2/20" in answer["systemMessage"]


def test_unowned_loop_waits_to_be_attached_whatever_a_session_shows(project):
    out = start_loop(project, "goal")  # no session id known
    assert "/loopwright:resume prompt" in out
    nonce = next(line.split(": ")[1] for line in out.splitlines() if line.startswith("loop-nonce:"))
    assert run_hook(STOP, project, stop_event(project, session="S9", message="hello")) is None
    # Quoting the nonce (a pasted line, `cat loop.json`, the agent repeating it) adopts nothing.
    assert run_hook(STOP, project, stop_event(project, session="S7", message=f"I see {nonce}")) is None
    cfg = json.loads((project / ".loopwright/loops/prompt/loop.json").read_text())
    assert cfg["owner_session"] is None
    attach = subprocess.run(
        [str(CLI), "-C", str(project), "resume", "prompt", "--session", "S7"],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert attach.returncode == 0, attach.stderr
    assert run_hook(STOP, project, stop_event(project, session="S7"))["decision"] == "block"


def test_corrupt_budget_is_moved_aside_and_the_loop_stops_safely(project):
    start_loop(project, "--session", "S1", "goal")
    budget = project / ".loopwright/loops/prompt/budget.json"
    budget.write_text("{torn")
    answer = run_hook(STOP, project, stop_event(project))
    assert "decision" not in answer and "corrupt" in answer["systemMessage"]
    moved = list(budget.parent.glob("budget.json.corrupt-*"))
    assert len(moved) == 1 and moved[0].read_text() == "{torn"
    cfg = json.loads((budget.parent / "loop.json").read_text())
    assert cfg["status"] == "ended" and cfg["outcome"] == "STOPPED:corrupt-state"


def test_unreadable_loop_json_is_never_acted_on(project):
    """loop.json that does not parse cannot be shown to be this user's: the hook
    passes through and leaves it as it is; status names it."""
    start_loop(project, "--session", "S1", "goal")
    cfg = project / ".loopwright/loops/prompt/loop.json"
    cfg.write_text("not json")
    assert run_hook(STOP, project, stop_event(project)) is None
    assert cfg.read_text() == "not json"
    res = subprocess.run(
        [str(CLI), "-C", str(project), "status"], capture_output=True, text=True, env=lw_env()
    )
    assert res.returncode == 0 and "prompt: UNTRUSTED" in res.stdout and "unreadable" in res.stdout


def test_own_loop_json_of_the_wrong_shape_is_moved_aside_and_the_loop_stops(project):
    import sys

    sys.path.insert(0, str(REPO / "lib"))
    from loopwright.state import loops

    start_loop(project, "--session", "S1", "goal")
    paths = loops.LoopPaths(project / ".loopwright", "prompt")
    cfg = json.loads(paths.config.read_text())
    loops.save_config(paths, dict(cfg, max_iterations="many"))  # signed, so ours, but wrong
    answer = run_hook(STOP, project, stop_event(project))
    assert "decision" not in answer and "loop.json is corrupt" in answer["systemMessage"]
    assert list(paths.dir.glob("loop.json.corrupt-*"))
    assert run_hook(STOP, project, stop_event(project)) is None  # no longer active


def test_stop_file_ends_the_loop(project):
    start_loop(project, "--session", "S1", "goal")
    (project / ".loopwright/loops/prompt/stop").write_text(
        json.dumps({"reason": "timeout", "timestamp": "x"})
    )
    answer = run_hook(STOP, project, stop_event(project))
    assert "STOPPED:timeout" in answer["systemMessage"]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """An interpreter without loopwright's packages."""
    d = tmp_path_factory.mktemp("bare")
    venv.EnvBuilder(with_pip=False).create(d)
    return str(d / "bin" / "python")


def test_the_owning_stop_needs_only_the_standard_library(project, bare_python):
    """The hot path imports no third-party package: a loop runs before SessionStart
    has installed them (and pays nothing to import them)."""
    start_loop(project, "--session", "S1", "goal")
    answer = run_hook(STOP, project, stop_event(project), LOOPWRIGHT_PYTHON=bare_python)
    assert answer["decision"] == "block" and "iteration 2/20" in answer["systemMessage"]


def test_a_stop_that_needs_a_missing_package_says_so_and_lets_the_session_stop(project, bare_python):
    start_loop(project, "--session", "S1", "goal")
    lock = project / ".loopwright/loops/prompt/loop.lock"
    held = json.loads(lock.read_text())
    held.update(owner="session:OTHER", session="OTHER", pid=os.getpid())  # a live holder: psutil must look
    lock.write_text(json.dumps(held))
    answer = run_hook(STOP, project, stop_event(project), LOOPWRIGHT_PYTHON=bare_python)
    assert "decision" not in answer
    assert "Python package that is missing (psutil)" in answer["systemMessage"]


def test_missing_packages_without_a_loop_cost_nothing(project, bare_python):
    assert run_hook(STOP, project, stop_event(project), LOOPWRIGHT_PYTHON=bare_python) is None


def test_prompt_hook_ignores_ordinary_prompts(project):
    payload = {
        "session_id": "S1",
        "cwd": str(project),
        "hook_event_name": "UserPromptSubmit",
        "prompt": "hello /loopwright:loop x",
    }
    assert run_hook(PROMPT, project, payload) is None
    assert not (project / ".loopwright").exists()


def test_prompt_hook_starts_a_loop_from_the_raw_text(project, tmp_path):
    goal = f"quote \" and ' and $(touch {tmp_path}/pwned) `touch {tmp_path}/pwned2`; a | b\nline two"
    payload = {
        "session_id": "S1",
        "cwd": str(project),
        "hook_event_name": "UserPromptSubmit",
        "prompt": f"/loopwright:loop {goal} --max-iterations 4",
    }
    answer = run_hook(PROMPT, project, payload)
    ctx = answer["hookSpecificOutput"]["additionalContext"]
    assert 'loop "prompt" started' in ctx
    cfg = json.loads((project / ".loopwright/loops/prompt/loop.json").read_text())
    assert cfg["prompt"] == goal and cfg["max_iterations"] == 4 and cfg["owner_session"] == "S1"
    assert not list(tmp_path.glob("pwned*"))


def test_prompt_hook_refuses_bad_options_with_one_line(project):
    payload = {"session_id": "S1", "cwd": str(project), "prompt": '/loopwright:loop "x" --max-iterations abc'}
    answer = run_hook(PROMPT, project, payload)
    assert answer["decision"] == "block"
    assert answer["reason"] == "loopwright: error: --max-iterations needs a whole number, got 'abc'"
    assert not (project / ".loopwright" / "loops" / "prompt").exists()


def test_prompt_hook_refuses_a_second_loop_in_the_same_session(project):
    payload = {"session_id": "S1", "cwd": str(project), "prompt": '/loopwright:loop "one"'}
    assert "additionalContext" in run_hook(PROMPT, project, payload)["hookSpecificOutput"]
    again = run_hook(PROMPT, project, dict(payload, prompt='/loopwright:loop "two"'))
    assert again["decision"] == "block" and "already runs loop prompt" in again["reason"]


def test_prompt_hook_cancel(project):
    run_hook(PROMPT, project, {"session_id": "S1", "cwd": str(project), "prompt": '/loopwright:loop "one"'})
    answer = run_hook(
        PROMPT, project, {"session_id": "S1", "cwd": str(project), "prompt": "/loopwright:cancel"}
    )
    assert "CANCELLED" in answer["hookSpecificOutput"]["additionalContext"]
    assert (project / ".loopwright/loops/prompt/cancelled").exists()
    assert run_hook(STOP, project, stop_event(project)) is None
