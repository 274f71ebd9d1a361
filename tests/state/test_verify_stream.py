"""verify.run reads the check's output as it streams: memory stays bounded whatever the
command prints, and the time limit holds against endless output, a command that closes
its output and keeps running, and a grandchild that keeps the pipe open.

No test depends on how fast the machine is: a time limit is made to fall at a known point
of the command (see ``ready``), and waits are bounded only to fail instead of hanging."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import LIB  # noqa: E402
from loopwright.state import verify
from waiting import wait_for


def test_passing_command_keeps_exit_code_and_tail(tmp_path):
    res = verify.run("echo one; echo two >&2; exit 0", tmp_path, timeout=60)
    assert set(res) == {"command", "exit_code", "timed_out", "seconds", "output_tail"}
    assert res["exit_code"] == 0 and res["timed_out"] is False and verify.passed(res)
    assert res["output_tail"].split() == ["one", "two"]  # stderr is merged into stdout


def test_failing_command_keeps_exit_code_and_tail(tmp_path):
    res = verify.run("echo broken; exit 3", tmp_path, timeout=60)
    assert res["exit_code"] == 3 and res["timed_out"] is False and not verify.passed(res)
    assert res["output_tail"].strip() == "broken"


def test_runs_in_cwd_without_stdin(tmp_path):
    (tmp_path / "marker").write_text("here")
    res = verify.run("cat marker; cat; echo done", tmp_path, timeout=60)  # bare cat reads /dev/null
    assert res["exit_code"] == 0 and res["output_tail"] == "heredone\n"


def test_undecodable_output_is_replaced(tmp_path):
    res = verify.run("printf 'a\\377b'", tmp_path, timeout=60)
    assert res["exit_code"] == 0 and res["output_tail"] == "a\ufffdb"


# Linux carries a process's peak RSS across exec (a child of a big pytest process would report
# pytest's peak), so the measuring process is forked from a fresh, small interpreter.
PEAK = r"""
import json, os, resource, sys
sys.path.insert(0, sys.argv[1])
from loopwright.state import verify
if os.fork() == 0:
    r = verify.run("head -c 300000000 /dev/zero | tr '\\0' x; echo; echo THE-END; exit 3", sys.argv[2], 600)
    print(json.dumps({"rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "res": r}), flush=True)
    os._exit(0)
os.wait()
"""


def test_huge_output_keeps_tail_with_bounded_memory(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", PEAK, str(LIB), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    res = report["res"]
    assert res["exit_code"] == 3 and not res["timed_out"]
    assert res["output_tail"].endswith("x\nTHE-END\n") and len(res["output_tail"]) == verify.TAIL_CHARS
    # ru_maxrss is in KiB on Linux: 300 MB of output was never held whole.
    assert report["rss_kib"] < 100 * 1024, report


@pytest.fixture
def ready(tmp_path, monkeypatch):
    """verify.run's clock jumps past any time limit once the command has made READY: the
    limit falls at a known point of the command, however busy the machine, and the real
    limit (10 minutes) never comes first."""
    marker, real = tmp_path / "READY", time.monotonic
    monkeypatch.setattr(verify, "time", SimpleNamespace(monotonic=lambda: real() + JUMP * marker.exists()))
    return marker


JUMP = 10**6  # seconds: past any limit given here
LIMIT = 600  # the real time limit: longer than WAIT, so it never decides a test below
WAIT = 300  # how long a test waits for verify.run to return; a hang fails here, nothing is timed


def run_within(command: str, cwd: Path, timeout: float = LIMIT) -> dict:
    """verify.run, waited for at most WAIT seconds. The commands below never end by
    themselves (sleep 3600, yes), so coming back at all shows that the limit was applied or
    that no grandchild was waited for."""
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(res=verify.run(command, cwd, timeout)), daemon=True)
    worker.start()
    worker.join(WAIT)
    assert "res" in box, f"verify.run({command!r}) did not return"
    return box["res"]


def test_endless_output_is_killed_at_the_timeout(tmp_path, ready):
    # 100 kB are written (so read: the pipe holds 64 kB) before READY, then output never ends.
    res = run_within("yes | head -c 100000; touch READY; exec yes", tmp_path)
    assert res["timed_out"] is True and res["exit_code"] is None and not verify.passed(res)
    assert res["output_tail"] and set(res["output_tail"].replace("\n", "")) <= {"y"}
    assert len(res["output_tail"]) <= verify.TAIL_CHARS


def test_silent_sleeper_is_killed_and_its_output_kept(tmp_path, ready):
    res = run_within("echo started; touch READY; sleep 3600", tmp_path)
    assert res["timed_out"] is True and res["exit_code"] is None
    assert res["output_tail"].strip() == "started"


def test_command_that_closes_its_output_and_keeps_running_times_out(tmp_path, ready):
    # READY before the close: when the end of the output is seen, the limit has passed.
    res = run_within("echo bye; touch READY; exec >&- 2>&-; sleep 3600", tmp_path)
    assert res["timed_out"] is True and res["exit_code"] is None
    assert res["output_tail"].strip() == "bye"


def test_grandchild_holding_the_pipe_does_not_hang(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    res = run_within(f"sleep 3600 & echo $! > {pidfile}; echo hi", tmp_path)
    assert res["exit_code"] == 0 and res["timed_out"] is False and res["output_tail"].strip() == "hi"
    _assert_gone(int(pidfile.read_text()))


def test_process_group_is_killed_on_timeout(tmp_path, ready):
    pidfile = tmp_path / "child.pid"
    res = run_within(f"sleep 3600 & echo $! > {pidfile}; touch READY; wait", tmp_path)
    assert res["timed_out"] is True
    _assert_gone(int(pidfile.read_text()))


def test_command_that_cannot_start(tmp_path):
    res = verify.run("true", tmp_path / "missing-dir", timeout=60)
    assert res["exit_code"] == 127 and res["timed_out"] is False and not verify.passed(res)
    assert res["output_tail"].startswith("could not start")
    nul = verify.run("echo \0", tmp_path, timeout=60)
    assert nul["exit_code"] == 127 and nul["output_tail"].startswith("could not start")


def _assert_gone(pid: int) -> None:
    """The process is dead (a zombie awaiting its reaper counts as dead)."""

    def gone() -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")

    wait_for(gone, f"process {pid} to be gone", every=0.1)
