"""Notifications for every loop (issue 19 §4): the real Claude Code CLI runs a loop in a
session whose 80% dollar gate fires and whose user answers stop; the webhook in the user's
own config.json receives "gate_waiting" once and "loop_ended" once, sent by detached
notifiers the Stop hook started. And `serve --notify` tells of a run the monitor shows."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

import claude_cli
import fakeapi
from conftest import KEY_HOME, REPO
from e2e_support import journal, loop_json, ok
from waiting import wait_for

pytestmark = pytest.mark.e2e

GATE = 'Gate "budget-escalation"'
WORK = {"input_tokens": 100_000, "output_tokens": 10_000}  # $0.45 a turn at Sonnet's list prices


class Receiver:
    """A local webhook: every POST's path and JSON body, answered 200."""

    def __init__(self):
        self.bodies: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.bodies.append(dict(json.loads(data), _path=self.path))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def gate_answerer(option: str):
    def reply(request: fakeapi.Request):
        if GATE in request.last_user_text():
            return fakeapi.bash(f"loopwright gate answer budget-escalation {option}", text="Recording it.")
        return fakeapi.text("I saw no gate in this prompt.")

    return reply


def finished(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_an_interactive_loop_notifies_a_waiting_gate_and_its_end(claude, project, tmp_path):
    config = tmp_path / "config"
    (config / "loopwright").mkdir(parents=True, mode=0o700)
    receiver = Receiver()
    try:
        settings = config / "loopwright" / "config.json"
        settings.write_text(json.dumps({"notify": [f"webhook:{receiver.url}"]}))
        settings.chmod(0o600)
        res = claude.run(
            '/loopwright:loop "Tune the cache" --max-iterations 10 --max-dollars 1'
            " --no-wrap-up --completion-promise DONE",
            [
                fakeapi.text("Iteration 1.", usage=WORK),
                fakeapi.text("Iteration 2.", usage=WORK),
                gate_answerer("stop"),
                fakeapi.text("The user chose to stop."),
                fakeapi.text("MUST NOT BE SENT"),
            ],
            env={"XDG_CONFIG_HOME": str(config)},  # this user's own key and config.json
        )
        ok(res)
        assert loop_json(project)["outcome"] == "GATE_STOP:budget-escalation"
        told = [e for e in journal(project) if e["event"] == "notify"]
        assert [e["what"] for e in told] == ["gate_waiting", "loop_ended"], told
        assert all(e["notifiers"] == ["webhook"] for e in told)  # the kind, never the URL
        # Every notifier done: nothing more comes.
        wait_for(lambda: all(finished(e["pid"]) for e in told), "the notifiers finish")

        by_event = {b["event"]: b for b in receiver.bodies}
        assert sorted(b["event"] for b in receiver.bodies) == ["gate_waiting", "loop_ended"], receiver.bodies
        gate = by_event["gate_waiting"]
        assert (gate["loop"], gate["project"], gate["_path"]) == ("prompt", str(project), "/hook")
        question = "Approaching dollars ($0.90/$1.00). Continue, raise ceiling, or stop?"
        assert gate["gates"] == [
            {"name": "budget-escalation", "question": question, "options": ["continue", "raise", "stop"]}
        ]
        assert question in gate["reason"]
        end = by_event["loop_ended"]
        assert (end["loop"], end["outcome"]) == ("prompt", "GATE_STOP:budget-escalation")
        assert end["report"].endswith("/.loopwright/loops/prompt/report.md")
        assert not [e for e in journal(project) if e["event"] == "notify_failed"]
    finally:
        receiver.close()


def test_the_monitor_tells_of_the_loops_it_shows(project, tmp_path):
    """`serve --notify webhook:URL`: a run started through the API ends, and the monitor tells."""
    receiver = Receiver()
    replies = [fakeapi.text("Working on it."), fakeapi.text("Done.\n<promise>LOOP COMPLETE</promise>")]
    extra = {"LOOPWRIGHT_PYTHON": sys.executable, "XDG_CONFIG_HOME": KEY_HOME, "XDG_DATA_HOME": str(tmp_path)}
    with fakeapi.ScriptedServer(replies) as server:
        cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0"]
        cmd += ["--claude", claude_cli.claude_binary(), "--claude-arg=--dangerously-skip-permissions"]
        cmd += ["--notify", f"webhook:{receiver.url}"]
        env = claude_cli.offline_env(server.url, tmp_path / "home", extra)
        monitor = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        try:
            base = next(ln for ln in monitor.stdout if "API on " in ln).split("API on ")[1].split("/api/")[0]
            token = (tmp_path / "loopwright" / "serve" / "token").read_text().strip()
            req = urllib.request.Request(
                base + "/api/loops",
                data=json.dumps({"project": str(project), "goal": "tidy up"}).encode(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=30) as res:
                assert res.status == 201
            wait_for(lambda: any(b["event"] == "loop_ended" for b in receiver.bodies), "the monitor tells")
            (end,) = [b for b in receiver.bodies if b["event"] == "loop_ended"]
            assert (end["loop"], end["outcome"], end["project"]) == ("prompt", "LOOP_DONE", str(project))
        finally:
            monitor.terminate()
            monitor.wait(timeout=60)
            receiver.close()
