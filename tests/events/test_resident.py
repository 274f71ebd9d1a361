"""The resident Stop server (lib/loopwright/events/resident.py) through the real launcher.

Which process answered a Stop is read from what it imported (`python -X importtime`, through
a LOOPWRIGHT_PYTHON wrapper): a Stop the server answers imports nothing of loopwright's in the
hook's own process. Every wait here is for a condition, with a bound."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import REPO, lw_env

sys.path.insert(0, str(Path(__file__).parent))
from test_bytecode import copy_plugin  # noqa: E402

from hooktrace import Hook, in_dir, our_socket, plugin_data, servers_for, start_loop  # noqa: E402
from waiting import wait_for  # noqa: E402


@pytest.fixture
def data(tmp_path):
    yield from plugin_data(tmp_path)


@pytest.fixture
def looping(project):
    return start_loop(project)


def iteration(project: Path) -> int:
    progress = project / ".loopwright" / "loops" / "prompt" / "progress.json"
    return json.loads(progress.read_text())["iteration"]


def test_after_the_first_stop_the_server_answers_and_the_loop_goes_on_the_same(looping, data, tmp_path):
    hook = Hook(REPO, looping, data, tmp_path)
    answer, imported = hook.stop()
    assert answer["decision"] == "block"
    assert "loopwright.events.stop" in imported  # the first Stop: answered in its own process
    assert servers_for(data)  # started before that Stop's process ended
    wait_for(hook.served, "the server the first Stop started")
    for n in range(3):
        answer, imported = hook.stop()
        assert answer["decision"] == "block", answer
        assert imported == set(), sorted(imported)  # answered by the server
        assert f"iteration {n + 3} of 50" in answer["reason"]
    # A continuing Stop is answered once committed; its history and progress follow at once.
    history = looping / ".loopwright" / "loops" / "prompt" / "history.jsonl"
    wait_for(lambda: len(history.read_text().splitlines()) == 4, "the fourth Stop's history line")
    wait_for(lambda: iteration(looping) == 4, "the fourth Stop's progress")


def test_without_a_loop_of_its_own_no_server_is_started(project, data, tmp_path):
    junk = project / ".loopwright" / "active"
    junk.mkdir(parents=True)
    (junk / "junk").touch()  # Python decides this Stop, but no loop of the session's is ticked
    hook = Hook(REPO, project, data, tmp_path)
    assert hook.stop()[0] is None
    assert servers_for(data) == []


def test_loopwright_resident_0_keeps_it_off(looping, data, tmp_path):
    hook = Hook(REPO, looping, data, tmp_path)
    for _ in range(2):
        answer, imported = hook.stop(LOOPWRIGHT_RESIDENT="0")
        assert answer["decision"] == "block" and "loopwright.events.stop" in imported
    assert servers_for(data) == []


def test_an_edited_module_retires_the_server(looping, data, tmp_path):
    plugin = copy_plugin(tmp_path / "plugin", blocked=False)
    hook = Hook(plugin, looping, data, tmp_path)
    hook.stop()
    wait_for(hook.served, "the server")
    router = plugin / "lib" / "loopwright" / "core" / "router.py"
    router.write_text(router.read_text() + "\n# edited\n")
    wait_for(lambda: not hook.socket.exists(), "the server to notice the edit and leave", within=30)
    answer, imported = hook.stop()
    assert answer["decision"] == "block" and "loopwright.core.router" in imported


def test_a_server_goes_when_idle(looping, data, tmp_path):
    hook = Hook(REPO, looping, data, tmp_path)
    hook.stop(LOOPWRIGHT_RESIDENT_IDLE="1")
    wait_for(hook.served, "the server")
    wait_for(lambda: not hook.socket.exists(), "an idle server to leave", within=30)


def test_another_copy_of_the_plugin_is_declined_and_answered_in_its_own_process(looping, data, tmp_path):
    first = Hook(REPO, looping, data, tmp_path)
    first.stop()
    wait_for(first.served, "the first copy's server")
    other = Hook(copy_plugin(tmp_path / "other", blocked=False), looping, data, tmp_path)
    answer, imported = other.stop()
    assert answer["decision"] == "block" and "loopwright.events.stop" in imported
    wait_for(lambda: iteration(looping) == 2, "the second Stop's progress")
    # The old server made way; the other copy's Stop started its own, which answers next.
    wait_for(other.served, "the other copy's server")
    answer, imported = other.stop()
    assert answer["decision"] == "block" and imported == set()


# --- the launcher's side, against a socket this test serves ----------------------------


class FakeServer:
    """Listens where the launcher looks and plays one part of the exchange."""

    def __init__(self, path: Path, script) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        in_dir(path, self.sock.bind)
        self.sock.listen(4)
        self.script, self.connections = script, 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                try:
                    self.script(conn, fds)
                finally:
                    for fd in fds:
                        os.close(fd)

    def close(self):
        self.sock.close()


def _declines(conn, fds):
    conn.sendall(b"N")


def _dies_after_go(conn, fds):
    conn.sendall(b"A")
    assert conn.recv(1) == b"G"


def test_a_declined_event_is_answered_by_the_launcher(looping, data, tmp_path):
    fake = FakeServer(our_socket(data / "pycache"), _declines)
    try:
        answer, imported = Hook(REPO, looping, data, tmp_path).stop()
    finally:
        fake.close()
    assert fake.connections == 1
    assert answer["decision"] == "block" and "loopwright.events.stop" in imported


def test_a_server_lost_after_go_is_never_answered_twice(looping, data, tmp_path):
    fake = FakeServer(our_socket(data / "pycache"), _dies_after_go)
    event = {"session_id": "S1", "transcript_path": str(looping / "none.jsonl"), "cwd": str(looping)}
    env = lw_env(CLAUDE_PROJECT_DIR=str(looping), CLAUDE_PLUGIN_DATA=str(data))
    try:
        out = subprocess.run(
            [str(REPO / "hooks" / "stop")], input=json.dumps(event), capture_output=True, text=True, env=env
        )
    finally:
        fake.close()
    assert out.returncode == 1 and out.stdout == ""
    assert "resident Stop server ended without an answer" in out.stderr
    history = looping / ".loopwright" / "loops" / "prompt" / "history.jsonl"
    assert history.read_text() == ""  # the launcher did not tick the loop itself


@pytest.mark.parametrize("mode", [0o770, 0o705])
def test_a_socket_in_a_cache_others_can_enter_is_never_asked(looping, data, tmp_path, mode):
    fake = FakeServer(our_socket(data / "pycache"), _declines)
    (data / "pycache").chmod(mode)
    try:
        answer, imported = Hook(REPO, looping, data, tmp_path).stop()
    finally:
        fake.close()
        (data / "pycache").chmod(0o700)
    assert fake.connections == 0
    assert answer["decision"] == "block" and "loopwright.events.stop" in imported


def test_the_server_leaves_nothing_of_one_stop_to_the_next(looping, data, tmp_path):
    """Each Stop has its own environment: a variable the server was started with, and that a
    Stop has not, is gone for that Stop (the debug log is written only with LOOPWRIGHT_DEBUG=1,
    a line per Stop naming the iteration it ended)."""
    hook = Hook(REPO, looping, data, tmp_path)
    log = looping / ".loopwright" / "debug.log"
    hook.stop(LOOPWRIGHT_DEBUG="1")  # answered here; the server starts with this environment
    wait_for(hook.served, "the server")
    for debug in ({}, {"LOOPWRIGHT_DEBUG": "1"}):  # the variable absent, then set
        _, imported = hook.stop(**debug)
        assert imported == set()
    # A continuing Stop writes its debug line after its answer: wait for the third one's. The
    # second Stop's would have come before it (the loop's mutex orders their ticks).
    wait_for(lambda: "iteration 3 ended" in log.read_text(), "the third Stop's debug line")
    assert "iteration 1 ended" in log.read_text()
    assert "iteration 2 ended" not in log.read_text()


# Stands in for Claude Code: a process named claude above the hook (state/lock.py looks for it).
CLAUDE_STANDIN = r"""
import json, os, subprocess, sys
hook, event, env = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = subprocess.run([hook], input=event, capture_output=True, text=True, env=env)
print(json.dumps({"pid": os.getpid(), "code": out.returncode, "stdout": out.stdout, "stderr": out.stderr}))
"""


def test_a_lock_taken_by_the_server_names_the_claude_code_process(looping, data, tmp_path):
    hook = Hook(REPO, looping, data, tmp_path)
    hook.stop()
    wait_for(hook.served, "the server")
    lock = looping / ".loopwright" / "loops" / "prompt" / "loop.lock"
    lock.unlink()  # the next Stop takes the lock again: through the server, which is no child of Claude's
    standin = tmp_path / "claude_standin.py"
    standin.write_text(CLAUDE_STANDIN)
    event = {"session_id": "S1", "transcript_path": str(looping / "none.jsonl"), "cwd": str(looping)}
    env = lw_env(
        CLAUDE_PROJECT_DIR=str(looping), CLAUDE_PLUGIN_DATA=str(data), LOOPWRIGHT_PYTHON=str(hook.wrapper)
    )
    argv = [sys.executable, str(standin), str(REPO / "hooks" / "stop"), json.dumps(event), json.dumps(env)]
    ran = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout)
    assert ran["code"] == 0 and json.loads(ran["stdout"])["decision"] == "block", ran
    assert json.loads(lock.read_text())["pid"] == ran["pid"]
