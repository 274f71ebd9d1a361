"""A monitor killed mid-iteration and started again (issue 19 §4): no ghost run. The
real `loopwright serve` starts a task-auto run through its API; the real Claude Code CLI's
first model turn hangs in the scripted Messages API; the monitor is SIGKILLed; a new
monitor on the same data adopts the runner that outlived it, follows the loop to its end,
and the task directory takes a new run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest

import claude_cli
import fakeapi
from conftest import KEY_HOME, REPO, lw_env
from waiting import wait_for

pytestmark = pytest.mark.e2e

MODULE = "demo"


def call(base, token, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def setup_task(project: Path) -> None:
    """main with one commit, then `lifecycle init demo` and a target to work on."""

    def git(*args):
        subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, timeout=60)

    git("config", "user.name", "Test User")
    git("config", "user.email", "test@example.com")
    git("checkout", "-q", "-b", "main")
    (project / "README.md").write_text("# widget project\n")
    git("add", "README.md")
    git("commit", "-q", "-m", "initial commit")
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), "lifecycle", "init", MODULE],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    with open(project / "TASK" / MODULE / ".target.md", "a", encoding="utf-8") as fh:
        fh.write("\nAdd a module `widget.py` with a function `make_widget()`.\n")
    git("commit", "-q", "-am", "describe the widget task")


class Monitor:
    """One `loopwright serve` process: where it listens, and what it said before that."""

    def __init__(self, project: Path, env: dict):
        cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0"]
        cmd += ["--claude", claude_cli.claude_binary(), "--claude-arg=--dangerously-skip-permissions"]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        self.said: list[str] = []
        self.base = None
        found = threading.Event()

        def read():  # the whole output, so the monitor never blocks on a full pipe
            for line in self.proc.stdout:
                self.said.append(line)
                if "API on " in line and self.base is None:
                    self.base = line.split("API on ")[1].split("/api/")[0]
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        assert found.wait(120) and self.base, f"the monitor never said where it listens: {self.said}"

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=60)


def kill_tree(pid) -> None:
    """A runner the monitor started, and everything it started (its client has its own group)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=30)


def test_a_killed_monitor_leaves_no_ghost_run(project, tmp_path):
    setup_task(project)
    task_dir = str(project / "TASK" / MODULE)
    extra = {
        "LOOPWRIGHT_PYTHON": sys.executable,
        "XDG_CONFIG_HOME": KEY_HOME,
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    release = threading.Event()
    # The first model turn hangs until released; then nothing the agent does signals a step,
    # so the task loop ends on its own (STOPPED:no-signal) after its reminders.
    first = fakeapi.hang(600, fakeapi.text("Looking at the task."), release=release)
    pids = []
    with fakeapi.ScriptedServer([first], default=fakeapi.text("Nothing to report.")) as server:
        env = claude_cli.offline_env(server.url, tmp_path / "home", extra)
        one = Monitor(project, env)
        two = None
        try:
            token = (tmp_path / "data" / "loopwright" / "serve" / "token").read_text().strip()
            session = str(uuid.uuid4())
            status, made = call(
                one.base, token, "POST", f"/api/sessions/{session}/task-auto", {"taskDir": task_dir}
            )
            assert status == 201, made
            run_id = made["run"]["id"]
            wait_for(lambda: server.conversation_requests, "the model turn began")

            def row(base):
                _, data = call(base, token, "GET", "/api/loops")
                return next(r for r in data["runs"] if r["id"] == run_id)

            live = wait_for(lambda: (r := row(one.base))["loop"] and r, "the run's loop is known")
            assert live["status"] == "running" and live["pid"] and live["pid_started"]
            pids.append(live["pid"])

            one.proc.send_signal(signal.SIGKILL)  # mid-iteration: the model turn still hangs
            one.proc.wait(timeout=60)
            assert psutil.pid_exists(live["pid"]), "the runner died with its monitor"

            two = Monitor(project, env)
            assert any("its runner still runs" in line for line in two.said), two.said
            assert call(two.base, token, "GET", f"/api/sessions/{session}/task-auto")[0] == 200
            # While the run is live its task directory is taken.
            taken = call(
                two.base, token, "POST", f"/api/sessions/{uuid.uuid4()}/task-auto", {"taskDir": task_dir}
            )
            assert taken[0] == 409, taken

            release.set()
            done = wait_for(
                lambda: (r := row(two.base))["status"] not in ("starting", "running") and r, "end"
            )
            loop = json.loads((project / ".loopwright" / "loops" / "task" / "loop.json").read_text())
            assert loop["status"] == "ended" and loop["outcome"], loop
            assert (done["status"], done["outcome"]) == ("ended", loop["outcome"]), done

            # No ghost: the session and the task directory are free for a new run.
            assert call(two.base, token, "GET", f"/api/sessions/{session}/task-auto")[0] == 404
            again = call(
                two.base, token, "POST", f"/api/sessions/{uuid.uuid4()}/task-auto", {"taskDir": task_dir}
            )
            assert again[0] == 201, again
            pids.append(again[1]["run"]["pid"])
        finally:
            release.set()
            for pid in pids:
                kill_tree(pid)
            for m in (one, two):
                if m is not None:
                    m.end()
