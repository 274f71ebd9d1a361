"""hooks/stop decides two cases before any Python starts: no active loop, and an active
loop that the event's session does not own (by the owner index, .loopwright/owners/).
Every doubt hands the event to Python, byte for byte. LOOPWRIGHT_PYTHON is pointed at
a recorder that logs each start and keeps the stdin it was given, then runs Python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, lw_env

STOP = REPO / "hooks" / "stop"
CLI = REPO / "bin" / "loopwright"


@pytest.fixture
def recorder(tmp_path):
    log, seen = tmp_path / "python-starts.log", tmp_path / "python-stdin"
    script = tmp_path / "recording-python"
    script.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$*\" >> '{log}'\n"
        f"cat > '{seen}'\n"
        f"exec '{sys.executable}' \"$@\" < '{seen}'\n"
    )
    script.chmod(0o755)

    class Recorder:
        def starts(self) -> int:
            return len(log.read_text().splitlines()) if log.exists() else 0

        def stdin(self) -> bytes:
            return seen.read_bytes()

    Recorder.script = script
    return Recorder()


def event(project, session="S2", **extra) -> bytes:
    # The shape Claude Code sends: compact JSON, session_id first.
    data = {
        "session_id": session,
        "transcript_path": str(project / "none.jsonl"),
        "cwd": str(project),
        "hook_event_name": "Stop",
        "stop_hook_active": True,
        **extra,
    }
    return json.dumps(data, separators=(",", ":")).encode()


def stop(project, recorder, payload: bytes):
    env = lw_env(CLAUDE_PROJECT_DIR=str(project), LOOPWRIGHT_PYTHON=str(recorder.script))
    out = subprocess.run([str(STOP)], input=payload, capture_output=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def start(project, *args):
    out = subprocess.run(
        [str(CLI), "-C", str(project), "start", *args],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


@pytest.fixture
def owned(project):
    start(project, "--session", "S1", "goal")
    return project


def test_no_loop_never_starts_python(project, recorder):
    assert stop(project, recorder, event(project)) is None
    assert recorder.starts() == 0


def test_another_sessions_stop_never_starts_python(owned, recorder):
    assert sorted(os.listdir(owned / ".loopwright" / "owners")) == ["prompt=S1"]
    assert stop(owned, recorder, event(owned, "S2")) is None
    assert recorder.starts() == 0


def test_an_unowned_loop_is_passed_by_every_session_without_python(project, recorder):
    start(project, "goal")  # from a terminal: it waits to be attached
    assert os.listdir(project / ".loopwright" / "owners") == ["prompt="]
    assert stop(project, recorder, event(project, "S9")) is None
    assert recorder.starts() == 0


def test_the_owners_stop_runs_python_with_the_event_unchanged(owned, recorder):
    payload = event(owned, "S1", last_assistant_message="working")
    answer = stop(owned, recorder, payload)
    assert answer["decision"] == "block" and "goal" in answer["reason"]
    assert recorder.starts() == 1 and recorder.stdin() == payload


def test_the_index_follows_the_owner(owned, recorder):
    owners = owned / ".loopwright" / "owners"
    lock = owned / ".loopwright/loops/prompt/loop.lock"
    data = json.loads(lock.read_text())
    data["pid"] = 999_999_999  # S1's client died: S2 takes the loop over
    lock.write_text(json.dumps(data))
    attach = subprocess.run(
        [str(CLI), "-C", str(owned), "resume", "prompt", "--session", "S2"],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert attach.returncode == 0, attach.stderr
    assert os.listdir(owners) == ["prompt=S2"]
    assert stop(owned, recorder, event(owned, "S1")) is None and recorder.starts() == 0
    subprocess.run([str(CLI), "-C", str(owned), "cancel", "prompt"], env=lw_env(), capture_output=True)
    assert os.listdir(owners) == [] and not (owned / ".loopwright/active/prompt").exists()


def _no_index(p):
    for e in os.listdir(p / ".loopwright/owners"):
        os.unlink(p / ".loopwright/owners" / e)


def _two_entries(p):
    (p / ".loopwright/owners/prompt=S3").touch()


def _symlinked_entry(p):
    os.unlink(p / ".loopwright/owners/prompt=S1")
    os.symlink(p / "elsewhere", p / ".loopwright/owners/prompt=S1")


def _owners_is_a_symlink(p):
    os.rename(p / ".loopwright/owners", p / "owners-real")
    os.symlink(p / "owners-real", p / ".loopwright/owners")


def _odd_marker(p):
    (p / ".loopwright/active/we!rd").touch()


def _symlinked_marker(p):
    os.symlink(p / "nowhere", p / ".loopwright/active/other")
    (p / ".loopwright/owners/other=S7").touch()


@pytest.mark.parametrize(
    "damage",
    [_no_index, _two_entries, _symlinked_entry, _owners_is_a_symlink, _odd_marker, _symlinked_marker],
)
def test_an_index_in_doubt_starts_python(owned, recorder, damage):
    damage(owned)
    payload = event(owned, "S2")
    stop(owned, recorder, payload)
    assert recorder.starts() == 1 and recorder.stdin() == payload


@pytest.mark.parametrize(
    "payload",
    [
        b'{"cwd":"/x","session_id":"S2"}',  # session_id not first
        b'{\n  "session_id": "S2"\n}',  # not the one-line shape Claude Code sends
        b'{"session_id":"S2","x":{"session_id":"S1"}}',  # a second session_id
        b'{"session_id":"S 2","cwd":"/x"}',  # an id the launcher does not compare
        b'{"session_id":"S2","cwd":"/x"',  # cut short
        b'{"session_id":"S2","cwd":"\x00"}',
        b"",
    ],
)
def test_stdin_of_another_shape_starts_python_with_the_same_bytes(owned, recorder, payload):
    stop(owned, recorder, payload)
    assert recorder.starts() == 1 and recorder.stdin() == payload


def test_oversized_stdin_starts_python_which_says_so(owned, recorder):
    payload = b'{"session_id":"S2","pad":"' + b"x" * (16 * 1024 * 1024) + b'"}'
    answer = stop(owned, recorder, payload)
    assert recorder.starts() == 1
    assert "decision" not in (answer or {})


def test_spaces_around_the_colon_are_the_same_shape(owned, recorder):
    assert stop(owned, recorder, b'{"session_id": "S2", "cwd": "/x"}') is None
    assert recorder.starts() == 0


def test_a_session_id_that_only_starts_like_the_owners_is_not_the_owner(owned, recorder):
    # "S" is a prefix of the owner "S1": the launcher compares whole ids.
    assert stop(owned, recorder, event(owned, "S")) is None
    assert recorder.starts() == 0


# --- the session named in the environment (CLAUDE_CODE_SESSION_ID) ----------------------------


@pytest.fixture
def tools_log(tmp_path):
    """A PATH whose head, awk and rm log each start before running the real one."""
    shims, log = tmp_path / "shims", tmp_path / "tools.log"
    shims.mkdir()
    for tool in ("head", "awk", "rm", "find", "cat"):
        real = shutil.which(tool)
        (shims / tool).write_text(f"#!/bin/sh\necho {tool} >> '{log}'\nexec '{real}' \"$@\"\n")
        (shims / tool).chmod(0o755)
    return shims, log


def env_stop(project, recorder, payload: bytes, env_session: str, path: str | None = None):
    env = lw_env(
        CLAUDE_PROJECT_DIR=str(project),
        LOOPWRIGHT_PYTHON=str(recorder.script),
        CLAUDE_CODE_SESSION_ID=env_session,
    )
    if path:
        env["PATH"] = f"{path}{os.pathsep}{env['PATH']}"
    out = subprocess.run([str(STOP)], input=payload, capture_output=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def test_the_owner_named_in_the_environment_goes_to_python_without_a_copy(owned, recorder, tools_log):
    shims, log = tools_log
    payload = event(owned, "S1", last_assistant_message="working")
    answer = env_stop(owned, recorder, payload, "S1", path=str(shims))
    assert answer["decision"] == "block"
    assert recorder.starts() == 1 and recorder.stdin() == payload
    # Only the recorder's own cat ran: no copy of the event, no awk, no rm.
    assert log.read_text().split() == ["cat"]
    assert [n for n in os.listdir(os.environ["XDG_CONFIG_HOME"] + "/loopwright") if "stop-event" in n] == []


def test_the_environment_never_decides_for_stdin(owned, recorder):
    # The environment names the owner, the event another session: Python reads the event.
    assert env_stop(owned, recorder, event(owned, "S2"), "S1") is None
    assert recorder.starts() == 1
    # The environment names another session, the event the owner: the owner's Stop is not lost.
    assert env_stop(owned, recorder, event(owned, "S1"), "S2")["decision"] == "block"
    assert recorder.starts() == 2


@pytest.mark.parametrize("named", ["S1 ", "S1;true", "", "S"])
def test_an_environment_that_does_not_name_the_owner_exactly_changes_nothing(owned, recorder, named):
    # Read from stdin as before: another session's Stop passes without Python.
    assert env_stop(owned, recorder, event(owned, "S2"), named) is None
    assert recorder.starts() == 0
