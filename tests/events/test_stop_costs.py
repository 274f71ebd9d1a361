"""What one Stop of the owning session costs, counted rather than timed: the bytes its
process reads (/proc/self/io rchar), the processes it starts (an audit hook) and the modules
it imports (sys.modules), all in the interpreter the real launcher starts. A cost that grows
with the transcript, the history or the task registry fails here on any machine, however
busy; how many milliseconds a Stop takes is `make bench`'s business (bench/bench_stop.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, lw_env
from loopwright.state.transcript import FIRST_READ_WINDOW

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts bytes with /proc/self/io")

# Runs the hook's stop.py in place of the interpreter the launcher starts (same -I -S), and
# writes what it counted to the file named first. Nothing is imported before the Stop's own
# modules are listed, so the list is the Stop's.
MEASURE = r"""
import sys

out, script = sys.argv[1], sys.argv[-1]
sys.argv = [script]
started, opened = [], []
STARTS = {"subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec", "os.spawn", "os.system"}


def _audit(event, args):
    if event in STARTS:
        started.append(event)
    elif event == "open" and isinstance(args[0], str):
        opened.append([args[0], args[1], args[2]])


sys.addaudithook(_audit)
try:
    exec(compile(open(script, "rb").read(), script, "exec"), {"__name__": "__main__", "__file__": script})
except SystemExit:
    pass
finally:
    modules = sorted(sys.modules)
    with open("/proc/self/io") as fh:
        io = fh.read()
    import json

    with open(out, "w") as fh:
        json.dump({"io": io, "started": started, "opened": opened, "modules": modules}, fh)
"""

# Modules a prompt-mode Stop never imports: another mode's code, a run-time dependency, or
# a standard module that costs more to import than the Stop's own work (bench_stop.py
# keeps the same list for its timing).
NOT_ON_THE_PROMPT_PATH = (
    "loopwright.modes.task",
    "click",
    "orjson",
    "portalocker",
    "psutil",
    "re2",
    "pathlib",
    "re",
    "json",
    "contextlib",
    "dataclasses",
)
# Bytes a Stop may read beyond another Stop's for reasons that do not grow with any file
# (longer paths, a line more in a small file); far below every size that grows below.
SLACK = 64 * 1024
HISTORY_TAIL = 64 * 1024  # what store.last_jsonl_record reads of history.jsonl at most


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    """hooks/ and lib/ copied and byte-compiled here, before any Stop: every Stop measured
    reads the same .pyc files, and edits to the checkout while the suite runs cannot reach
    them (a module compiled again adds its source to a count)."""
    root = tmp_path_factory.mktemp("plugin")
    for part in ("hooks", "lib"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "lib")], check=True, timeout=300)
    measure, wrapper = root / "measure.py", root / "python"
    measure.write_text(MEASURE)
    wrapper.write_text(f"#!/bin/sh\nexec '{sys.executable}' -I -S '{measure}' \"$LW_COSTS\" \"$@\"\n")
    wrapper.chmod(0o755)
    return root


def assistant_line(i: int) -> str:
    message = {
        "id": f"m{i}",
        "model": "claude-sonnet-4-5",
        "role": "assistant",
        "content": [{"type": "text", "text": "w" * 2000}],
        "usage": {"input_tokens": 1, "output_tokens": 1},  # thousands of turns stay within the budget
    }
    return json.dumps({"type": "assistant", "message": message}) + "\n"


def task_line(i: int, status: str = "open") -> str:
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
    )


def grow(path: Path, lines, at_least: int = 0) -> None:
    """Append ``lines`` (an iterable of str), and go on until the file is ``at_least`` bytes."""
    with open(path, "a") as fh:
        for text in lines:
            fh.write(text)
        i = 0
        while fh.tell() < at_least:
            fh.write(assistant_line(i))
            i += 1


class Loop:
    """A project whose loop is owned by session S1, and its transcript."""

    def __init__(self, base: Path, name: str, plugin: Path, transcript_bytes: int) -> None:
        self.project, self.transcript, self.plugin = base / name, base / f"{name}.jsonl", plugin
        self.project.mkdir()
        grow(self.transcript, [], transcript_bytes)
        argv = [str(REPO / "bin" / "loopwright"), "-C", str(self.project), "start", "--session", "S1"]
        argv += ["--max-iterations", "1000", "goal"]
        out = subprocess.run(argv, capture_output=True, text=True, env=lw_env(), timeout=120)
        assert out.returncode == 0, out.stderr
        self.dir = self.project / ".loopwright" / "loops" / "prompt"
        self.turns = 0

    def stop(self) -> dict:
        """One Stop through the copied launcher after a new turn; what it read, started, imported."""
        self.turns += 1
        grow(self.transcript, [assistant_line(10**6 + self.turns)])
        counts = self.project.parent / f"{self.project.name}-counts.json"
        event = {"session_id": "S1", "transcript_path": str(self.transcript), "cwd": str(self.project)}
        env = lw_env(
            CLAUDE_PROJECT_DIR=str(self.project),
            LOOPWRIGHT_PYTHON=str(self.plugin / "python"),
            LW_COSTS=str(counts),
        )
        out = subprocess.run(
            [str(self.plugin / "hooks" / "stop")],
            input=json.dumps(dict(event, stop_hook_active=True)),
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout).get("decision") == "block", out.stdout
        res = json.loads(counts.read_text())
        counts.unlink()
        io = dict(line.split(": ") for line in res["io"].splitlines())
        return {**res, "rchar": int(io["rchar"])}


def test_a_stop_reads_the_new_turn_not_the_whole_transcript(plugin, tmp_path):
    small, big = Loop(tmp_path, "small", plugin, 10_000), Loop(tmp_path, "big", plugin, 24 * 1024 * 1024)
    # The first Stop looks back one window at most: once for the nonce, once to count.
    first_small, first_big = small.stop(), big.stop()
    read = (first_big["rchar"], first_small["rchar"])
    assert read[0] - read[1] <= 2 * FIRST_READ_WINDOW + SLACK, read
    # A later Stop reads what the turn added: the same on 10 KB as on 24 MB.
    later_small, later_big = small.stop(), big.stop()
    assert abs(later_big["rchar"] - later_small["rchar"]) <= SLACK, (later_big["rchar"], later_small["rchar"])
    assert later_big["rchar"] < first_big["rchar"] - FIRST_READ_WINDOW


def test_a_stop_reads_no_more_of_a_long_history_than_its_tail(plugin, tmp_path):
    short, long = Loop(tmp_path, "short", plugin, 10_000), Loop(tmp_path, "long", plugin, 10_000)
    short.stop(), long.stop()
    history = long.dir / "history.jsonl"
    last = history.read_text().splitlines()[-1] + "\n"
    grow(history, [last] * max(1, (8 * 1024 * 1024) // len(last)))  # 8 MB of history
    a, b = short.stop(), long.stop()
    assert b["rchar"] - a["rchar"] <= HISTORY_TAIL + SLACK, (b["rchar"], a["rchar"])


def test_a_stop_reads_a_large_task_registry_by_what_was_added(plugin, tmp_path):
    """Both registries are past taskindex.SMALL_FILE, so both go through the index; 8x the
    lines cost the same bytes once it is built, new tasks included."""
    loops = {n: Loop(tmp_path, f"tasks{n}", plugin, 10_000) for n in (5_000, 40_000)}
    for n, loop in loops.items():
        grow(
            loop.dir / "tasks.jsonl",
            (task_line(i) if i % 3 else task_line(i - 1, "done") for i in range(1, n + 1)),
        )
        loop.stop()  # builds the index: the one Stop that reads the whole registry
    for n, loop in loops.items():
        grow(loop.dir / "tasks.jsonl", [task_line(n + 1)])
    few, many = (loops[n].stop() for n in (5_000, 40_000))
    assert abs(many["rchar"] - few["rchar"]) <= SLACK, (many["rchar"], few["rchar"])
    assert any(p.endswith("tasks-index.sqlite") for p, _, _ in many["opened"])
    assert many["started"] == []


def test_the_owners_prompt_stop_starts_no_process_and_imports_only_its_own(plugin, tmp_path):
    loop = Loop(tmp_path, "p", plugin, 10_000)
    loop.stop()
    res = loop.stop()
    assert res["started"] == []
    leaked = [
        m for m in res["modules"] if any(m == x or m.startswith(x + ".") for x in NOT_ON_THE_PROMPT_PATH)
    ]
    assert leaked == [], leaked
    assert "loopwright.modes.prompt" in res["modules"]  # the list is the Stop's, not an empty one
    # The history is appended to and its tail read; never opened for writing in place.
    history = [flags for p, _, flags in res["opened"] if p.endswith("/history.jsonl")]
    assert history and all(f & os.O_ACCMODE == os.O_RDONLY or f & os.O_APPEND for f in history), history
