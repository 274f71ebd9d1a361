"""Time the Stop hook as Claude Code runs it: a whole process per event.

Compares, in the same run, against a bare interpreter start (`python -c pass`
with the interpreter the hook uses), because absolute times on shared machines
are noisy and ratios are not:

  fast path          no active loop in the project (the launcher decides, no Python)
  fast path (py)     the same without CLAUDE_PROJECT_DIR (Python decides, stdlib only)
  session start      SessionStart with the plugin's packages installed and current
  foreign session    a loop is active, but owned by another session
  active 10 KB       the owning session's Stop, 10 KB transcript, answered by the resident Stop
                     server the loop's first Stop started (lib/loopwright/events/resident.py)
  ... in its own process: the same with LOOPWRIGHT_RESIDENT=0 (every Stop imports the package)
  ..., PYTHONDONTWRITEBYTECODE=1, ..., read-only plugin: the same (bytecode comes from
                     the plugin data directory's cache either way); ... without the cache:
                     a read-only plugin before it, compiling the package at every Stop
  active 100 MB      the same with a 100 MB transcript
  ... + 100k history the 100 MB case with a 100,000-line history.jsonl
  work / review      a work loop's Stop over the task registry (git worktree list) and a
                     review loop's (gh calls against tests/fakegithub.py; needs gh, openssl)
  ralph-loop         the official ralph-loop plugin's Stop hook on the same transcripts

Every Stop is run as Claude Code runs it: CLAUDE_PLUGIN_DATA names a data directory whose
bytecode cache the bootstrap filled (lib/loopwright/state/precompile.py), and
CLAUDE_CODE_SESSION_ID names the event's session. Each turn appended to a transcript is
what Claude Code writes (compact JSON): a tool call, then the final text.

Targets, as ratios to the bare interpreter start in the same run: no active loop
<= 0.2x; SessionStart with nothing to install <= 1.0x (file comparisons, no
Python); another session's Stop while a loop is active <= 1.0x (the launcher
decides it from the owner index); the owning session's Stop <= 1.5x on a 10 KB transcript,
with and without PYTHONDONTWRITEBYTECODE=1 and from a read-only plugin, <= 3.0x on a
100 MB one, within +-20% of each other, also with a 100,000-line history (a tick appends to
the history and reads back its last line only), and <= 0.2x the ralph-loop hook on both
(when that hook is at hand: --ralph-hook, $LOOPWRIGHT_BENCH_RALPH, a Claude Code marketplace
copy, or a clone in ~/.cache/loopwright that --fetch-ralph makes; else those rows are
skipped). Loose ceilings keep work (<= 8x) and review (<= 60x) Stops from growing unseen.
A Stop answered in its own process stays <= 2.5x. A prompt-mode Stop answered in its own process
imports nothing of task mode, and no run-time dependency.

    python bench/bench_stop.py [--runs N] [--big-mb 100] [--check] [--json]
                               [--ralph-hook PATH | --fetch-ralph]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
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
sys.path.insert(0, str(REPO / "lib"))  # for written() alone: every Stop runs as a process
PLUGIN_DATA: list[Path] = []  # the plugin data directory every hook is given, once made


def env_for(project: Path | None, session: str | None = None, **extra) -> dict:
    """A hook's environment as Claude Code gives it: the project, the plugin data directory
    (with its bytecode cache), and the session named (the event's own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "LOOPWRIGHT"))}
    env["LOOPWRIGHT_PYTHON"] = sys.executable
    if project is not None:
        env["CLAUDE_PROJECT_DIR"] = str(project)
    if PLUGIN_DATA:
        env["CLAUDE_PLUGIN_DATA"] = str(PLUGIN_DATA[0])
    if session:
        env["CLAUDE_CODE_SESSION_ID"] = session
    env.update(extra)
    return env


def timed(cmd, stdin: bytes, env: dict, runs: int, before=None, cwd=None) -> list[float]:
    out = []
    for _ in range(runs):
        if before:
            before()
        t = time.perf_counter()
        subprocess.run(
            cmd,
            input=stdin,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            cwd=cwd,
        )
        out.append((time.perf_counter() - t) * 1000)
    return out


def compact(obj: dict) -> bytes:
    """One transcript line as Claude Code writes it: compact JSON."""
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def assistant_line(i: int, pad: int, tool: bool = False) -> bytes:
    block = {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": "true"}}
    return compact(
        {
            "type": "assistant",
            "uuid": f"u{i}",
            "message": {
                "id": f"msg_{i}",
                "model": "claude-sonnet-4-5",
                "role": "assistant",
                "content": [block if tool else {"type": "text", "text": "w" * pad}],
                "usage": {
                    "input_tokens": 1200,
                    "output_tokens": 300,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 800,
                },
            },
        }
    )


def turn_lines(i: int) -> bytes:
    """A turn as it lands in the transcript: a tool call, its result, the final text (a turn
    with a tool call: Claude Code's block cap counts only blocks without one)."""
    result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}
    user = compact({"type": "user", "message": {"role": "user", "content": [result]}})
    return assistant_line(i, 0, tool=True) + user + assistant_line(i + 1, 2000)


def make_transcript(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        n = 0
        while fh.tell() < size:
            fh.write(
                assistant_line(n, 2000)
                if n % 2
                else compact({"type": "user", "message": {"role": "user", "content": "u" * 1500}})
            )
            n += 1


def start_loop(project: Path) -> str:
    """A loop owned by session BENCH that no budget ends during a run; what start printed."""
    argv = [str(CLI), "-C", str(project), "start", "--session", "BENCH"]
    # No dollar ceiling either: the usage in a big transcript's first window would end the loop,
    # and its Stops would then be timed on the launcher's no-loop path.
    argv += ["--max-iterations", "1000000", "--max-minutes", "100000", "--max-dollars", "1000000000"]
    argv += ["benchmark goal"]
    return subprocess.run(argv, env=env_for(None), check=True, capture_output=True, text=True).stdout


def installed_env(root: Path) -> dict:
    """SessionStart's environment when the plugin's packages are installed and its bytecode
    cache is current (no LOOPWRIGHT_PYTHON: the hook would return before its comparisons)."""
    data = root / "installed-data"
    (data / "venv").mkdir(parents=True)
    shutil.copy(REPO / "requirements.txt", data / "venv" / ".loopwright-requirements")
    (data / "pycache").mkdir(mode=0o700)
    shutil.copy(REPO / ".claude-plugin" / "plugin.json", data / "pycache" / ".plugin.json")
    (data / "pycache" / ".built-for").write_text(f"{REPO} {data / 'venv' / 'bin' / 'python'}\n")
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
    env = env_for(project, "BENCH")
    settled = subprocess.run([str(STOP)], input=event, env=env, check=True, capture_output=True)
    # The loop goes on: were it ended (by a budget), its Stops would be timed on the no-loop path.
    assert json.loads(settled.stdout).get("decision") == "block", settled.stdout
    written(project)
    return project, event


def written(project: Path, name: str = "prompt") -> None:
    """Wait until the loop's last Stop has written everything: a Stop the resident server
    answers lets its launcher go once the tick is committed and writes the history and journal
    after, holding the loop's mutex until then (lib/loopwright/events/stop.py's RELEASE)."""
    from loopwright.state import loops

    with loops.loop_mutex(loops.LoopPaths(project / ".loopwright", name)):
        pass


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
    env = env_for(project, LOOPWRIGHT_RESIDENT="0")  # in this process: the server's would not show
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


def plugin_data(root: Path, plugin: Path = REPO, name: str = "plugin-data") -> Path:
    """A plugin data directory with the bytecode cache the SessionStart bootstrap builds for
    ``plugin`` (its .pyc files and its code archive)."""
    data = root / name
    data.mkdir(mode=0o755)
    script = REPO / "lib" / "loopwright" / "state" / "precompile.py"
    argv = [sys.executable, "-I", "-S", str(script), str(plugin / "lib"), str(data), "bench", os.devnull]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return data


def read_only_plugin(root: Path) -> Path:
    """hooks/ and lib/ copied where Python can neither read nor write bytecode beside the
    sources (a file named __pycache__ in each package: a read-only marketplace copy)."""
    plugin = root / "read-only-plugin"
    for part in ("hooks", "lib"):
        shutil.copytree(REPO / part, plugin / part, ignore=shutil.ignore_patterns("__pycache__"))
    for folder, _, _ in os.walk(plugin / "lib"):
        (Path(folder) / "__pycache__").write_text("")
    return plugin


RALPH_REPO = "https://github.com/anthropics/claude-plugins-official"
RALPH_CACHE = Path.home() / ".cache" / "loopwright" / "claude-plugins-official"
RALPH_IN_REPO = Path("plugins") / "ralph-loop" / "hooks" / "stop-hook.sh"


def ralph_hook(named: str | None, fetch: bool) -> tuple[Path | None, str]:
    """The official ralph-loop plugin's Stop hook (never copied into this repository), and
    where it came from, or None and why not."""
    if not all(shutil.which(t) for t in ("bash", "jq", "perl")):
        return None, "needs bash, jq and perl"
    home = Path.home() / ".claude" / "plugins"
    found = [named, os.environ.get("LOOPWRIGHT_BENCH_RALPH"), str(RALPH_CACHE / RALPH_IN_REPO)]
    found += sorted(glob.glob(str(home / "marketplaces" / "*" / RALPH_IN_REPO)))
    found += sorted(glob.glob(str(home / "cache" / "*" / "ralph-loop" / "*" / "hooks" / "stop-hook.sh")))
    for path in filter(None, found):
        if os.path.isfile(path):
            return Path(path), path
    if not fetch:
        return None, "not found: pass --ralph-hook, or --fetch-ralph to clone it into ~/.cache/loopwright"
    clone = [
        "git",
        "clone",
        "-q",
        "--depth",
        "1",
        "--filter=blob:none",
        "--sparse",
        RALPH_REPO,
        str(RALPH_CACHE),
    ]
    try:
        subprocess.run(clone, check=True, capture_output=True, timeout=120)
        subprocess.run(
            ["git", "-C", str(RALPH_CACHE), "sparse-checkout", "set", "plugins/ralph-loop"], check=True
        )
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(RALPH_CACHE, ignore_errors=True)
        return None, f"not found, and {RALPH_REPO} could not be cloned; pass --ralph-hook"
    hook = RALPH_CACHE / RALPH_IN_REPO
    return (hook, f"{RALPH_REPO} (cloned)") if hook.is_file() else (None, "not in the clone")


RALPH_STATE = """---
active: true
iteration: 1
session_id: BENCH
max_iterations: 0
completion_promise: "LOOP DONE"
started_at: "2026-01-01T00:00:00Z"
---

benchmark goal
"""


def ralph_project(root: Path, name: str) -> tuple[Path, callable]:
    """A project with an active ralph loop of session BENCH; a step that keeps it active (the
    hook deletes its state file when it stops the loop, which it should not do here)."""
    project = root / name
    (project / ".claude").mkdir(parents=True)
    state = project / ".claude" / "ralph-loop.local.md"

    def keep() -> None:
        if not state.exists():
            state.write_text(RALPH_STATE)

    keep()
    return project, keep


def mode_loop(root: Path, name: str, command: str, transcript: Path, env: dict) -> tuple[Path, bytes]:
    """A loop started as the user starts one (the slash command through hooks/prompt) in a
    git project, settled by one Stop; the project and its owner's Stop event."""
    project = root / name
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    # Its own identity: a machine where git has none (a fresh HOME, CI) runs the bench too.
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run(
        ["git", "-C", str(project), *ident, "commit", "-q", "--allow-empty", "-m", "init"], check=True
    )
    if env.get("LW_REMOTE"):
        subprocess.run(["git", "-C", str(project), "remote", "add", "origin", env["LW_REMOTE"]], check=True)
    for i in range(3):
        subprocess.run(
            [str(CLI), "-C", str(project), "task", "add", f"item {i}"],
            env=env,
            check=True,
            capture_output=True,
        )
    limits = "--max-iterations 1000000 --max-minutes 100000 --max-dollars 1000000000"
    event = {"session_id": "BENCH", "cwd": str(project), "prompt": f"/loopwright:{command} --loop {limits}"}
    hook_env = dict(env, CLAUDE_PROJECT_DIR=str(project))
    started = subprocess.run(
        [str(REPO / "hooks" / "prompt")],
        input=json.dumps(event).encode(),
        env=hook_env,
        check=True,
        capture_output=True,
    )
    assert b"started" in started.stdout, started.stdout
    stop_event = owner_event(project, transcript)
    settled = subprocess.run([str(STOP)], input=stop_event, env=hook_env, check=True, capture_output=True)
    assert json.loads(settled.stdout).get("decision") == "block", settled.stdout
    return project, stop_event


def github(stack: contextlib.ExitStack, root: Path):
    """tests/fakegithub.py serving one pull request, or None without gh and openssl."""
    if not (shutil.which("gh") and shutil.which("openssl")):
        return None, None
    sys.path.insert(0, str(REPO / "tests"))
    import fakegithub

    fake = stack.enter_context(fakegithub.FakeGitHub(root / "github"))
    pr = fake.open_pull("Add", "feature/add")
    fake.set_checks(pr)
    return fake, pr


def arguments():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--big-mb", type=int, default=100)
    ap.add_argument("--history-lines", type=int, default=100_000)
    ap.add_argument("--task-lines", type=int, default=100_000)
    ap.add_argument(
        "--huge-gb", type=int, default=1, help="size of the sparse transcript for the first-Stop case"
    )
    ap.add_argument("--ralph-hook", help="the official ralph-loop plugin's hooks/stop-hook.sh")
    ap.add_argument("--fetch-ralph", action="store_true", help=f"clone {RALPH_REPO} when no copy is found")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    return ap.parse_args()


class Grower:
    """Each timed Stop sees one new turn, as after a real one."""

    def __init__(self) -> None:
        self.n = 10**6

    def __call__(self, path: Path):
        def step():
            self.n += 2
            with open(path, "ab") as fh:
                fh.write(turn_lines(self.n))

        return step


def prompt_series(args, root: Path, small: Path, big: Path, grow: Grower) -> tuple[dict, dict]:
    """The prompt-mode rows (the series, and what the checks need to know)."""
    empty = root / "empty"
    empty.mkdir()
    installed_env_ = installed_env(root)
    quiet = {"session_id": "X", "transcript_path": str(small), "cwd": str(empty), "stop_hook_active": False}
    quiet_event = json.dumps(dict(quiet, last_assistant_message="hi")).encode()
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
        [str(STOP)], input=ev_t100k, env=env_for(p_t100k, "BENCH"), check=True, stdout=subprocess.DEVNULL
    )
    read_only = read_only_plugin(root)
    owner = env_for(p_small, "BENCH")
    read_only_env = dict(owner, CLAUDE_PLUGIN_DATA=str(plugin_data(root, read_only, "read-only-data")))
    no_cache = {k: v for k, v in owner.items() if k != "CLAUDE_PLUGIN_DATA"}
    series = {
        "bare python -c pass": lambda n: timed([sys.executable, "-c", "pass"], b"", env_for(None), n),
        "fast path": lambda n: timed([str(STOP)], quiet_event, env_for(empty, "X"), n),
        "fast path (py)": lambda n: timed([str(STOP)], quiet_event, env_for(None, "X"), n),
        "session start, installed": lambda n: timed([str(SESSION_START)], b"", installed_env_, n),
        "foreign session": lambda n: timed([str(STOP)], foreign_event, env_for(p_small, "SOMEONE-ELSE"), n),
        "active 10 KB": lambda n: timed([str(STOP)], ev_small, owner, n, grow(small)),
        "  in its own process": lambda n: timed(
            [str(STOP)], ev_small, dict(owner, LOOPWRIGHT_RESIDENT="0"), n, grow(small)
        ),
        "  PYTHONDONTWRITEBYTECODE=1": lambda n: timed(
            [str(STOP)], ev_small, dict(owner, PYTHONDONTWRITEBYTECODE="1"), n, grow(small)
        ),
        "  read-only plugin": lambda n: timed(
            [str(read_only / "hooks" / "stop")], ev_small, read_only_env, n, grow(small)
        ),
        "  ... without the cache": lambda n: timed(
            [str(read_only / "hooks" / "stop")], ev_small, no_cache, n, grow(small)
        ),
        f"active {args.big_mb} MB": lambda n: timed(
            [str(STOP)], ev_big, env_for(p_big, "BENCH"), n, grow(big)
        ),
        f"  + {args.history_lines // 1000}k history": lambda n: timed(
            [str(STOP)], ev_hist, env_for(p_hist, "BENCH"), n, grow(big)
        ),
        "active, 10 tasks": lambda n: timed([str(STOP)], ev_t10, env_for(p_t10, "BENCH"), n, grow(small)),
        f"active, {args.task_lines // 1000}k-line tasks": lambda n: timed(
            [str(STOP)], ev_t100k, env_for(p_t100k, "BENCH"), n, grow(small)
        ),
    }
    keep = {"small": (ev_small, p_small), "t100k": (ev_t100k, p_t100k)}
    return series, keep


def huge_series(args, root: Path, grow: Grower) -> dict:
    """A loop's first Stop on a huge transcript whose nonce is near the top, and a later one."""
    huge = root / "huge.jsonl"
    huge_size = args.huge_gb * 1024**3
    first = {"event": b"", "project": None, "n": [0]}

    def new_first_loop():
        first["project"], first["event"] = fresh_loop(root, huge, huge_size, first["n"])

    def first_stop(n):
        out = []
        for _ in range(n):
            new_first_loop()
            out += timed([str(STOP)], first["event"], env_for(first["project"], "BENCH"), 1)
        return out

    def later_stop(n):
        if first["project"] is None:
            new_first_loop()
            env = env_for(first["project"], "BENCH")
            subprocess.run([str(STOP)], input=first["event"], env=env, check=True, stdout=subprocess.DEVNULL)
        return timed([str(STOP)], first["event"], env_for(first["project"], "BENCH"), n, grow(huge))

    return {f"first Stop, {args.huge_gb} GiB": first_stop, f"later Stop, {args.huge_gb} GiB": later_stop}


def other_series(args, root: Path, small: Path, big: Path, grow: Grower, stack, notes: list) -> dict:
    """Work and review loops' Stops, and the ralph-loop hook's; each skipped (with a note)
    when what it needs is missing."""
    series = {}
    work_t = root / "work.jsonl"
    make_transcript(work_t, 10 * 1024)
    p_work, ev_work = mode_loop(root, "p_work", "work", work_t, env_for(None, "BENCH"))
    series["work loop, 10 KB"] = lambda n: timed(
        [str(STOP)], ev_work, env_for(p_work, "BENCH"), n, grow(work_t)
    )
    fake, pr = github(stack, root)
    if fake is None:
        notes.append("review loop: not measured (needs gh and openssl)")
    else:
        review_t = root / "review.jsonl"
        make_transcript(review_t, 10 * 1024)
        env = env_for(None, "BENCH", LW_REMOTE=fake.remote, **fake.env())
        p_rev, ev_rev = mode_loop(root, "p_review", f"review --pr {pr}", review_t, env)
        rev_env = dict(env, CLAUDE_PROJECT_DIR=str(p_rev))
        series["review loop, 10 KB"] = lambda n: timed([str(STOP)], ev_rev, rev_env, n, grow(review_t))
    hook, where = ralph_hook(args.ralph_hook, args.fetch_ralph)
    if hook is None:
        notes.append(f"ralph-loop hook: not measured ({where})")
        return series
    notes.append(f"ralph-loop hook: {where}")
    for label, transcript in (("10 KB", small), (f"{args.big_mb} MB", big)):
        project, keep = ralph_project(root, f"ralph-{label.replace(' ', '')}")
        event = owner_event(project, transcript)

        def run(n, event=event, project=project, keep=keep, transcript=transcript):
            grown = grow(transcript)
            return timed(
                ["bash", str(hook)], event, env_for(project), n, lambda: (keep(), grown()), cwd=project
            )

        series[f"ralph-loop hook, {label}"] = run
    return series


def checks_of(args, med: dict, bare: float) -> dict:
    big_key = f"active {args.big_mb} MB"
    hist_key = f"  + {args.history_lines // 1000}k history"
    small = med["active 10 KB"]
    checks = {
        "no active loop <= 0.2x bare": med["fast path"] <= 0.2 * bare,
        "session start, nothing to install <= 1.0x bare": med["session start, installed"] <= 1.0 * bare,
        "another session's Stop <= 1.0x bare": med["foreign session"] <= 1.0 * bare,
        "owner's Stop, 10 KB transcript <= 1.5x bare": small <= 1.5 * bare,
        "the same with PYTHONDONTWRITEBYTECODE=1 <= 1.5x bare": med["  PYTHONDONTWRITEBYTECODE=1"]
        <= 1.5 * bare,
        "the same from a read-only plugin <= 1.5x bare": med["  read-only plugin"] <= 1.5 * bare,
        "the same answered in its own process (no resident server) <= 2.5x bare": med["  in its own process"]
        <= 2.5 * bare,
        f"owner's Stop, {args.big_mb} MB transcript <= 3.0x bare": med[big_key] <= 3.0 * bare,
        f"{big_key} within 20% of 10 KB": abs(med[big_key] - small) <= 0.2 * small,
        "history size does not matter (within 20%)": abs(med[hist_key] - small) <= 0.2 * small,
        f"{args.task_lines // 1000}k-line tasks within 1.5x of 10 tasks": med[
            f"active, {args.task_lines // 1000}k-line tasks"
        ]
        <= 1.5 * med["active, 10 tasks"],
        f"first Stop on {args.huge_gb} GiB within 2x of a later Stop": med[f"first Stop, {args.huge_gb} GiB"]
        <= 2.0 * med[f"later Stop, {args.huge_gb} GiB"],
        "work loop's Stop <= 8x bare": med["work loop, 10 KB"] <= 8.0 * bare,
    }
    if "review loop, 10 KB" in med:
        checks["review loop's Stop <= 60x bare"] = med["review loop, 10 KB"] <= 60.0 * bare
    for label, ours in (("10 KB", small), (f"{args.big_mb} MB", med[big_key])):
        ralph = med.get(f"ralph-loop hook, {label}")
        if ralph is not None:
            checks[f"owner's Stop, {label} <= 0.2x the ralph-loop hook's"] = ours <= 0.2 * ralph
    return checks


def report(args, results: dict, med: dict, bare: float, checks: dict, notes: list, extra: dict) -> None:
    if args.json:
        out = {
            "median_ms": med,
            "min_ms": {k: min(v) for k, v in results.items()},
            "ratio_to_bare": {k: v / bare for k, v in med.items()},
            "checks": checks,
            "notes": notes,
            **extra,
        }
        print(json.dumps(out, indent=2))
        return
    print(f"interpreter: {sys.executable}  runs per series: {len(results['fast path'])}")
    for note in notes:
        print(note)
    print(f"{'series':<30}{'median ms':>10}{'p90 ms':>9}{'x bare':>8}")
    for k, v in results.items():
        p90 = sorted(v)[int(0.9 * (len(v) - 1))]
        print(f"{k:<30}{med[k]:>10.1f}{p90:>9.1f}{med[k] / bare:>8.2f}")
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'MISS'}  {name}")


def main() -> int:
    args = arguments()
    root = Path(tempfile.mkdtemp(prefix="lw-bench-"))
    try:
        with contextlib.ExitStack() as stack:
            PLUGIN_DATA.append(plugin_data(root))  # as the SessionStart bootstrap leaves it
            small, big = root / "small.jsonl", root / "big.jsonl"
            make_transcript(small, 10 * 1024)
            make_transcript(big, args.big_mb * 1024 * 1024)
            grow, notes = Grower(), []
            series, keep = prompt_series(args, root, small, big, grow)
            series.update(huge_series(args, root, grow))
            series.update(other_series(args, root, small, big, grow, stack, notes))
            results = {name: [] for name in series}
            # Interleave the measurements so machine noise hits all of them alike.
            rounds = min(5, max(1, args.runs))  # --runs 1: one Stop per series, not five
            per = max(1, args.runs // rounds)
            for _ in range(rounds):
                for name, fn in series.items():
                    results[name] += fn(per)
            med = {k: statistics.median(v) for k, v in results.items()}
            bare = med["bare python -c pass"]
            checks = checks_of(args, med, bare)
            ev_small, p_small = keep["small"]
            imported = imported_modules(ev_small, p_small)
            # A module or its submodules: "re" and "re._parser", never "reprlib".
            leaked = sorted(
                m for m in imported if any(m == x or m.startswith(x + ".") for x in NOT_ON_THE_PROMPT_PATH)
            )
            checks[
                "a prompt-mode Stop imports no task mode, no dependency, no pathlib, re or json"
                + (f" ({', '.join(leaked)})" if leaked else "")
            ] = not leaked
            ev_t100k, p_t100k = keep["t100k"]
            peak = peak_rss_mb([str(STOP)], ev_t100k, env_for(p_t100k, "BENCH"), grow(small))
            checks[f"{args.task_lines // 1000}k-line tasks Stop under 50 MiB (peak {peak:.0f} MiB)"] = (
                peak < 50
            )
            extra = {
                "peak_rss_mb_tasks": peak,
                "prompt_stop_imports": sorted(m for m in imported if m.startswith("loopwright")),
            }
            report(args, results, med, bare, checks, notes, extra)
        return 0 if (all(checks.values()) or not args.check) else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
