"""`loopwright run` against the real Claude Code CLI and the scripted Messages API: the
runner starts a loop in a headless client, lets the Stop hook drive it, and brings the
client back when it goes away (block cap, a hung response) while the loop still runs."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

import claude_cli
import fakeapi
from conftest import KEY_HOME, REPO
from e2e_support import run_headless as run

pytestmark = pytest.mark.e2e


def kinds(events):
    return [e["event"] for e in events if e["event"] not in ("progress", "turn_end")]


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    h.mkdir()
    return h


def test_a_run_ends_when_the_loop_is_done(project, home):
    replies = [
        fakeapi.text("Iteration one."),
        fakeapi.text("Iteration two."),
        fakeapi.text("All done and checked.\n<promise>DONE</promise>"),
    ]
    with fakeapi.ScriptedServer(replies) as server:
        out, events = run(
            project, home, server, "write the notes", "--completion-promise", "DONE", "--max-dollars", "5"
        )
    assert out.returncode == 0, out.stderr + out.stdout
    assert kinds(events) == ["started", "client", "client_exit", "ended"], events
    client = next(e for e in events if e["event"] == "client")
    i = client["argv"].index("--max-budget-usd")  # the client's own ceiling as a backstop
    assert client["argv"][i + 1] == "5.00"
    assert events[-1]["outcome"] == "LOOP_DONE" and server.remaining == 0
    loop = json.loads((project / ".loopwright/loops/prompt/loop.json").read_text())
    assert loop["owner_session"] == events[0]["session"] and loop["status"] == "ended"


def test_the_runner_carries_the_loop_past_the_block_cap(project, home):
    replies = [fakeapi.text(f"Iteration {i}.") for i in range(1, 6)]
    replies.append(fakeapi.text("Finished.\n<promise>DONE</promise>"))
    with fakeapi.ScriptedServer(replies) as server:
        out, events = run(
            project,
            home,
            server,
            "polish the docs",
            "--completion-promise",
            "DONE",
            env={"CLAUDE_CODE_STOP_HOOK_BLOCK_CAP": "2"},
        )
    assert out.returncode == 0, out.stderr + out.stdout
    resumes = [e for e in events if e["event"] == "resume"]
    assert resumes and all("client exited" in e["reason"] for e in resumes), events
    assert events[-1] == {**events[-1], "event": "ended", "outcome": "LOOP_DONE"}
    history = (project / ".loopwright/loops/prompt/history.jsonl").read_text().splitlines()
    assert len(history) == 6 and server.remaining == 0


def test_a_hung_response_is_a_stall_the_runner_recovers_from(project, home):
    replies = [
        fakeapi.text("Iteration one."),
        fakeapi.hang(600),  # the second turn's response never comes (answered when the server stops)
        fakeapi.text("Picked up again and finished.\n<promise>DONE</promise>"),
    ]
    with fakeapi.ScriptedServer(replies) as server:
        out, events = run(
            project, home, server, "fix the bug", "--completion-promise", "DONE", "--stall-polls", "3"
        )
    assert out.returncode == 0, out.stderr + out.stdout
    assert "stall" in kinds(events) and events[-1]["outcome"] == "LOOP_DONE", events
    stall_at = kinds(events).index("stall")
    assert kinds(events)[stall_at + 1] == "resume"


def test_recoveries_are_bounded(project, home):
    # Every client hangs: three recoveries in the iteration, then the run gives up.
    with fakeapi.ScriptedServer([], default=fakeapi.hang(600)) as server:
        out, events = run(project, home, server, "never answered", "--stall-polls", "2", "--name", "hung")
    assert out.returncode == 3, out.stderr + out.stdout
    assert kinds(events).count("resume") == 3 and events[-1]["outcome"] == "STOPPED:stall_limit", events
    loop = json.loads((project / ".loopwright/loops/hung/loop.json").read_text())
    assert loop["status"] == "ended" and loop["outcome"] == "STOPPED:stall_limit"


def test_claude_missing_is_one_line(project, home):
    with fakeapi.ScriptedServer([]) as server:
        out = subprocess.run(
            [
                str(REPO / "bin" / "loopwright"),
                "-C",
                str(project),
                "run",
                "--claude",
                "no-such-claude",
                "goal",
            ],
            env=claude_cli.offline_env(server.url, home, {"LOOPWRIGHT_PYTHON": sys.executable}),
            capture_output=True,
            text=True,
        )
    assert out.returncode == 1 and out.stderr.strip().count("\n") == 0
    assert "was not found" in out.stderr and not (project / ".loopwright").exists()


def test_api_errors_that_end_the_client_are_recovered_by_resume(project, home):
    # The client gives up on 500s (no retries here) and exits mid-loop; the runner resumes.
    replies = [
        fakeapi.text("Iteration one."),
        fakeapi.error(500, "api_error", "Internal server error"),
        fakeapi.text("Back again and finished.\n<promise>DONE</promise>"),
    ]
    with fakeapi.ScriptedServer(replies) as server:
        out, events = run(
            project,
            home,
            server,
            "survive an outage",
            "--completion-promise",
            "DONE",
            env={"CLAUDE_CODE_MAX_RETRIES": "0"},
        )
    assert out.returncode == 0, out.stderr + out.stdout
    exits = [e for e in events if e["event"] == "client_exit"]
    assert len(exits) == 2 and "resume" in kinds(events), events
    assert events[-1]["outcome"] == "LOOP_DONE" and server.remaining == 0


def test_a_usage_limit_is_waited_out_with_the_clock_paused(project, home):
    replies = [
        fakeapi.text("Iteration one."),
        fakeapi.error(429, "rate_limit_error", "This request would exceed your account's rate limit."),
        fakeapi.text("After the reset: finished.\n<promise>DONE</promise>"),
    ]
    with fakeapi.ScriptedServer(replies) as server:
        out, events = run(
            project,
            home,
            server,
            "keep going",
            "--completion-promise",
            "DONE",
            "--quota-wait",
            "1.5",
            env={"CLAUDE_CODE_MAX_RETRIES": "0"},
        )
    assert out.returncode == 0, out.stderr + out.stdout
    waits = [e for e in events if e["event"] == "quota_wait"]
    assert len(waits) == 1 and waits[0]["seconds"] == 1.5 and "resume" not in kinds(events), events
    budget = json.loads((project / ".loopwright/loops/prompt/budget.json").read_text())
    assert budget["clock_paused_seconds"] >= 1.4 and events[-1]["outcome"] == "LOOP_DONE"
    journal = (project / ".loopwright/loops/prompt/journal.jsonl").read_text()
    assert '"event":"clock"' in journal.replace(" ", "")


@pytest.fixture
def webhook():
    """A local HTTP endpoint that records the JSON bodies POSTed to it."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    bodies = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", bodies
    server.shutdown()
    server.server_close()


def test_notifications_reach_webhooks_and_commands_and_a_failing_one_is_reported_once(
    project, home, tmp_path, webhook
):
    url, bodies = webhook
    received = tmp_path / "event.json"
    replies = [
        fakeapi.text("Iteration one."),
        fakeapi.hang(600),
        fakeapi.text("Done.\n<promise>DONE</promise>"),
    ]
    with fakeapi.ScriptedServer(replies) as server:
        out, events = run(
            project,
            home,
            server,
            "ship it",
            "--completion-promise",
            "DONE",
            "--stall-polls",
            "3",
            "--notify",
            f"webhook:{url}",
            "--notify",
            f"command:cat >> {received}",
            "--notify",
            "slack:http://127.0.0.1:9/nobody-listens",
        )
    assert out.returncode == 0, out.stderr + out.stdout
    assert [b["event"] for b in bodies] == ["stall_recovered", "loop_ended"], bodies
    assert bodies[-1]["outcome"] == "LOOP_DONE" and bodies[-1]["loop"] == "prompt"
    lines = [json.loads(line) for line in received.read_text().replace("}{", "}\n{").splitlines()]
    assert [e["event"] for e in lines] == ["stall_recovered", "loop_ended"]
    failed = [e for e in events if e["event"] == "notify_failed"]
    assert len(failed) == 1 and failed[0]["notifier"] == "slack", events


def test_a_committed_config_cannot_make_the_runner_run_a_command(project, home, tmp_path):
    marker = tmp_path / "pwned"
    (project / ".loopwright.json").write_text(json.dumps({"run": {"notify": [f"command:touch {marker}"]}}))
    with fakeapi.ScriptedServer([fakeapi.text("Done.\n<promise>DONE</promise>")]) as server:
        out, events = run(project, home, server, "goal", "--completion-promise", "DONE")
    assert out.returncode == 0 and not marker.exists()
    assert "only --notify may run a command" in out.stderr


def test_a_bad_notifier_is_one_line(project, home):
    with fakeapi.ScriptedServer([]) as server:
        out, _ = run(project, home, server, "goal", "--notify", "pager:123")
    assert out.returncode == 1 and "--notify 'pager:123': use desktop" in out.stderr
    assert not (project / ".loopwright").exists()


def start_run(project, home, server, *args):
    """The runner as a background process whose JSON events can be read as they come."""
    extra = {"LOOPWRIGHT_PYTHON": sys.executable, "XDG_CONFIG_HOME": KEY_HOME, "PYTHONUNBUFFERED": "1"}
    cmd = [
        str(REPO / "bin" / "loopwright"),
        "-C",
        str(project),
        "run",
        "--claude",
        claude_cli.claude_binary(),
    ]
    cmd += ["--claude-arg=--dangerously-skip-permissions", "--poll-seconds", "0.5", "--json", *args]
    return subprocess.Popen(
        cmd, env=claude_cli.offline_env(server.url, home, extra), stdout=subprocess.PIPE, text=True
    )


def read_until(proc, kind, seen):
    for line in proc.stdout:
        if line.startswith("{"):
            seen.append(json.loads(line))
            if seen[-1]["event"] == kind:
                return
    raise AssertionError(f"the run ended before a {kind} event: {seen}")


def test_ctrl_c_stops_the_loop_after_the_turn_and_twice_kills(project, home):
    import signal

    answered = threading.Event()
    replies = [fakeapi.hang(120, fakeapi.text("Turn one, slow to arrive."), release=answered)]
    with fakeapi.ScriptedServer(replies, default=fakeapi.text("Never needed.")) as server:
        proc = start_run(project, home, server, "slow work", "--stall-polls", "1000", "--name", "once")
        seen = []
        read_until(proc, "client", seen)
        proc.send_signal(signal.SIGINT)  # once: the stop file, read at the end of this turn
        read_until(proc, "stop_requested", seen)
        answered.set()
        read_until(proc, "ended", seen)
        assert proc.wait(timeout=60) == 4
    assert seen[-1]["outcome"] == "STOPPED:user_stop", seen
    assert "stop_requested" in kinds(seen)

    with fakeapi.ScriptedServer([fakeapi.hang(600)]) as server:
        proc = start_run(project, home, server, "slower work", "--stall-polls", "1000", "--name", "twice")
        seen = []
        read_until(proc, "client", seen)
        proc.send_signal(signal.SIGINT)
        read_until(proc, "stop_requested", seen)
        proc.send_signal(signal.SIGINT)  # twice: the client is killed at once
        read_until(proc, "killed", seen)
        assert proc.wait(timeout=60) == 130
    loop = json.loads((project / ".loopwright/loops/twice/loop.json").read_text())
    assert loop["status"] == "active"  # left for `loopwright run --loop twice` or a resume
