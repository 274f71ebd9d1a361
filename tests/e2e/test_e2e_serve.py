"""`loopwright serve` as a user runs it: a real monitor process, a run started through its
REST API driving the real Claude Code CLI against the scripted Messages API, watched
through the API until the loop ends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import pytest

import claude_cli
import fakeapi
from conftest import KEY_HOME, REPO, lw_env
from waiting import wait_for

pytestmark = pytest.mark.e2e


def call(base, token, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.status, json.loads(res.read())


def run_finished(base, token, run_id):
    """The run's row once it has ended or stopped, and the listing it came in (polled through the API)."""

    def ended():
        _, data = call(base, token, "GET", "/api/loops")
        row = next(r for r in data["runs"] if r["id"] == run_id)
        return (row, data) if row["status"] in ("ended", "stopped") else None

    return wait_for(ended, f"run {run_id} to end", every=0.3)


def test_a_run_started_through_the_api_is_watched_to_its_end(project, tmp_path):
    env_extra = {
        "LOOPWRIGHT_PYTHON": sys.executable,
        "XDG_CONFIG_HOME": KEY_HOME,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PYTHONUNBUFFERED": "1",
    }
    replies = [fakeapi.text("Working on it."), fakeapi.text("Done.\n<promise>LOOP COMPLETE</promise>")]
    with fakeapi.ScriptedServer(replies) as server:
        cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0"]
        cmd += ["--claude", claude_cli.claude_binary(), "--claude-arg=--dangerously-skip-permissions"]
        env = claude_cli.offline_env(server.url, tmp_path / "home", env_extra)
        monitor = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        try:
            base = None
            for line in monitor.stdout:
                if "API on " in line:
                    base = line.split("API on ")[1].split("/api/")[0]
                    break
            assert base, "the monitor never said where it listens"
            token = (tmp_path / "data" / "loopwright" / "serve" / "token").read_text().strip()
            status, made = call(
                base, token, "POST", "/api/loops", {"project": str(project), "goal": "tidy up"}
            )
            assert status == 201
            run_id = made["run"]["id"]
            row, data = run_finished(base, token, run_id)
            assert row["status"] == "ended" and row["outcome"] == "LOOP_DONE", row
            loops = data["projects"][0]["loops"]
            assert loops[0]["outcome"] == "LOOP_DONE" and loops[0]["iteration"] == 2

            req = urllib.request.Request(base + "/api/events", headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=30) as stream:  # the fleet's event may come first
                heads: list[str] = []
                while len(heads) < 12 and not any(h.startswith("event: loops") for h in heads):
                    heads.append(stream.readline().decode())
            assert any(h.startswith("event: loops") for h in heads), heads
        finally:
            monitor.terminate()
            monitor.wait(timeout=30)


def test_an_open_page_does_not_keep_the_monitor_from_exiting(project, tmp_path):
    """SIGTERM with a page's event stream open: the stream ends and the monitor exits cleanly,
    not cut by uvicorn when its grace runs out (an "ERROR: Cancel … running task(s)" line)."""
    env = dict(lw_env(XDG_DATA_HOME=str(tmp_path / "data")), PYTHONUNBUFFERED="1")
    cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0"]
    errors = tmp_path / "serve.err"
    with open(errors, "wb") as err:
        monitor = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        base = next(
            line.split("API on ")[1].split("/api/")[0] for line in monitor.stdout if "API on " in line
        )
        token = (tmp_path / "data" / "loopwright" / "serve" / "token").read_text().strip()
        req = urllib.request.Request(base + "/api/events", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=60) as stream:
            assert stream.readline().decode().startswith("event: ")  # the stream is open
            monitor.terminate()
            rest = stream.read()  # until the server ends it
        assert monitor.wait(timeout=60) in (0, -signal.SIGTERM)  # uvicorn ends with the signal it got
    finally:
        if monitor.poll() is None:
            monitor.kill()
            monitor.wait()
    assert "ERROR" not in errors.read_text(), errors.read_text()
    assert b"event: " not in rest or rest.endswith(b"\n\n")  # whole events, then the end
