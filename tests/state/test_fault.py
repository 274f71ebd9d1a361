"""Writers killed with SIGKILL at random instants never leave a state file
that does not parse; the next writer carries on."""

import json
import random
import signal
import subprocess
import sys
import time

from conftest import LIB, REPO, lw_env
from loopwright.state import store

CLI = REPO / "bin" / "loopwright"

WRITER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from loopwright.events import stop as hook
raw = json.dumps({"session_id": "S1", "transcript_path": sys.argv[2], "cwd": sys.argv[3],
                  "stop_hook_active": True}).encode()
while True:
    hook.handle(raw)
"""


def check_state(state):
    """Every JSON file parses. In JSONL files a writer killed mid-append may leave
    one truncated record; the next append starts on a fresh line, so the damage
    never reaches another record, and readers skip it with a report."""
    problems, torn = [], 0
    for f in state.rglob("*.json"):
        try:
            json.loads(f.read_text())
        except ValueError as exc:
            problems.append(f"{f}: {exc}")
    for f in state.rglob("*.jsonl"):
        for i, line in enumerate(f.read_bytes().split(b"\n")):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except ValueError:
                if not line.startswith(b"{") or line.rstrip().endswith(b"}"):
                    problems.append(f"{f}:{i + 1} is damaged, not merely cut short")
                torn += 1
        records, skipped = store.read_jsonl(f)
        if len(skipped) != sum(1 for ln in f.read_bytes().split(b"\n") if ln.strip()) - len(records):
            problems.append(f"{f}: a bad line was not reported")
    return problems, torn


def test_sigkill_at_random_moments_leaves_every_state_file_parseable(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    # A transcript with real content so each tick also reads and counts usage.
    with open(transcript, "w") as fh:
        for i in range(200):
            fh.write(
                json.dumps(
                    {
                        "type": "assistant",
                        "message": {
                            "id": f"m{i}",
                            "model": "m",
                            "content": [{"type": "text", "text": "x" * 200}],
                            "usage": {"input_tokens": 1, "output_tokens": 1},
                        },
                    }
                )
                + "\n"
            )
    out = subprocess.run(
        [
            str(CLI),
            "-C",
            str(project),
            "start",
            "--session",
            "S1",
            "--max-iterations",
            "1000000",
            "--max-minutes",
            "100000",
            "goal",
        ],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    state = project / ".loopwright"
    rng = random.Random(20261122)
    env = lw_env(CLAUDE_PROJECT_DIR=str(project))
    kills = 0
    deadline = time.monotonic() + 25
    while kills < 40 and time.monotonic() < deadline:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(LIB), str(transcript), str(project)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        time.sleep(rng.uniform(0.15, 0.5))
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
        problems, torn = check_state(state)
        assert not problems, problems
        assert torn <= kills
    assert kills >= 20
    # The loop kept counting across all those deaths, and is still consistent.
    budget = json.loads((state / "loops/prompt/budget.json").read_text())
    history = (state / "loops/prompt/history.jsonl").read_text().splitlines()
    assert budget["iterations_used"] > 10
    assert abs(len([h for h in history if h.strip()]) - budget["iterations_used"]) <= kills
    # No stray corrupt copies: nothing was ever found unparseable.
    assert not list(state.rglob("*.corrupt-*"))
    # And the CLI still reads it all.
    st = subprocess.run(
        [str(CLI), "-C", str(project), "status", "--json"], capture_output=True, text=True, env=lw_env()
    )
    assert st.returncode == 0 and json.loads(st.stdout)["loops"][0]["status"] == "active"
