"""Time the Stop hook as Claude Code runs it: a whole process per event.

Compares, in the same run, against a bare interpreter start (`python -c pass`
with the interpreter the hook uses), because absolute times on shared machines
are noisy and ratios are not:

  fast path          no active loop in the project (the launcher decides, no Python)
  fast path (py)     the same without CLAUDE_PROJECT_DIR (Python decides, stdlib only)
  foreign session    a loop is active, but owned by another session
  active 10 KB       the owning session's Stop, 10 KB transcript
  active 100 MB      the same with a 100 MB transcript
  ... + 100k history the 100 MB case with a 100,000-line history.jsonl

Targets: fast path <= 1.3x bare; active decision <= 150 ms median and within
+-20% between the 10 KB and the 100 MB transcript, also with a 100,000-line
history (a tick appends to the history, it never reads it).

    python bench/bench_stop.py [--runs N] [--big-mb 100] [--check] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STOP = REPO / "hooks" / "stop"
CLI = REPO / "bin" / "loopwright"


def env_for(project: Path | None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "LOOPWRIGHT"))}
    env["LOOPWRIGHT_PYTHON"] = sys.executable
    if project is not None:
        env["CLAUDE_PROJECT_DIR"] = str(project)
    env.update(extra)
    return env


def timed(cmd, stdin: bytes, env: dict, runs: int, before=None) -> list[float]:
    out = []
    for _ in range(runs):
        if before:
            before()
        t = time.perf_counter()
        subprocess.run(cmd, input=stdin, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append((time.perf_counter() - t) * 1000)
    return out


def assistant_line(i: int, pad: int) -> bytes:
    return (json.dumps({
        "type": "assistant", "uuid": f"u{i}",
        "message": {"id": f"msg_{i}", "model": "claude-sonnet-4-5", "role": "assistant",
                    "content": [{"type": "text", "text": "w" * pad}],
                    "usage": {"input_tokens": 1200, "output_tokens": 300, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 800}},
    }) + "\n").encode()


def make_transcript(path: Path, size: int) -> None:
    line = assistant_line(0, 2000)
    with open(path, "wb") as fh:
        n = 0
        while fh.tell() < size:
            fh.write(assistant_line(n, 2000) if n % 2 else (json.dumps({"type": "user", "message": {"role": "user", "content": "u" * 1500}}) + "\n").encode())
            n += 1
    assert len(line) > 0


def active_project(root: Path, name: str, transcript: Path) -> tuple[Path, bytes]:
    project = root / name
    project.mkdir()
    subprocess.run([str(CLI), "-C", str(project), "start", "--session", "BENCH", "--max-iterations", "1000000",
                    "--max-minutes", "100000", "benchmark goal"], env=env_for(None), check=True, stdout=subprocess.DEVNULL)
    event = json.dumps({"session_id": "BENCH", "transcript_path": str(transcript), "cwd": str(project),
                        "stop_hook_active": True, "last_assistant_message": "w" * 2000}).encode()
    # One tick to settle the cursor at the end: later ticks read only what is new.
    subprocess.run([str(STOP)], input=event, env=env_for(project), check=True, stdout=subprocess.DEVNULL)
    return project, event


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--big-mb", type=int, default=100)
    ap.add_argument("--history-lines", type=int, default=100_000)
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="lw-bench-"))
    try:
        small, big = root / "small.jsonl", root / "big.jsonl"
        make_transcript(small, 10 * 1024)
        make_transcript(big, args.big_mb * 1024 * 1024)
        empty = root / "empty"
        empty.mkdir()
        quiet_event = json.dumps({"session_id": "X", "transcript_path": str(small), "cwd": str(empty),
                                  "stop_hook_active": False, "last_assistant_message": "hi"}).encode()
        p_small, ev_small = active_project(root, "p_small", small)
        p_big, ev_big = active_project(root, "p_big", big)
        p_hist, ev_hist = active_project(root, "p_hist", big)
        hist = p_hist / ".loopwright" / "loops" / "prompt" / "history.jsonl"
        line = hist.read_bytes().splitlines()[-1] + b"\n"
        with open(hist, "ab") as fh:
            fh.write(line * args.history_lines)
        foreign_event = ev_small.replace(b'"BENCH"', b'"SOMEONE-ELSE"')

        counter = [10**6]

        def grow(path: Path):
            def step():  # each Stop sees one new assistant message, as in a real turn
                counter[0] += 1
                with open(path, "ab") as fh:
                    fh.write(assistant_line(counter[0], 2000))
            return step

        results = {}
        # Interleave the measurements so machine noise hits all of them alike.
        series = {
            "bare python -c pass": lambda n: timed([sys.executable, "-c", "pass"], b"", env_for(None), n),
            "fast path": lambda n: timed([str(STOP)], quiet_event, env_for(empty), n),
            "fast path (py)": lambda n: timed([str(STOP)], quiet_event, env_for(None), n),
            "foreign session": lambda n: timed([str(STOP)], foreign_event, env_for(p_small), n),
            "active 10 KB": lambda n: timed([str(STOP)], ev_small, env_for(p_small), n, grow(small)),
            f"active {args.big_mb} MB": lambda n: timed([str(STOP)], ev_big, env_for(p_big), n, grow(big)),
            f"  + {args.history_lines // 1000}k history": lambda n: timed([str(STOP)], ev_hist, env_for(p_hist), n, grow(big)),
        }
        for name in series:
            results[name] = []
        rounds = 5
        per = max(1, args.runs // rounds)
        for _ in range(rounds):
            for name, fn in series.items():
                results[name] += fn(per)
        med = {k: statistics.median(v) for k, v in results.items()}
        bare = med["bare python -c pass"]
        big_key = f"active {args.big_mb} MB"
        hist_key = f"  + {args.history_lines // 1000}k history"
        checks = {
            "fast path <= 1.3x bare": med["fast path"] <= 1.3 * bare,
            "active 10 KB median <= 150 ms": med["active 10 KB"] <= 150,
            f"{big_key} median <= 150 ms": med[big_key] <= 150,
            f"{big_key} within 20% of 10 KB": abs(med[big_key] - med["active 10 KB"]) <= 0.2 * med["active 10 KB"],
            "history size does not matter (within 20%)": abs(med[hist_key] - med["active 10 KB"]) <= 0.2 * med["active 10 KB"],
        }
        if args.json:
            print(json.dumps({"median_ms": med, "ratio_to_bare": {k: v / bare for k, v in med.items()}, "checks": checks}, indent=2))
        else:
            print(f"interpreter: {sys.executable}  runs per series: {len(results['fast path'])}")
            print(f"{'series':<26}{'median ms':>10}{'p90 ms':>9}{'x bare':>8}")
            for k, v in results.items():
                p90 = sorted(v)[int(0.9 * (len(v) - 1))]
                print(f"{k:<26}{med[k]:>10.1f}{p90:>9.1f}{med[k] / bare:>8.2f}")
            for name, ok in checks.items():
                print(f"{'PASS' if ok else 'MISS'}  {name}")
        return 0 if (all(checks.values()) or not args.check) else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
