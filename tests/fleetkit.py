"""Shared pieces of the fleet's end-to-end tests: a pushed remote (a local bare repository),
`loopwright` commands, workers started as if on separate machines (each its own data directory,
HOME and output file), their rows and beats as the database holds them, and a router that lets
one scripted model serve several loops at once by the goal each conversation started with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import claude_cli
import fakeapi
import pgcluster
from conftest import KEY_HOME, REPO, cli

LW = str(REPO / "bin" / "loopwright")


def git(*args, cwd=None) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def make_remote(tmp_path: Path) -> Path:
    """A bare repository with one commit on main."""
    bare, seed = tmp_path / "remote.git", tmp_path / "seed"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    git("init", "-q", "-b", "main", str(seed))
    (seed / "README.md").write_text("# demo\n")
    git("-C", str(seed), "add", "README.md")
    git("-C", str(seed), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    git("-C", str(seed), "push", "-q", str(bare), "main")
    return bare


def lw(*args, env=None) -> subprocess.CompletedProcess:
    base = dict(os.environ, LOOPWRIGHT_PYTHON=sys.executable, XDG_CONFIG_HOME=KEY_HOME)
    return subprocess.run(
        [LW, *args], capture_output=True, text=True, timeout=60, env={**base, **(env or {})}
    )


def lw_here(*args, env=None):
    """`loopwright ARGS…` through click's runner in this process, for what a test does often
    and whose command is not its subject (queueing its loops, waiting on a line of output): the
    command's own code, without an interpreter's start and psycopg's import each time (about
    0.35 s of CPU). Same fields as :func:`lw`'s result."""
    return cli(Path.cwd(), *args, env=env)


def start_worker(
    url: str,
    remote: Path,
    data: Path,
    server,
    home: Path,
    *extra: str,
    env: dict | None = None,
    permissions: str = "--dangerously-skip-permissions",
) -> subprocess.Popen:
    """A worker whose output (JSON lines) goes to ``data``.log (read with worker_log); ``env`` adds to the
    environment of the worker, its runners and their clients; ``permissions`` is the permission
    flag its Claude Code clients get."""
    home.mkdir(exist_ok=True)
    argv = [
        LW, "worker", "--db", url, "--slots", "1", "--allow-repo", f"file://{remote}",
        "--data", str(data), "--lease", "6", "--heartbeat", "1", "--poll", "0.5",
        "--log-format", "json",  # the tests read its events (a later --log-format in extra wins)
        "--claude", claude_cli.claude_binary(), f"--claude-arg={permissions}",
        "--runner-arg=--poll-seconds", "--runner-arg=0.5", "--runner-arg=--stall-polls", "--runner-arg=1000",
        *extra,
    ]  # fmt: skip
    extra_env = {"LOOPWRIGHT_PYTHON": sys.executable, "XDG_CONFIG_HOME": KEY_HOME, **(env or {})}
    env = claude_cli.offline_env(server.url, home, extra_env)
    with open(f"{data}.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    proc.log = Path(f"{data}.log")
    return proc


def worker_log(proc: subprocess.Popen) -> str:
    return proc.log.read_text(errors="replace")


def _read(url: str, what):
    """``what(registry)`` on the registry at ``url``, as `fleet … --json` prints it (through the
    same JSON codec). Read in this process, on a registry kept open: a test polls these, and a
    `loopwright` command run for each look would start an interpreter, import psycopg and
    connect again, about 0.4 s of CPU. The commands' own output is tested where it is the
    subject. A registry whose server went away meanwhile (a failover test) is opened again."""
    from loopwright.core import jsoncodec

    try:
        rows = what(pgcluster.reader(url))
    except Exception:
        pgcluster.forget(url)
        rows = what(pgcluster.reader(url))
    return json.loads(jsoncodec.dumps(rows))


def row_of(url: str, name: str) -> dict:
    """The fleet's row of the loop ``name`` (`fleet ls --json`), or {} when there is none."""
    return next((r for r in _read(url, lambda reg: reg.fleet_loops()) if r["name"] == name), {})


def beat_of(url: str) -> float:
    """When the (one) worker last beat, by the database's clock (`fleet workers --json`)."""
    return max((w["beat_at"] for w in _read(url, lambda reg: reg.workers())), default=0.0)


def working_in(directory: Path) -> list[int]:
    """The processes whose current directory is ``directory`` or below (a loop's runner and
    its Claude Code client run in the loop's clone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd == str(directory) or cwd.startswith(f"{directory}/"):
            found.append(int(entry.name))
    return found


def stop_worker(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return worker_log(proc)


class ByGoal:
    """A fakeapi reply that picks a script by the loop a conversation belongs to: the first key
    of ``scripts`` found in the request's messages (a goal's marker word). Each script's items
    are used in order; when one runs out, ``then`` answers (default: a plain text)."""

    def __init__(self, scripts: dict, then=None) -> None:
        self.scripts = {k: list(v) for k, v in scripts.items()}
        self.used = {k: 0 for k in scripts}
        self.then = then or fakeapi.text("Nothing more to do.")
        self.lock = threading.Lock()  # the server answers requests on threads of its own

    def key_of(self, request) -> str | None:
        blob = json.dumps(request.body.get("messages", []))
        return next((k for k in self.scripts if k in blob), None)

    def __call__(self, request):
        key = self.key_of(request)
        with self.lock:
            if key is None or self.used[key] >= len(self.scripts[key]):
                return self.then
            item = self.scripts[key][self.used[key]]
            self.used[key] += 1
        return item(request) if callable(item) and not isinstance(item, fakeapi.Reply) else item
