"""Exact spend when the transcript lags behind the Stop hook (as it does on a busy
machine): the hook waits while the lag is demonstrable, counts late what is still
missing, and never ends a loop without its final turn's usage."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from conftest import REPO, lw_env

STOP = REPO / "hooks" / "stop"
CLI = REPO / "bin" / "loopwright"


def assistant(i: int, text: str, tokens: int) -> str:
    return (
        json.dumps(
            {
                "type": "assistant",
                "timestamp": f"2026-11-22T10:00:{i:02d}Z",
                "message": {
                    "id": f"m{i}",
                    "model": "claude-sonnet-4-5",
                    "role": "assistant",
                    "content": [{"type": "text", "text": text}],
                    "usage": {"input_tokens": tokens, "output_tokens": 1},
                },
            }
        )
        + "\n"
    )


def stop(project, transcript, message: str, **env) -> dict | None:
    payload = {
        "session_id": "S1",
        "transcript_path": str(transcript),
        "cwd": str(project),
        "stop_hook_active": True,
        "last_assistant_message": message,
    }
    out = subprocess.run(
        [str(STOP)],
        input=json.dumps(payload).encode(),
        capture_output=True,
        timeout=120,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project), LOOPWRIGHT_CATCH_UP_SECONDS="0.3", **env),
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def start(project, *args):
    res = subprocess.run(
        [str(CLI), "-C", str(project), "start", "--session", "S1", *args, "goal"],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert res.returncode == 0, res.stderr


def test_usage_that_lands_after_a_stop_is_counted_at_the_next_one(project, tmp_path):
    start(project)
    t = tmp_path / "t.jsonl"
    t.write_text(assistant(0, "first", 1000))
    assert stop(project, t, "second")["decision"] == "block"  # "second" has not reached the transcript
    with open(t, "a") as fh:
        fh.write(assistant(1, "second", 2000))
    with open(t, "a") as fh:
        fh.write(assistant(2, "third", 4000))
    assert stop(project, t, "third")["decision"] == "block"
    budget = json.loads((project / ".loopwright/loops/prompt/budget.json").read_text())
    assert budget["tokens_in"] == 7000  # nothing lost: the late line counted in iteration 2
    history = [
        json.loads(x) for x in (project / ".loopwright/loops/prompt/history.jsonl").read_text().splitlines()
    ]
    assert [h["tokens_in_this_iter"] for h in history] == [1000, 6000]


def test_a_stop_waits_while_the_final_message_is_on_its_way(project, tmp_path):
    start(project)
    t = tmp_path / "t.jsonl"
    t.write_text("")
    payload = {
        "session_id": "S1",
        "transcript_path": str(t),
        "cwd": str(project),
        "stop_hook_active": True,
        "last_assistant_message": "done now",
    }
    proc = subprocess.Popen(
        [str(STOP)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project), LOOPWRIGHT_CATCH_UP_SECONDS="60"),
    )
    proc.stdin.write(json.dumps(payload).encode())
    proc.stdin.close()
    # The hook is waiting for the transcript; the message lands while it waits.
    wait_for(lambda: (project / ".loopwright/loops/prompt/budget.json").exists(), 30, "the loop files")
    with open(t, "a") as fh:
        fh.write(assistant(0, "done now", 1234))
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 0
    assert json.loads(out)["decision"] == "block"
    budget = json.loads((project / ".loopwright/loops/prompt/budget.json").read_text())
    assert budget["tokens_in"] == 1234  # counted in iteration 1, where it belongs


def _stop_in_background(project, transcript, message):
    payload = {
        "session_id": "S1",
        "transcript_path": str(transcript),
        "cwd": str(project),
        "stop_hook_active": True,
    }
    if message is not None:
        payload["last_assistant_message"] = message
    proc = subprocess.Popen(
        [str(STOP)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project), LOOPWRIGHT_CATCH_UP_SECONDS="60", LOOPWRIGHT_DEBUG="1"),
    )
    proc.stdin.write(json.dumps(payload).encode())
    proc.stdin.close()
    # The hook has read the transcript and found it behind: only now does the line land.
    log = project / ".loopwright" / "debug.log"
    wait_for(lambda: log.exists() and "transcript lags" in log.read_text(), 60, "the hook to wait")
    return proc


def _finish(proc, project, tokens):
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 0
    assert json.loads(out)["decision"] == "block"
    budget = json.loads((project / ".loopwright/loops/prompt/budget.json").read_text())
    assert budget["tokens_in"] == tokens  # counted in iteration 1, where it belongs


def test_a_stop_waits_for_a_transcript_claude_code_has_not_created_yet(project, tmp_path):
    start(project)
    t = tmp_path / "t.jsonl"  # does not exist when the hook starts
    proc = _stop_in_background(project, t, "first words")
    t.write_text(assistant(0, "first words", 2345))
    _finish(proc, project, 2345)


def test_a_stop_without_the_last_message_still_waits_for_an_assistant_line(project, tmp_path):
    """Whatever the hook input says, a Stop follows a model response: a transcript
    holding none yet is behind."""
    start(project)
    t = tmp_path / "t.jsonl"
    t.write_text(json.dumps({"type": "user", "message": {"role": "user", "content": "go"}}) + "\n")
    proc = _stop_in_background(project, t, None)
    with open(t, "a") as fh:
        fh.write(assistant(0, "anything", 777))
    _finish(proc, project, 777)


def test_a_loop_never_ends_without_its_final_turns_usage(project, tmp_path):
    start(project, "--max-iterations", "1", "--no-wrap-up")
    t = tmp_path / "t.jsonl"
    t.write_text("")
    answer = stop(project, t, "the last words")
    assert "decision" not in answer and "is ending (MAX_ITERATIONS)" in answer["systemMessage"]
    loop_dir = project / ".loopwright/loops/prompt"
    # Claude Code writes the final message after the hook has answered.
    with open(t, "a") as fh:
        fh.write(assistant(0, "the last words", 4321))
    cfg = wait_for(
        lambda: (c := json.loads((loop_dir / "loop.json").read_text()))["status"] == "ended" and c,
        90,
        "the deferred final tick",
    )
    assert cfg["outcome"] == "MAX_ITERATIONS"
    budget = json.loads((loop_dir / "budget.json").read_text())
    history = [json.loads(x) for x in (loop_dir / "history.jsonl").read_text().splitlines()]
    assert budget["tokens_in"] == 4321 and history[-1]["tokens_in_this_iter"] == 4321
    assert [h["iteration"] for h in history] == [1]
    assert "in 4321" in (loop_dir / "report.md").read_text()


def test_the_first_stop_on_a_1_gib_transcript_reads_only_where_the_loop_started(project, tmp_path):
    """The loop was started from a shell (no transcript known), and its nonce sits at the top
    of a 1 GiB transcript: the first Stop reads a bounded window, not the gigabyte."""
    res = subprocess.run(
        [str(CLI), "-C", str(project), "start", "--session", "S1", "goal"],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    nonce = next(line.split(": ")[1] for line in res.stdout.splitlines() if line.startswith("loop-nonce:"))
    t = tmp_path / "huge.jsonl"
    with open(t, "wb") as fh:  # sparse: costs no disk
        fh.write(
            (json.dumps({"type": "user", "message": {"content": f"loop-nonce: {nonce}"}}) + "\n").encode()
        )
        fh.write(assistant(0, "old turn before the hole", 999_999).encode())
        fh.truncate(1024**3)
        fh.seek(0, 2)
        fh.write(b"\n" + assistant(1, "the turn", 50).encode())
    # Forked from a fresh interpreter: Linux carries a peak RSS across exec (pytest's would show).
    code = (
        "import os, resource, subprocess, sys\n"
        "data = sys.stdin.buffer.read()\n"
        "if os.fork() == 0:\n"
        "    subprocess.run(sys.argv[1:], input=data, stdout=sys.stdout, check=True)\n"
        "    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr, flush=True)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    )
    payload = {
        "session_id": "S1",
        "transcript_path": str(t),
        "cwd": str(project),
        "stop_hook_active": True,
        "last_assistant_message": "the turn",
    }
    out = subprocess.run(
        [sys.executable, "-c", code, str(STOP)],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project)),
        timeout=120,
    )
    assert json.loads(out.stdout)["decision"] == "block"
    assert int(out.stderr.split()[-1]) < 200 * 1024  # peak RSS in KiB: nowhere near the file's size
    budget = json.loads((project / ".loopwright/loops/prompt/budget.json").read_text())
    assert budget["tokens_in"] == 50  # only the turn after the loop started
