"""Trust, round 2: another local user, and a cloned repository's state files, against the
real Stop launcher and the real CLI. Each test plays the attacker of one finding:

- FIFOs planted where the Stop launcher used to copy the event (a shared /tmp) must neither
  hang a Stop nor receive the event;
- a `.loopwright/` another user made or can write is refused in one line that says how to
  fix it, before its owner index or its files are believed;
- a `.gitignore` shipped inside `.loopwright/` never lets the loop's state be committed;
- a key directory another user can write makes no loop trusted, and `doctor` says why.

Playing "another user" needs root (files are handed to an unused uid); as any other user
those cases are skipped, the mode cases still run.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from conftest import REPO, lw_env

STOP = REPO / "hooks" / "stop"
CLI = REPO / "bin" / "loopwright"
OTHER_UID = 4242
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another uid needs root")


@pytest.fixture
def keyhome(tmp_path):
    home = tmp_path / "config"
    home.mkdir(mode=0o700)
    return home


def run_cli(project, keyhome, *args, check=True):
    out = subprocess.run(
        [str(CLI), "-C", str(project), *args],
        capture_output=True,
        text=True,
        env=lw_env(XDG_CONFIG_HOME=str(keyhome)),
        timeout=60,
    )
    if check:
        assert out.returncode == 0, out.stderr
    return out


def stop(project, keyhome, session="S1", timeout=30, **env):
    payload = {
        "session_id": session,
        "transcript_path": str(project / "none.jsonl"),
        "cwd": str(project),
        "hook_event_name": "Stop",
        "stop_hook_active": True,
    }
    out = subprocess.run(
        [str(STOP)],
        input=json.dumps(payload, separators=(",", ":")),
        capture_output=True,
        text=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project), XDG_CONFIG_HOME=str(keyhome), **env),
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def next_pids(count: int) -> range:
    """The process ids the next processes are likely to get (pids are handed out in order)."""
    probe = subprocess.Popen(["true"])
    probe.wait()
    return range(probe.pid, probe.pid + count)


def plant_fifos(directory, names) -> None:
    for name in names:
        os.mkfifo(directory / name, 0o666)


@pytest.fixture
def looping(project, keyhome):
    run_cli(project, keyhome, "start", "--session", "S1", "--max-iterations", "5", "goal")
    return project


# --- finding 2: the event's copy never goes where another user can plant a FIFO -------------


def test_fifos_in_a_shared_tmp_neither_hang_a_stop_nor_get_the_event(looping, keyhome, tmp_path):
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    plant_fifos(shared, (f"loopwright-stop.{pid}" for pid in next_pids(3000)))
    before = sorted(os.listdir(shared))

    # Another session's Stop (the launcher copies the event to read its session id)...
    assert stop(looping, keyhome, session="S2", TMPDIR=str(shared)) is None
    # ...and the owner's, which goes on to Python with the copy.
    answer = stop(looping, keyhome, session="S1", TMPDIR=str(shared))
    assert answer["decision"] == "block"

    assert sorted(os.listdir(shared)) == before  # nothing written, no FIFO opened
    leftovers = [n for n in os.listdir(keyhome / "loopwright") if n.startswith(".stop-event")]
    assert leftovers == []


def test_names_already_taken_where_the_copy_goes_are_doubt_not_a_hang(looping, keyhome, tmp_path):
    # The copy goes beside the key, which only this user can write; even so, whatever
    # already sits at the name (a FIFO, a link to one, a dangling link) is never opened.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    keydir = keyhome / "loopwright"
    for pid in next_pids(1500):
        os.mkfifo(keydir / f".stop-event.{pid}")
        os.symlink(fifo, keydir / f".stop-event.{pid + 1500}")
        os.symlink(tmp_path / "nowhere", keydir / f".stop-event.{pid + 3000}")

    assert stop(looping, keyhome, session="S2") is None
    assert stop(looping, keyhome, session="S1")["decision"] == "block"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# --- finding 6: a state directory someone else made or can write is refused ------------------


@pytest.mark.parametrize("where", [".loopwright", ".loopwright/owners", ".loopwright/loops"])
def test_a_state_directory_others_can_write_silences_nothing_quietly(looping, keyhome, where):
    state = looping / ".loopwright"
    # The other user edits the owner index so the launcher takes the owner's Stop for a stranger's.
    (looping / where).chmod(0o777)
    for entry in os.listdir(state / "owners"):
        os.rename(state / "owners" / entry, state / "owners" / (entry.split("=")[0] + "=SOMEONE"))

    answer = stop(looping, keyhome, session="S1")
    assert answer is not None and "decision" not in answer
    msg = answer["systemMessage"]
    assert "can be written by other users" in msg and f"chmod go-w '{looping / where}'" in msg

    out = run_cli(looping, keyhome, "status")
    assert f"chmod go-w '{looping / where}'" in out.stdout

    (looping / where).chmod(0o700)
    for entry in os.listdir(state / "owners"):
        os.unlink(state / "owners" / entry)
    assert stop(looping, keyhome, session="S1")["decision"] == "block"  # fixed: the loop goes on


def test_start_refuses_a_state_directory_others_can_write(project, keyhome):
    (project / ".loopwright").mkdir()
    (project / ".loopwright").chmod(0o777)
    out = run_cli(project, keyhome, "start", "--session", "S1", "goal", check=False)
    assert out.returncode != 0
    assert "can be written by other users" in out.stderr and out.stderr.count("\n") == 1
    assert os.listdir(project / ".loopwright") == []


@as_root
def test_a_state_directory_another_user_made_is_refused(project, keyhome):
    state = project / ".loopwright"
    state.mkdir(mode=0o755)
    os.chown(state, OTHER_UID, OTHER_UID)
    out = run_cli(project, keyhome, "start", "--session", "S1", "goal", check=False)
    assert out.returncode != 0
    assert f"belongs to another user (uid {OTHER_UID})" in out.stderr and "mv " in out.stderr
    assert os.listdir(state) == []


@as_root
def test_a_loop_whose_state_directory_changed_hands_is_not_driven(looping, keyhome):
    os.chown(looping / ".loopwright", OTHER_UID, OTHER_UID)
    answer = stop(looping, keyhome, session="S1")
    assert "decision" not in answer and "belongs to another user" in answer["systemMessage"]
    assert stop(looping, keyhome, session="S2") is None  # a stranger's session is not told


# --- finding 9: the state directory always keeps itself out of git --------------------------


def git(project, *args) -> str:
    out = subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True, check=True)
    return out.stdout


@pytest.mark.parametrize("shipped", ["", "!*\n", "link"])
def test_a_shipped_gitignore_never_lets_loop_state_be_committed(project, keyhome, tmp_path, shipped):
    state = project / ".loopwright"
    state.mkdir(mode=0o700)
    target = tmp_path / "theirs"
    target.write_text("keep me\n")
    if shipped == "link":
        os.symlink(target, state / ".gitignore")
    else:
        (state / ".gitignore").write_text(shipped)
    run_cli(project, keyhome, "start", "--session", "S1", "goal")
    stop(project, keyhome, session="S1")

    git(project, "add", "-A")
    staged = git(project, "diff", "--cached", "--name-only").split()
    assert [p for p in staged if p.startswith(".loopwright/")] == []
    assert (state / ".gitignore").read_text() == "*\n" and not (state / ".gitignore").is_symlink()
    assert target.read_text() == "keep me\n"


# --- finding 11: the key's directory is checked like the key ---------------------------------


def test_a_key_directory_others_can_write_trusts_no_loop(looping, keyhome):
    keydir = keyhome / "loopwright"
    keydir.chmod(0o777)
    answer = stop(looping, keyhome, session="S1")
    assert "decision" not in answer
    assert f"chmod 700 '{keydir}'" in answer["systemMessage"]

    doctor = run_cli(looping, keyhome, "doctor", check=False)
    key_line = next(ln for ln in doctor.stdout.splitlines() if "loopwright key" in ln)
    assert key_line.startswith("[FAIL]") and "can be written by other users" in key_line

    keydir.chmod(0o700)
    assert stop(looping, keyhome, session="S1")["decision"] == "block"


@as_root
def test_a_key_directory_another_user_owns_trusts_no_loop(looping, keyhome):
    keydir = keyhome / "loopwright"
    os.chown(keydir, OTHER_UID, OTHER_UID)
    answer = stop(looping, keyhome, session="S1")
    assert "decision" not in answer and "belongs to another user" in answer["systemMessage"]
    out = run_cli(looping, keyhome, "start", "--session", "S9", "another goal", check=False)
    assert out.returncode != 0 and "belongs to another user" in out.stderr
