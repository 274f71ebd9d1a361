"""Notifications of a loop in any session (tick/notices.py): the Stop hook starts a
detached notifier and never waits on the network; the notifier gives up at its bound; the
user's own config.json is read only when nobody else can change it; a committed
.loopwright.json names webhooks and desktop only; a runner with notifiers of its own is
left to tell of its loop."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading

import psutil
import pytest

from conftest import REPO, lw_env
from waiting import wait_for

STOP = REPO / "hooks" / "stop"
CLI = REPO / "bin" / "loopwright"


@pytest.fixture
def config_home(tmp_path):
    """A loopwright config directory of this test's own (the key and config.json)."""
    home = tmp_path / "config"
    (home / "loopwright").mkdir(parents=True, mode=0o700)
    return home


def write_config(home, value) -> None:
    path = home / "loopwright" / "config.json"
    path.write_text(json.dumps(value))
    path.chmod(0o600)


def run(cmd, project, home, **env):
    out = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project), XDG_CONFIG_HOME=str(home), **env),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out


def end_by_a_stop(project, home, **env) -> dict:
    """A one-iteration loop of session S1, ended by the real Stop hook; its answer."""
    run(
        [
            str(CLI),
            "-C",
            str(project),
            "start",
            "--session",
            "S1",
            "--max-iterations",
            "1",
            "--no-wrap-up",
            "goal",
        ],
        project,
        home,
    )
    event = {"session_id": "S1", "transcript_path": str(project / "none.jsonl"), "cwd": str(project)}
    out = subprocess.run(
        [str(STOP)],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project), XDG_CONFIG_HOME=str(home), **env),
        timeout=120,  # a hook that waited on the trickling webhook below would never return
    )
    assert out.returncode == 0 and out.stdout, (out.stdout, out.stderr)
    return json.loads(out.stdout)


def journal(project) -> list[dict]:
    path = project / ".loopwright" / "loops" / "prompt" / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Trickle:
    """A webhook that never finishes answering: the status line, then one byte of a header
    every half second, so no socket timeout of the client's ever fires."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.done = threading.Event()
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:  # the client went away before its headers: nothing to answer
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            self.requests.append(body)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                while not self.done.wait(0.5):
                    conn.sendall(b"a")
            except OSError:
                pass

    def close(self):
        self.done.set()
        self.sock.close()


def test_the_hook_never_waits_for_a_webhook_and_the_notifier_gives_up_at_its_bound(project, config_home):
    hook = Trickle()
    try:
        write_config(config_home, {"notify": [f"webhook:{hook.url}"]})
        answer = end_by_a_stop(project, config_home, LOOPWRIGHT_NOTIFY_SECONDS="3")
        assert "ended: MAX_ITERATIONS" in answer["systemMessage"]
        (note,) = [e for e in journal(project) if e["event"] == "notify"]
        assert note["what"] == "loop_ended" and note["notifiers"] == ["webhook"]  # never the URL
        wait_for(
            lambda: hook.requests, "the webhook is called"
        )  # the notifier reached the webhook, which never answers
        body = json.loads(hook.requests[0])
        assert (body["event"], body["loop"], body["outcome"]) == ("loop_ended", "prompt", "MAX_ITERATIONS")
        wait_for(
            lambda: gone(note["pid"]), "the notifier gives up"
        )  # ended by its own bound: the webhook still drips
        assert not hook.done.is_set()
        failed = [e for e in journal(project) if e["event"] == "notify_failed"]
        assert failed and "not done within 3 s" in failed[0]["error"], failed
        assert hook.url not in json.dumps(journal(project))
    finally:
        hook.close()


def test_no_notifier_no_process(project, config_home):
    end_by_a_stop(project, config_home)
    assert not [e for e in journal(project) if e["event"].startswith("notify")]


def test_a_committed_file_names_webhooks_and_desktop_only(project, config_home, tmp_path, monkeypatch):
    """.loopwright.json's run.notify, as `loopwright run` takes it: a command there is dropped;
    the user's own config.json replaces the list."""
    from loopwright.tick import notices

    marker = tmp_path / "ran"
    spec = {"run": {"notify": ["desktop", f"command:touch {marker}", "webhook:https://example.org/h"]}}
    (project / ".loopwright.json").write_text(json.dumps(spec))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    assert notices.notifiers(project) == ["desktop", "webhook:https://example.org/h"]
    write_config(config_home, {"notify": ["command:true"]})
    assert notices.notifiers(project) == ["command:true"]
    write_config(config_home, {"notify": []})
    assert notices.notifiers(project) == []


def test_a_config_others_can_change_is_not_read(config_home, monkeypatch):
    from loopwright.state import userconfig

    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    path = config_home / "loopwright" / "config.json"
    write_config(config_home, {"notify": ["command:true"]})
    assert userconfig.notifiers() == ["command:true"]
    path.chmod(0o622)
    with pytest.raises(userconfig.ConfigProblem, match="written by other users"):
        userconfig.notifiers()
    path.chmod(0o600)
    path.parent.chmod(0o777)
    with pytest.raises(userconfig.ConfigProblem, match="written by other users"):
        userconfig.notifiers()
    path.parent.chmod(0o700)
    path.unlink()
    (config_home / "elsewhere.json").write_text('{"notify": ["command:true"]}')
    path.symlink_to(config_home / "elsewhere.json")
    with pytest.raises(userconfig.ConfigProblem, match="regular file"):
        userconfig.notifiers()


def test_an_unsafe_config_is_one_journal_line(project, config_home):
    write_config(config_home, {"notify": ["desktop"]})
    (config_home / "loopwright" / "config.json").chmod(0o666)
    end_by_a_stop(project, config_home)
    (failed,) = [e for e in journal(project) if e["event"] == "notify_failed"]
    assert failed["what"] == "loop_ended" and "written by other users" in failed["error"]


def test_a_runner_with_notifiers_of_its_own_is_left_to_tell(project, config_home, tmp_path):
    """The runner's Notifiers mark its process (and so its client's hooks): the hook then
    starts no notifier of its own, so the end is told once, by the runner."""
    write_config(config_home, {"notify": ["desktop"]})
    end_by_a_stop(project, config_home, LOOPWRIGHT_RUN_NOTIFIES="4242")
    assert not [e for e in journal(project) if e["event"].startswith("notify")]

    from loopwright.runner import notify
    from loopwright.tick import notices

    saved = os.environ.pop(notices.OWN_NOTIFIER, None)
    try:
        notify.Notifiers([], print)
        assert notices.OWN_NOTIFIER not in os.environ  # no notifiers: the hooks still tell
        notify.Notifiers(["desktop"], print, own_loop=False)
        assert notices.OWN_NOTIFIER not in os.environ  # the monitor's: not a loop's own
        notify.Notifiers(["desktop"], print)
        assert os.environ[notices.OWN_NOTIFIER] == str(os.getpid())
    finally:
        os.environ.pop(notices.OWN_NOTIFIER, None)
        if saved is not None:
            os.environ[notices.OWN_NOTIFIER] = saved
