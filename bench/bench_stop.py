"""Time the Stop hook as Claude Code runs it: a whole process per event.

Compares, in the same run, against a bare interpreter start (`python -c pass`
with the interpreter the hook uses), because absolute times on shared machines
are noisy and ratios are not:

  fast path          no active loop in the project (the launcher decides, no Python)
  fast path (py)     the same without CLAUDE_PROJECT_DIR (Python decides, stdlib only)
  session start      SessionStart with the plugin's packages installed and current
  foreign session    a loop is active, but owned by another session
  active 10 KB       the owning session's Stop, 10 KB transcript
  active 100 MB      the same with a 100 MB transcript
  ... + 100k history the 100 MB case with a 100,000-line history.jsonl

Targets, as ratios to the bare interpreter start in the same run: no active loop
<= 0.2x; SessionStart with nothing to install <= 1.0x (a file comparison, no
Python); another session's Stop while a loop is active <= 1.0x (the launcher
decides it from the owner index); the owning session's Stop <= 3.0x on a 10 KB and
on a 100 MB transcript, within +-20% of each other, also with a 100,000-line
history (a tick appends to the history and reads back its last line only). A prompt-mode Stop
imports nothing of task mode, and no run-time dependency.

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
SESSION_START = REPO / "hooks" / "session-start"
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
        subprocess.run(
            cmd, input=stdin, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
        )
        out.append((time.perf_counter() - t) * 1000)
    return out


def assistant_line(i: int, pad: int) -> bytes:
    return (
        json.dumps(
            {
                "type": "assistant",
                "uuid": f"u{i}",
                "message": {
                    "id": f"msg_{i}",
                    "model": "claude-sonnet-4-5",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "w" * pad}],
                    "usage": {
                        "input_tokens": 1200,
                        "output_tokens": 300,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 800,
                    },
                },
            }
        )
        + "\n"
    ).encode()


def make_transcript(path: Path, size: int) -> None:
    line = assistant_line(0, 2000)
    with open(path, "wb") as fh:
        n = 0
        while fh.tell() < size:
            fh.write(
                assistant_line(n, 2000)
                if n % 2
                else (
                    json.dumps({"type": "user", "message": {"role": "user", "content": "u" * 1500}}) + "\n"
                ).encode()
            )
            n += 1
    assert len(line) > 0


def start_loop(project: Path) -> str:
    """A loop owned by session BENCH that no budget ends during a run; what start printed."""
    argv = [str(CLI), "-C", str(project), "start", "--session", "BENCH"]
    # No dollar ceiling either: the usage in a big transcript's first window would end the loop,
    # and its Stops would then be timed on the launcher's no-loop path.
    argv += ["--max-iterations", "1000000", "--max-minutes", "100000", "--max-dollars", "1000000000"]
    argv += ["benchmark goal"]
    return subprocess.run(argv, env=env_for(None), check=True, capture_output=True, text=True).stdout


def installed_env(root: Path) -> dict:
    """SessionStart's environment when the plugin's packages are installed and current (no
    LOOPWRIGHT_PYTHON: the hook would return before its one file comparison)."""
    data = root / "plugin-data"
    (data / "venv").mkdir(parents=True)
    shutil.copy(REPO / "requirements.txt", data / "venv" / ".loopwright-requirements")
    env = env_for(None, CLAUDE_PLUGIN_DATA=str(data), CLAUDE_ENV_FILE=str(root / "env.sh"))
    env.pop("LOOPWRIGHT_PYTHON")
    return env


def owner_event(project: Path, transcript: Path) -> bytes:
    """The owning session's Stop event."""
    event = {
        "session_id": "BENCH",
        "transcript_path": str(transcript),
        "cwd": str(project),
        "stop_hook_active": True,
        "last_assistant_message": "w" * 2000,
    }
    return json.dumps(event).encode()


def active_project(root: Path, name: str, transcript: Path) -> tuple[Path, bytes]:
    project = root / name
    project.mkdir()
    start_loop(project)
    event = owner_event(project, transcript)
    # One tick to settle the cursor at the end: later ticks read only what is new.
    settled = subprocess.run([str(STOP)], input=event, env=env_for(project), check=True, capture_output=True)
    # The loop goes on: were it ended (by a budget), its Stops would be timed on the no-loop path.
    assert json.loads(settled.stdout).get("decision") == "block", settled.stdout
    return project, event


# Forked from a fresh interpreter: Linux carries a process's peak RSS across exec.
PEAK = r"""
import os, resource, subprocess, sys
data = sys.stdin.buffer.read()
if os.fork() == 0:
    subprocess.run(sys.argv[1:], input=data, stdout=subprocess.DEVNULL, check=True)
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)
    os._exit(0)
os.wait()
"""


def peak_rss_mb(cmd, stdin: bytes, env: dict, before=None) -> float:
    """Peak resident memory of one hook run (its largest process), in MiB."""
    if before:
        before()
    out = subprocess.run(
        [sys.executable, "-c", PEAK, *cmd], input=stdin, env=env, capture_output=True, check=True
    )
    return int(out.stdout.strip()) / 1024


def sparse_transcript(path: Path, size: int, head: bytes) -> None:
    """A ``size``-byte transcript that costs no disk: ``head`` (e.g. a line carrying the
    loop's nonce) at the top, a hole, then a few real turns at the end."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size - 64 * 1024)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n")
        for i in range(8):
            fh.write(assistant_line(i, 2000))


def fresh_loop(root: Path, transcript: Path, size: int, counter: list) -> tuple[Path, bytes]:
    """A new loop whose first Stop comes on a huge transcript with its nonce near the top
    (the worst case found by the attack: 8 s and 2 GiB before the fix)."""
    counter[0] += 1
    project = root / f"first-{counter[0]}"
    project.mkdir()
    out = start_loop(project)
    nonce = next(line.split(": ")[1] for line in out.splitlines() if line.startswith("loop-nonce:"))
    sparse_transcript(
        transcript, size, (json.dumps({"type": "user", "message": {"content": nonce}}) + "\n").encode()
    )
    return project, owner_event(project, transcript)


# Modules a prompt-mode Stop must never import: another mode's code, a dependency, or a
# standard module that costs more to import than the Stop's own work (pathlib and re:
# ~7 ms together; see state/fspath.py).
NOT_ON_THE_PROMPT_PATH = (
    "loopwright.modes.task",
    "click",
    "orjson",
    "portalocker",
    "psutil",
    "re2",  # only for a project whose CLAUDE.md has redaction patterns
    "pathlib",
    "re",
    "json",
    "contextlib",
    "dataclasses",
)


def imported_modules(event: bytes, project: Path) -> set[str]:
    """Every module one Stop of the owning session imports (Python's -X importtime list).
    The interpreter is started as the launcher starts it for the owner's Stop, plus -X
    importtime: the launcher's -I would ignore PYTHONPROFILEIMPORTTIME."""
    env = env_for(project)
    cmd = [sys.executable, "-I", "-S", "-X", "importtime", str(REPO / "hooks" / "stop.py")]
    out = subprocess.run(cmd, input=event, env=env, capture_output=True, check=True)
    names = set()
    for line in out.stderr.decode(errors="replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def task_line(i: int, status: str = "open") -> bytes:
    return (
        json.dumps(
            {
                "id": f"task-{i}",
                "type": "task",
                "text": f"work item {i} with a realistic description",
                "status": status,
                "source": "manual",
                "created": "2026-11-22T10:00:00Z",
            }
        )
        + "\n"
    ).encode()


def with_tasks(project: Path, n: int) -> None:
    """The loop's own tasks.jsonl with ``n`` lines (a third of the tasks completed later)."""
    path = project / ".loopwright" / "loops" / "prompt" / "tasks.jsonl"
    with open(path, "wb") as fh:
        for i in range(1, n + 1):
            fh.write(task_line(i) if i % 3 else task_line(i - 1, "done"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--big-mb", type=int, default=100)
    ap.add_argument("--history-lines", type=int, default=100_000)
    ap.add_argument("--task-lines", type=int, default=100_000)
    ap.add_argument(
        "--huge-gb", type=int, default=1, help="size of the sparse transcript for the first-Stop case"
    )
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    # Byte-compiled first, as an installed plugin is after its first Stop (PYTHONDONTWRITEBYTECODE
    # in the environment would otherwise make every run compile the changed modules again).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "lib")], check=True)
    root = Path(tempfile.mkdtemp(prefix="lw-bench-"))
    try:
        small, big = root / "small.jsonl", root / "big.jsonl"
        make_transcript(small, 10 * 1024)
        make_transcript(big, args.big_mb * 1024 * 1024)
        empty = root / "empty"
        empty.mkdir()
        installed_env_ = installed_env(root)
        quiet_event = json.dumps(
            {
                "session_id": "X",
                "transcript_path": str(small),
                "cwd": str(empty),
                "stop_hook_active": False,
                "last_assistant_message": "hi",
            }
        ).encode()
        p_small, ev_small = active_project(root, "p_small", small)
        p_big, ev_big = active_project(root, "p_big", big)
        p_hist, ev_hist = active_project(root, "p_hist", big)
        hist = p_hist / ".loopwright" / "loops" / "prompt" / "history.jsonl"
        line = hist.read_bytes().splitlines()[-1] + b"\n"
        with open(hist, "ab") as fh:
            fh.write(line * args.history_lines)
        foreign_event = ev_small.replace(b'"BENCH"', b'"SOMEONE-ELSE"')
        p_t10, ev_t10 = active_project(root, "p_t10", small)
        with_tasks(p_t10, 10)
        p_t100k, ev_t100k = active_project(root, "p_t100k", small)
        with_tasks(p_t100k, args.task_lines)
        subprocess.run(
            [str(STOP)], input=ev_t100k, env=env_for(p_t100k), check=True, stdout=subprocess.DEVNULL
        )
        huge = root / "huge.jsonl"
        huge_size = args.huge_gb * 1024**3
        first = {"event": b"", "project": None, "n": [0]}

        def new_first_loop():
            first["project"], first["event"] = fresh_loop(root, huge, huge_size, first["n"])

        def first_stop(n):
            out = []
            for _ in range(n):
                new_first_loop()
                out += timed([str(STOP)], first["event"], env_for(first["project"]), 1)
            return out

        def later_stop(n):
            if first["project"] is None:
                new_first_loop()
                subprocess.run(
                    [str(STOP)],
                    input=first["event"],
                    env=env_for(first["project"]),
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
            return timed([str(STOP)], first["event"], env_for(first["project"]), n, grow(huge))

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
            "session start, installed": lambda n: timed([str(SESSION_START)], b"", installed_env_, n),
            "foreign session": lambda n: timed([str(STOP)], foreign_event, env_for(p_small), n),
            "active 10 KB": lambda n: timed([str(STOP)], ev_small, env_for(p_small), n, grow(small)),
            f"active {args.big_mb} MB": lambda n: timed([str(STOP)], ev_big, env_for(p_big), n, grow(big)),
            f"  + {args.history_lines // 1000}k history": lambda n: timed(
                [str(STOP)], ev_hist, env_for(p_hist), n, grow(big)
            ),
            "active, 10 tasks": lambda n: timed([str(STOP)], ev_t10, env_for(p_t10), n, grow(small)),
            f"active, {args.task_lines // 1000}k-line tasks": lambda n: timed(
                [str(STOP)], ev_t100k, env_for(p_t100k), n, grow(small)
            ),
            f"first Stop, {args.huge_gb} GiB": first_stop,
            f"later Stop, {args.huge_gb} GiB": later_stop,
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
            "no active loop <= 0.2x bare": med["fast path"] <= 0.2 * bare,
            "session start, nothing to install <= 1.0x bare": med["session start, installed"] <= 1.0 * bare,
            "another session's Stop <= 1.0x bare": med["foreign session"] <= 1.0 * bare,
            "owner's Stop, 10 KB transcript <= 3.0x bare": med["active 10 KB"] <= 3.0 * bare,
            f"owner's Stop, {args.big_mb} MB transcript <= 3.0x bare": med[big_key] <= 3.0 * bare,
            f"{big_key} within 20% of 10 KB": abs(med[big_key] - med["active 10 KB"])
            <= 0.2 * med["active 10 KB"],
            "history size does not matter (within 20%)": abs(med[hist_key] - med["active 10 KB"])
            <= 0.2 * med["active 10 KB"],
            f"{args.task_lines // 1000}k-line tasks within 1.5x of 10 tasks": med[
                f"active, {args.task_lines // 1000}k-line tasks"
            ]
            <= 1.5 * med["active, 10 tasks"],
            f"first Stop on {args.huge_gb} GiB within 2x of a later Stop": med[
                f"first Stop, {args.huge_gb} GiB"
            ]
            <= 2.0 * med[f"later Stop, {args.huge_gb} GiB"],
        }
        imported = imported_modules(ev_small, p_small)
        # A module or its submodules: "re" and "re._parser", never "reprlib".
        leaked = sorted(
            m for m in imported if any(m == x or m.startswith(x + ".") for x in NOT_ON_THE_PROMPT_PATH)
        )
        checks[
            "a prompt-mode Stop imports no task mode, no dependency, no pathlib, re or json"
            + (f" ({', '.join(leaked)})" if leaked else "")
        ] = not leaked
        peak = peak_rss_mb([str(STOP)], ev_t100k, env_for(p_t100k), grow(small))
        checks[f"{args.task_lines // 1000}k-line tasks Stop under 50 MiB (peak {peak:.0f} MiB)"] = peak < 50
        if args.json:
            print(
                json.dumps(
                    {
                        "median_ms": med,
                        "min_ms": {k: min(v) for k, v in results.items()},
                        "ratio_to_bare": {k: v / bare for k, v in med.items()},
                        "peak_rss_mb_tasks": peak,
                        "prompt_stop_imports": sorted(m for m in imported if m.startswith("loopwright")),
                        "checks": checks,
                    },
                    indent=2,
                )
            )
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
