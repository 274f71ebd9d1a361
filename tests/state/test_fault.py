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
from waiting import wait_for

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


ROUNDS = 20  # of two writers each: 40 kills


def used(state) -> int:
    """The loop's iteration count (budget.json is replaced whole, never written in place)."""
    return json.loads((state / "loops/prompt/budget.json").read_text())["iterations_used"]


def wait_for_iterations(state, at_least: int, procs) -> None:
    """Until the writers have counted ``at_least`` iterations; a writer that dies first fails."""

    def reached() -> bool:
        for p in procs:
            assert p.poll() is None, p.stderr.read().decode(errors="replace")
        return used(state) >= at_least

    wait_for(reached, f"the writers to reach iteration {at_least}", every=0.01)


def kill_at_a_random_instant(procs, rng: random.Random) -> int:
    """SIGKILL the writers up to 0.3 s from now, wherever they are in a Stop; how many died.
    The sleep picks the instant and waits for nothing: the test holds for any instant."""
    time.sleep(rng.uniform(0.0, 0.3))
    for p in procs:
        p.send_signal(signal.SIGKILL)
        p.wait()
    return len(procs)


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
    for _ in range(ROUNDS):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(LIB), str(transcript), str(project)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        # The writers are in their loop of Stops once the count moves: from then on a kill can
        # land anywhere in a Stop. How far they get before it is left to chance on purpose.
        wait_for_iterations(state, used(state) + 1, procs)
        kills += kill_at_a_random_instant(procs, rng)
        problems, torn = check_state(state)
        assert not problems, problems
        assert torn <= kills
    # The loop kept counting across all those deaths (each round moved it), and is consistent.
    budget = json.loads((state / "loops/prompt/budget.json").read_text())
    history = (state / "loops/prompt/history.jsonl").read_text().splitlines()
    assert budget["iterations_used"] >= ROUNDS
    assert abs(len([h for h in history if h.strip()]) - budget["iterations_used"]) <= kills
    # No stray corrupt copies: nothing was ever found unparseable.
    assert not list(state.rglob("*.corrupt-*"))
    # And the CLI still reads it all.
    st = subprocess.run(
        [str(CLI), "-C", str(project), "status", "--json"], capture_output=True, text=True, env=lw_env()
    )
    assert st.returncode == 0 and json.loads(st.stdout)["loops"][0]["status"] == "active"
