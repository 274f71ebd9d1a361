"""Crash consistency of one tick: a SIGKILL between (or inside) any two writes of a
Stop leaves no duplicate or missing history line, counters that agree with the
history and the ledger, and no temp file once the next Stop has run.

Each case runs the real hook code in a child process that kills itself with
SIGKILL at the Nth write of the tick (N = every write point in turn, including
between a temp file's fsync and its rename), then runs one normal Stop, then
checks the invariants. Deterministic: nothing depends on timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import LIB, REPO, lw_env

CLI = REPO / "bin" / "loopwright"

CHILD = r"""
import json, os, signal, sys
sys.path.insert(0, sys.argv[1])
from loopwright.state import store
from loopwright.events import stop as hook
kill_at, count = int(sys.argv[4]), [0]

def wrap(fn):
    def inner(*a, **k):
        count[0] += 1
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return fn(*a, **k)
    return inner

store.write_bytes_atomic = wrap(store.write_bytes_atomic)
store.append_jsonl_many = wrap(store.append_jsonl_many)
store.append_text = wrap(store.append_text)
os.replace = wrap(os.replace)  # between a temp file's fsync and its rename
raw = json.dumps({"session_id": "S1", "transcript_path": sys.argv[2], "cwd": sys.argv[3],
                  "stop_hook_active": True, "last_assistant_message": "working"}).encode()
hook.handle(raw)
"""


def usage_line(i: int) -> str:
    return (
        json.dumps(
            {
                "type": "assistant",
                "timestamp": f"2026-11-22T10:{i // 60:02d}:{i % 60:02d}Z",
                "message": {
                    "id": f"m{i}",
                    "model": "claude-sonnet-4-5",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "working"}],
                    "usage": {"input_tokens": 100 + i, "output_tokens": 10},
                },
            }
        )
        + "\n"
    )


def tick(project, transcript, kill_at: int = 0) -> int:
    env = lw_env(CLAUDE_PROJECT_DIR=str(project))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(LIB), str(transcript), str(project), str(kill_at)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    return proc.returncode


def check(loop_dir, appended_tokens: list[int]) -> tuple[int, int]:
    history = [json.loads(x) for x in (loop_dir / "history.jsonl").read_text().splitlines() if x.strip()]
    budget = json.loads((loop_dir / "budget.json").read_text())
    iterations = [h["iteration"] for h in history]
    assert iterations == list(range(1, len(history) + 1)), iterations
    assert budget["iterations_used"] == len(history)
    assert budget["tokens_in"] == sum(h["tokens_in_this_iter"] for h in history)
    # Every line appended before the last Stop was counted exactly once, in some iteration.
    assert budget["tokens_in"] in {sum(appended_tokens[:k]) for k in range(len(appended_tokens) + 1)}
    ledger = json.loads((loop_dir / "token-ledger.json").read_text())
    assert ledger["iteration"] == len(history)
    assert ledger["sessions"]["S1"]["iterations"] == len(history)
    assert ledger["sessions"]["S1"]["tokens_in"] == budget["tokens_in"]
    ticks = [
        j.get("tick")
        for j in map(json.loads, (loop_dir / "journal.jsonl").read_text().splitlines())
        if j.get("event") == "route"
    ]
    assert len(ticks) == len(set(ticks)) == len(history)  # one route line per iteration, never twice
    return len(history), budget["tokens_in"]


@pytest.mark.slow
def test_a_kill_at_every_write_of_a_tick_leaves_consistent_records(project, tmp_path):
    out = subprocess.run(
        [str(CLI), "-C", str(project), "start", "--session", "S1", "--max-iterations", "1000", "goal"],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    loop_dir = project / ".loopwright/loops/prompt"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("")
    appended: list[int] = []
    killed = 0
    line = 0
    for kill_at in range(1, 16):
        for _ in range(2):  # a killed tick, then a clean one
            with open(transcript, "a") as fh:
                fh.write(usage_line(line))
            appended.append(100 + line)
            line += 1
            code = tick(project, transcript, kill_at if _ == 0 else 0)
            killed += code == -9
        check(loop_dir, appended)
        assert not [p.name for p in loop_dir.iterdir() if ".tmp-" in p.name], "a stale temp file was left"
    assert killed >= 8  # the kill points really fell inside ticks (a tick makes about ten writes)
    # Nothing was lost: the clean last tick has counted every line ever appended.
    assert check(loop_dir, appended)[1] == sum(appended)


def test_a_tick_committed_but_cut_short_is_finished_by_cancel(project, tmp_path):
    out = subprocess.run(
        [str(CLI), "-C", str(project), "start", "--session", "S1", "goal"],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(usage_line(0))
    assert tick(project, transcript, kill_at=3) == -9  # budget.json committed, history not yet written
    loop_dir = project / ".loopwright/loops/prompt"
    assert (loop_dir / "history.jsonl").read_text() == ""  # made at start; this tick's line not yet written
    res = subprocess.run(
        [str(CLI), "-C", str(project), "cancel", "prompt"],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    history = [json.loads(x) for x in (loop_dir / "history.jsonl").read_text().splitlines()]
    assert [h["iteration"] for h in history] == [1]
    assert "Iterations: 1 of" in (loop_dir / "report.md").read_text()
    assert os.path.exists(loop_dir / "token-ledger.json")
