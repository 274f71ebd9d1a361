"""The monitor's recovery after its own restart, against real loops on disk and real
processes: a runner still running is adopted (its pid and create time, so a reused pid is
not), a run whose runner is gone is marked from its loop's own state, and an adopted run
is followed to its loop's end."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil

from conftest import REPO, hook_stop, lw_env
from loopwright.registry import migrations, open_registry
from loopwright.serve import runs
from waiting import wait_for

GONE_PID = 2**22 + 12345  # above any pid_max: never a live process


def lw(project, *args):
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), *args],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out


class Driver:
    """Records what recovery asked of the monitor's runs (resume, adopt)."""

    def __init__(self, events=None):
        self.resumed, self.adopted = [], []
        self.events = events  # where runners' event files are (dropped for runs that are gone)

    def resume(self, row):
        self.resumed.append(row["id"])

    def adopt(self, row):
        self.adopted.append(row["id"])


def running(reg, session, project, **fields):
    row = reg.add(session, str(project))
    reg.update(row["id"], status="running", **fields)
    return row["id"]


def test_recovery_marks_each_run_from_its_loop(tmp_path, project):
    lw(project, "start", "--session", "S1", "--name", "active", "goal one")
    lw(project, "start", "--session", "S2", "--name", "done", "goal two")
    lw(project, "cancel", "done")
    lw(project, "start", "--session", "S3", "--name", "gated", "goal three")
    budget_path = project / ".loopwright" / "loops" / "gated" / "budget.json"
    budget = json.loads(budget_path.read_text())
    question = "Approaching iterations (4/5). Continue, raise ceiling, or stop?"
    budget["pending_gates"] = [
        {
            "name": "budget-escalation",
            "question": question,
            "options": ["continue", "raise", "stop"],
            "asked_at": "2030-01-01T00:00:00Z",
            "asks": 1,
            "answer": None,
        }
    ]
    budget_path.write_text(json.dumps(budget))

    reg = open_registry(str(tmp_path / "runs.sqlite"))
    active = running(reg, "S1", project, loop="active", pid=GONE_PID)
    ended = running(reg, "S2", project, pid=GONE_PID)  # its runner never said which loop it started
    gated = running(reg, "S3", project, loop="gated", pid=GONE_PID)
    loopless = running(reg, "S4", project, pid=GONE_PID)
    me = psutil.Process()
    alive = running(reg, "S5", project, pid=me.pid, pid_started=me.create_time())
    reused = running(reg, "S6", project, pid=me.pid, pid_started=me.create_time() - 3600)

    driver = Driver(tmp_path / "events")
    notes = runs.recover(reg, driver, None)
    assert driver.resumed == [active] and driver.adopted == [alive], notes
    done = reg.get(ended)
    assert (done["status"], done["outcome"], done["loop"]) == ("ended", "CANCELLED", "done")
    assert reg.get(gated)["status"] == "waiting_gate" and "budget-escalation" in reg.get(gated)["reason"]
    assert reg.get(loopless)["status"] == runs.LOST
    assert reg.get(reused)["status"] == runs.LOST  # its pid lives, but as another process
    # Nothing left live but the resumed and the adopted runs: the other sessions are free again.
    assert [r["id"] for r in reg.live()] == [active, alive]
    assert reg.live_for(session="S4") is None
    reg.close()


def test_an_old_registry_gains_the_create_time_column(tmp_path):
    import sqlite3

    path = tmp_path / "runs.sqlite"
    old = sqlite3.connect(path)
    old.executescript(migrations.sql_for(migrations.RUNS, "sqlite").replace("    pid_started REAL,\n", ""))
    old.execute(
        "INSERT INTO runs (id, session, project, status, pid, created_at, updated_at) "
        "VALUES ('r1', 'S1', '/p', 'running', 7, 'x', 'x')"
    )
    old.commit()
    old.close()
    reg = open_registry(str(path))
    assert reg.get("r1")["pid_started"] is None and reg.get("r1")["pid"] == 7
    reg.close()


def test_an_adopted_run_is_followed_to_its_loops_end(tmp_path, project):
    """A real process stands in for the runner the monitor lost: while it lives the row
    follows the loop's progress; when the loop ends the row takes its outcome."""
    lw(project, "start", "--session", "S1", "goal")
    reg = open_registry(str(tmp_path / "runs.sqlite"))
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        started = psutil.Process(stand_in.pid).create_time()
        run_id = running(reg, "S1", project, loop="prompt", pid=stand_in.pid, pid_started=started)
        jobs = runs.Runs(reg, poll=0.1)
        assert runs.recover(reg, jobs) and reg.get(run_id)["status"] == "running"
        assert hook_stop(project, "S1", message="working")["decision"] == "block"  # one iteration done
        progress = project / ".loopwright" / "loops" / "prompt" / "progress.json"
        shown = json.loads(progress.read_text())["iteration"]
        wait_for(lambda: reg.get(run_id)["iteration"] == shown, "the row follows the progress")
        lw(project, "cancel", "prompt")
        row = wait_for(lambda: (r := reg.get(run_id))["status"] == "ended" and r, "the row ends")
        assert row["outcome"] == "CANCELLED"
    finally:
        stand_in.kill()
        stand_in.wait(timeout=60)
    reg.close()


def test_an_adopted_run_whose_runner_dies_with_its_loop_active_is_lost(tmp_path, project):
    lw(project, "start", "--session", "S1", "goal")
    reg = open_registry(str(tmp_path / "runs.sqlite"))
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    started = psutil.Process(stand_in.pid).create_time()
    run_id = running(reg, "S1", project, loop="prompt", pid=stand_in.pid, pid_started=started)
    runs.Runs(reg, poll=0.1).adopt(reg.get(run_id))
    stand_in.kill()
    stand_in.wait(timeout=60)
    row = wait_for(lambda: (r := reg.get(run_id))["status"] != "running" and r, "the row settles")
    assert row["status"] == runs.LOST and "loopwright run --loop prompt" in row["reason"]
    assert reg.live_for(session="S1") is None
    reg.close()


def test_a_runners_events_are_read_from_its_file_as_they_come(tmp_path, project):
    """The runner writes its events to a private file (a pipe would break under it when the
    monitor is killed): lines are folded as they land, a line cut in two included."""
    reg = open_registry(str(tmp_path / "runs.sqlite"))
    row = reg.add("S1", str(project))
    jobs = runs.Runs(reg)
    log = jobs._events_file(row["id"])
    assert oct(log.parent.stat().st_mode & 0o777) == "0o700"
    log.touch(mode=0o600)  # as _spawn makes it, before the runner starts
    script = (
        "import sys, time\n"
        "out = open(sys.argv[1], 'a')\n"
        'out.write(\'{"event": "started", "lo\'); out.flush(); time.sleep(0.3)\n'
        'out.write(\'op": "prompt"}\\n\'); out.flush()\n'
        "time.sleep(0.3)\n"
        'out.write(\'{"event": "ended", "outcome": "LOOP_DONE", "reason": "r"}\\n\'); out.flush()\n'
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(log)])
    jobs._follow(row["id"], proc, log)
    done = reg.get(row["id"])
    assert (done["loop"], done["status"], done["outcome"]) == ("prompt", "ended", "LOOP_DONE")
    assert not log.exists()
    reg.close()
