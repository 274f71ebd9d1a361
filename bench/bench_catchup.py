"""How often a real session's Stop finds the transcript behind, and for how long it waits.

Claude Code writes the turn's final message to the transcript around the time it runs the
Stop hook; a Stop that does not find it there waits for it (events/observe.py,
CATCH_UP_SECONDS), and says so in the project's debug log (LOOPWRIGHT_DEBUG=1): "waiting up
to ...", then "caught up after S s" or "is still behind after S s". This drives the real
Claude Code CLI (tests/claude_cli.py) offline against the scripted Messages API
(tests/fakeapi.py) through loops of several iterations, each turn a tool call and a final
text, and reads those lines back: how many Stops waited, and for how long.

    python bench/bench_catchup.py [--runs 3] [--iterations 15] [--busy N] [--json]

--busy N keeps N CPU-bound processes running meanwhile (a loaded machine: the lag people
report, ~1.5 s, comes from there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import claude_cli  # noqa: E402
import fakeapi  # noqa: E402

WAITED = re.compile(r"the transcript (caught up|is still behind) after ([0-9.]+) s")
DECIDED = re.compile(r"session \S+: loop \S+: (continue|stop|pause|hold)\b")


def one_loop(root: Path, n: int, iterations: int, busy: int) -> str:
    """One `claude -p` session running a loop of ``iterations``; its debug log."""
    project, home, keys = root / f"project-{n}", root / f"home-{n}", root / "config"
    project.mkdir()
    keys.mkdir(mode=0o700, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    replies = []
    for i in range(iterations):
        replies.append(fakeapi.bash(f"echo {i} >> progress.txt", text=f"Step {i}."))
        replies.append(fakeapi.text(f"Iteration {i} done; more to do. " + "w" * 400))
    goal = f'/loopwright:loop "Grow progress.txt" --max-iterations {iterations} --no-wrap-up'
    env = {"LOOPWRIGHT_PYTHON": sys.executable, "XDG_CONFIG_HOME": str(keys), "LOOPWRIGHT_DEBUG": "1"}
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]  # noqa: S603 - our own interpreter
    try:
        with fakeapi.ScriptedServer(replies) as server:
            res = claude_cli.run_claude(
                goal, cwd=project, plugin_dir=REPO, server=server, home=home, env=env, timeout=600
            )
    finally:
        for p in burners:
            p.kill()
            p.wait()
    if res.returncode != 0:
        raise SystemExit(f"claude failed:\n{res.describe()}")
    log = project / ".loopwright" / "debug.log"
    return log.read_text() if log.exists() else ""


def summary(logs: list[str]) -> dict:
    stops = waits = behind = 0
    seconds = []
    for text in logs:
        stops += len(DECIDED.findall(text))
        for how, secs in WAITED.findall(text):
            waits += 1
            behind += how == "is still behind"
            seconds.append(float(secs))
    seconds.sort()
    out = {"stops": stops, "waited": waits, "still_behind": behind, "wait_s": seconds}
    if seconds:
        out["wait_median_s"] = statistics.median(seconds)
        out["wait_max_s"] = seconds[-1]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="sessions, each one loop")
    ap.add_argument("--iterations", type=int, default=15, help="iterations per loop")
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound processes running meanwhile")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    claude_cli.claude_binary()
    with tempfile.TemporaryDirectory(prefix="lw-catchup-") as tmp:
        logs = [one_loop(Path(tmp), n, args.iterations, args.busy) for n in range(args.runs)]
    res = summary(logs)
    res.update(runs=args.runs, iterations=args.iterations, busy=args.busy, cpus=os.cpu_count())
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{res['stops']} Stops in {args.runs} sessions ({args.busy} busy processes, {res['cpus']} CPUs)")
    print(f"waited for the transcript: {res['waited']} ({res['still_behind']} still behind after the wait)")
    if res["wait_s"]:
        shown = ", ".join(f"{s:.2f}" for s in res["wait_s"])
        print(f"waits (s): {shown}; median {res['wait_median_s']:.2f}, max {res['wait_max_s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
