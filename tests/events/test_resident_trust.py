"""Who the resident Stop server (lib/loopwright/events/resident.py) answers, tried through the
real launcher the way a sandboxed session, another local user and a stalled server would try it:

- a Stop launched in a sandbox (other namespaces, resource limits, no_new_privs, nice level) is
  never answered by a server started outside it: it is answered in its own process, and its
  ``--verify`` sees its own sandbox; a peer of another context that connects to the server's
  socket itself is refused (events/handover.py);
- the launcher talks only to a server of its own user, reached through the data directory it
  checked: a server of another user's, at the socket's name or behind a data directory swapped
  for a link, is told nothing;
- a launcher that gives up on a stalled server leaves nothing of itself with it.

Which process answered is read from what the launcher's own process imported (tests/hooktrace.py).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from conftest import REPO, lw_env
from hooktrace import Hook, listening, plugin_data, resident_leaders, sockets, start_loop
from waiting import wait_for

ROOT = os.geteuid() == 0
needs = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("unshare", "prlimit", "setpriv", "nice")),
    reason="needs util-linux's unshare, prlimit and setpriv",
)
as_root = pytest.mark.skipif(not ROOT, reason="acts as another user (root runs a process as nobody)")

# What a --verify sees of the context it runs in (it fails, so the loop goes on).
SEEN = r"""
import json, os, resource, sys
nets = [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
nnp = [line.split()[1] for line in open("/proc/self/status") if line.startswith("NoNewPrivs:")]
seen = {
    "interfaces": nets,
    "netns": os.readlink("/proc/self/ns/net"),
    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    "no_new_privs": nnp[0],
    "nice": os.nice(0),
}
with open("seen.json", "w") as fh:
    json.dump(seen, fh)
sys.exit(1)
"""

UNSHARE = ["unshare", "--net", "--mount"] if ROOT else ["unshare", "--map-root-user", "--net", "--mount"]
# Each sandbox: the launcher's wrapper, and what its --verify must see (against the plain one's).
SANDBOXES = {
    "unshare": (UNSHARE, lambda s, plain: s["interfaces"] == ["lo"] and s["netns"] != plain["netns"]),
    "rlimit": (["prlimit", "--nofile=64:64"], lambda s, plain: s["nofile"] == 64 != plain["nofile"]),
    "no_new_privs": (
        ["setpriv", "--no-new-privs"],
        lambda s, plain: s["no_new_privs"] == "1" != plain["no_new_privs"],
    ),
    "nice": (["nice", "-n", "7"], lambda s, plain: s["nice"] == plain["nice"] + 7),
}
CLAIM = "All done.\n<promise>DONE</promise>"


@pytest.fixture
def data(tmp_path):
    yield from plugin_data(tmp_path)


@pytest.fixture
def looping(project):
    return start_loop(project)


@pytest.fixture
def verifying(project):
    """A loop of session S1 whose completion check records what it sees and fails."""
    (project / "seen.py").write_text(SEEN)
    return start_loop(project, "--completion-promise", "DONE", "--verify", f"{sys.executable} seen.py")


def claim(hook: Hook, wrap: tuple = ()) -> tuple[dict, set[str]]:
    """A Stop claiming completion (its --verify runs and fails): what the verify saw, and
    the loopwright modules the launcher's own process imported."""
    seen = hook.project / "seen.json"
    seen.unlink(missing_ok=True)
    answer, imported = hook.stop(wrap, CLAIM)
    assert answer["decision"] == "block" and "completion check failed" in answer["reason"], answer
    return json.loads(seen.read_text()), imported


@needs
@pytest.mark.parametrize("sandbox", sorted(SANDBOXES))
def test_a_sandboxed_stop_is_never_answered_by_a_server_from_outside_the_sandbox(
    verifying, data, tmp_path, sandbox
):
    wrap, sees_its_own = SANDBOXES[sandbox]
    hook = Hook(REPO, verifying, data, tmp_path)
    hook.stop()  # answered in its own process; starts the plain context's server
    wait_for(hook.served, "the plain context's server")
    plain, imported = claim(hook)
    assert imported == set()  # the plain context's server answers the plain context
    seen, imported = claim(hook, wrap)
    assert "loopwright.events.stop" in imported  # answered in the sandbox, by its own process
    assert sees_its_own(seen, plain), (seen, plain)
    if sandbox != "unshare":  # (each unshare makes new namespaces: a context of its own every time)
        # The sandbox's first Stop started a server of its own context, which answers its next.
        wait_for(lambda: sum(map(listening, sockets(data / "pycache"))) == 2, "the sandbox's own server")
        seen, imported = claim(hook, wrap)
        assert imported == set() and sees_its_own(seen, plain), (seen, plain)


# A peer that talks to the server's socket itself: it sends a request with its descriptors at
# once, without waiting for the server's word, plays the rest of the exchange (go, with its
# descriptors, on "A") and prints every byte the server sent.
PEER = r"""
import json, os, socket, sys
path, hooks = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_UNIX)
here = os.getcwd()
os.chdir(os.path.dirname(path))
sock.connect(os.path.basename(path))
os.chdir(here)
fields = [b"LW1", b"%d" % os.getpid(), b"18", sys.executable.encode(), hooks.encode(), os.getcwdb()]
body = b"\0".join(fields + [k + b"=" + v for k, v in os.environb.items()])
try:
    socket.send_fds(sock, [len(body).to_bytes(4, "little") + body], [0, 1, 2])
except OSError:
    pass  # refused and closed already
got = b""
while True:
    try:
        more = sock.recv(1)
    except ConnectionResetError:  # closed with the request unread: refused
        break
    if not more:
        break
    got += more
    if more == b"A":
        socket.send_fds(sock, [b"G"], [0, 1, 2])
sys.stderr.write(json.dumps(got.decode("latin-1")))
"""


@needs
@pytest.mark.parametrize(
    "wrap", [[], UNSHARE, ["prlimit", "--nofile=64:64"]], ids=["plain", "unshare", "rlimit"]
)
def test_a_peer_of_another_context_is_refused_by_the_server(looping, data, tmp_path, wrap):
    hook = Hook(REPO, looping, data, tmp_path)
    hook.stop()
    wait_for(hook.served, "the plain context's server")
    history = looping / ".loopwright" / "loops" / "prompt" / "history.jsonl"
    wait_for(lambda: len(history.read_text().splitlines()) == 1, "the first Stop's history")
    event = {"session_id": "S1", "transcript_path": str(looping / "none.jsonl"), "cwd": str(looping)}
    env = lw_env(CLAUDE_PROJECT_DIR=str(looping), CLAUDE_PLUGIN_DATA=str(data))
    argv = [*wrap, sys.executable, "-c", PEER, str(hook.socket), str(REPO / "hooks")]
    out = subprocess.run(
        argv, input=json.dumps(event), capture_output=True, text=True, env=env, cwd=looping, timeout=120
    )
    said = json.loads(out.stderr.splitlines()[-1])
    if not wrap:  # the same exchange from the plain context is served: the test can tell
        assert "AR" in said and json.loads(out.stdout)["decision"] == "block", out
        wait_for(lambda: len(history.read_text().splitlines()) == 2, "the served Stop's history")
        return
    assert said in ("N", ""), out  # refused, its request unread (so maybe reset before the "N")
    assert out.stdout == "" and len(history.read_text().splitlines()) == 1


# --- another local user --------------------------------------------------------------------

# A server of another user's: it logs what it is sent.
FAKE = r"""
import os, socket, sys
here, names = sys.argv[1], sys.argv[2:]
os.chdir(here)
sock = socket.socket(socket.AF_UNIX)
sock.bind("fake.sock")
sock.listen(8)
for name in dict.fromkeys(names):
    os.link("fake.sock", name)
open("ready", "w").close()
while True:
    conn, _ = sock.accept()
    conn.settimeout(10)
    got = b""
    try:
        while len(got) < 4 or len(got) < 4 + int.from_bytes(got[:4], "little"):
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            for fd in fds:
                os.close(fd)
            if not msg:
                break
            got += msg
    except OSError:
        pass
    with open("log", "ab") as fh:  # before it answers: the launcher waits for the answer
        fh.write(got + b"\n--\n")
    try:
        conn.sendall(b"N")
    except OSError:
        pass
    conn.close()
"""
SECRET = "LW_TEST_SECRET=only-for-the-owner"


@pytest.fixture
def shared():
    """A folder every user can traverse (a test's own tmp_path is private to root), with a
    folder of nobody's in it, ``evil``."""
    top = Path(tempfile.mkdtemp(prefix="lw-shared-"))
    top.chmod(0o755)
    evil = top / "evil"
    evil.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(evil, nobody.pw_uid, nobody.pw_gid)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def as_nobody(*argv: str) -> list[str]:
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]


def fake_server(where: Path, *names: str) -> subprocess.Popen:
    """Another user's server listening in ``where`` (a folder of nobody's) under ``names``."""
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.chown(where, "nobody", "nogroup")
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    proc = subprocess.Popen(as_nobody(python, "-I", "-c", FAKE, str(where), *names))
    wait_for(lambda: (where / "ready").exists(), "the fake server", proc=proc)
    return proc


def stop_owner(hook: Hook) -> dict:
    answer, imported = hook.stop(LW_TEST_SECRET=SECRET.partition("=")[2])
    assert answer["decision"] == "block" and "loopwright.events.stop" in imported, answer
    return answer


@needs
@as_root
def test_a_peer_of_another_user_is_refused_by_the_server(looping, shared, tmp_path):
    data = shared / "data"
    data.mkdir(mode=0o755)
    (data / "pycache").mkdir(mode=0o700)
    hook = Hook(REPO, looping, data, tmp_path)
    hook.stop()
    wait_for(hook.served, "the server")
    history = looping / ".loopwright" / "loops" / "prompt" / "history.jsonl"
    wait_for(lambda: len(history.read_text().splitlines()) == 1, "the first Stop's history")
    # However it came to reach the socket (here: its folder opened to all)...
    (data / "pycache").chmod(0o711)
    hook.socket.chmod(0o666)
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    argv = as_nobody(python, "-I", "-c", PEER, str(hook.socket), str(REPO / "hooks"))
    out = subprocess.run(argv, input="{}", capture_output=True, text=True, cwd=shared, timeout=120)
    (data / "pycache").chmod(0o700)
    assert json.loads(out.stderr.splitlines()[-1]) in ("N", ""), out
    assert len(history.read_text().splitlines()) == 1


@needs
@as_root
def test_a_socket_served_by_another_user_is_told_nothing(looping, shared, tmp_path):
    data = shared / "data"
    data.mkdir(mode=0o755)
    (data / "pycache").mkdir(mode=0o700)
    hook = Hook(REPO, looping, data, tmp_path)
    fake = fake_server(shared / "evil" / "srv")
    try:
        # However it got there, another user's socket sits where this context's would be.
        os.link(shared / "evil" / "srv" / "fake.sock", hook.socket)
        stop_owner(hook)
    finally:
        fake.kill()
        fake.wait()
    log = shared / "evil" / "srv" / "log"
    assert SECRET.encode() not in (log.read_bytes() if log.exists() else b"")
    assert b"LW1" not in (log.read_bytes() if log.exists() else b"")


# Stands in for the launcher's interpreter: another user wins the race at the launcher's
# connect, swapping the data directory (its parent is writable by all) for a link to theirs.
SWAPPING_PYTHON = r"""
import json, os, subprocess, sys, types
import _socket as real

SWAP, SWAPPED = json.loads(os.environ["LW_TEST_SWAP"]), []


class socket(real.socket):
    def connect(self, address):
        if self.family == real.AF_UNIX and not SWAPPED:
            SWAPPED.append(address)
            subprocess.run(SWAP, check=True)
        return super().connect(address)

fake = types.ModuleType("_socket")
fake.__dict__.update(real.__dict__)
fake.socket = socket
sys.modules["_socket"] = fake
script = [a for a in sys.argv[1:] if not a.startswith("-")][0]
sys.argv = [script]
with open(script, "rb") as fh:
    exec(compile(fh.read(), script, "exec"), {"__name__": "__main__", "__file__": script})
"""


@needs
@as_root
def test_a_data_directory_swapped_for_another_users_is_never_asked(looping, shared, tmp_path):
    parent = shared / "parent"
    parent.mkdir()
    parent.chmod(0o777)  # writable by all, not sticky: anyone may rename what is in it
    data = parent / "data"
    data.mkdir(mode=0o755)
    (data / "pycache").mkdir(mode=0o700)
    hook = Hook(REPO, looping, data, tmp_path)
    theirs = shared / "evil" / "data"
    theirs.mkdir(mode=0o755)
    shutil.chown(theirs, "nobody", "nogroup")
    # It serves every name a launcher may ask: this context's, and the one before contexts.
    fake = fake_server(theirs / "pycache", hook.socket.name, "stop.sock")
    shim = tmp_path / "swapping.py"
    shim.write_text(SWAPPING_PYTHON)
    wrapper = tmp_path / "python-swapping"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{shim}" "$@"\n')
    wrapper.chmod(0o755)
    swap = as_nobody("sh", "-c", f'mv "{data}" "{parent}/old" && ln -s "{theirs}" "{data}"')
    try:
        answer, _ = hook.stop(
            LOOPWRIGHT_PYTHON=str(wrapper),
            LW_TEST_SWAP=json.dumps(swap),
            LW_TEST_SECRET=SECRET.partition("=")[2],
        )
    finally:
        fake.kill()
        fake.wait()
    assert data.is_symlink()  # the other user did swap it, before the launcher's connect
    assert answer["decision"] == "block", answer
    log = theirs / "pycache" / "log"
    assert not log.exists() or log.read_bytes() == b"", log.read_bytes()


# --- a stalled server ------------------------------------------------------------------------


def test_a_launcher_that_gives_up_on_a_stalled_server_leaves_nothing_held(looping, data, tmp_path):
    hook = Hook(REPO, looping, data, tmp_path)
    hook.stop()
    wait_for(hook.served, "the server")
    wait_for(lambda: len(resident_leaders(data)) == 1, "one resident server")
    [server] = resident_leaders(data)
    history = looping / ".loopwright" / "loops" / "prompt" / "history.jsonl"
    wait_for(lambda: len(history.read_text().splitlines()) == 1, "the first Stop's history")
    os.killpg(server, signal.SIGSTOP)  # the server and its waiting fork: connections queue
    try:
        event = {"session_id": "S1", "transcript_path": str(looping / "none.jsonl"), "cwd": str(looping)}
        env = lw_env(CLAUDE_PROJECT_DIR=str(looping), CLAUDE_PLUGIN_DATA=str(data))
        proc = subprocess.Popen(
            [str(REPO / "hooks" / "stop")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        proc.stdin.write(json.dumps(event).encode())
        proc.stdin.close()
        out, closed = [], threading.Event()

        def read():
            out.append(proc.stdout.read())  # returns at EOF: when nothing holds the pipe open
            closed.set()

        threading.Thread(target=read, daemon=True).start()
        wait_for(closed.is_set, "the Stop's output to close while the server is stopped", within=60)
        assert proc.wait(timeout=60) == 0
        assert json.loads(out[0])["decision"] == "block"  # answered in the launcher's own process
    finally:
        os.killpg(server, signal.SIGCONT)
    # The queued connection, taken once the server runs again, is never answered: the next
    # Stop (after it in the queue) is the third iteration, not the fourth.
    answer, _ = hook.stop()
    assert "iteration 4 of 50" in answer["reason"], answer["reason"]
    wait_for(lambda: len(history.read_text().splitlines()) == 3, "the third Stop's history")
