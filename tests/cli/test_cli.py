"""The loopwright command line: output, JSON, and one-line errors. In-process with
click's CliRunner, except where the process itself is the point (finding the project
from the working directory, the launcher)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, cli, hook_stop, lw_env

CLI = REPO / "bin" / "loopwright"


lw = cli  # in-process


def stop(project, session="S1", message="working"):
    return hook_stop(project, session, message)


def snapshot(project):
    return {
        p.relative_to(project): p.read_bytes() for p in (project / ".loopwright").rglob("*") if p.is_file()
    }


def one_line_error(res, fragment):
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("loopwright: error: ") and fragment in lines[0], lines[0]


def test_status_with_no_loops(project):
    res = lw(project, "status")
    assert res.returncode == 0 and "No loops" in res.stdout
    assert json.loads(lw(project, "status", "--json").stdout) == {"loops": [], "problems": []}
    assert not (project / ".loopwright").exists()
    fleet = lw(project, "status", env={"LOOPWRIGHT_DATABASE_URL": "postgresql://lw@db/fleet"})
    assert (
        fleet.stdout.splitlines()[1] == "The fleet's loops (LOOPWRIGHT_DATABASE_URL): `loopwright fleet ls`."
    )
    named = lw(project, "status", "f1", env={"LOOPWRIGHT_DATABASE_URL": "postgresql://lw@db/fleet"})
    line = named.stderr.strip()
    assert named.returncode == 1 and line.endswith(
        "(a fleet loop? `loopwright fleet ls` and `fleet events NAME`)"
    )


def test_status_json_schema(project):
    lw(project, "start", "--session", "S1", "--max-iterations", "4", "goal")
    stop(project)
    loops = json.loads(lw(project, "status", "--json").stdout)["loops"]
    (lp,) = loops
    for key in (
        "name",
        "mode",
        "status",
        "outcome",
        "iteration",
        "max_iterations",
        "owner_session",
        "started_at",
        "last_reason",
    ):
        assert key in lp
    assert (
        lp["name"],
        lp["mode"],
        lp["status"],
        lp["outcome"],
        lp["iteration"],
        lp["max_iterations"],
        lp["owner_session"],
    ) == ("prompt", "prompt", "active", None, 2, 4, "S1")
    assert "iteration 2 begins" in lp["last_reason"]


def test_status_text_for_active_and_ended(project):
    lw(project, "start", "--session", "S1", "--max-iterations", "1", "--no-wrap-up", "--name", "one", "goal")
    lw(project, "start", "--session", "S2", "--name", "two", "goal")
    stop(project, "S1")
    out = lw(project, "status").stdout
    assert "one: ended MAX_ITERATIONS after 1/1 iterations" in out
    assert "two: active (prompt mode), iteration 1/20" in out and "owner session: S2" in out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["start"], "no goal given"),
        (["start", "--max-iterations", "0", "g"], "--max-iterations must be 1 or more"),
        (["start", "--max-minutes", "-1", "g"], "--max-minutes must be more than 0"),
        (["start", "--completion-promise", "<x>", "g"], "must not contain < or >"),
        (["start", "--name", "../evil", "g"], "invalid loop name"),
        (["status", "nope"], "no loop named nope"),
        (["cancel"], "no active loop"),
        (["resume"], "no active loop"),
        (["route"], "no active loop"),
        (["release-lock", "--owner", "session:x", "nope"], "no loop named nope"),
    ],
)
def test_errors_are_one_line_with_nonzero_exit(project, args, fragment):
    one_line_error(lw(project, *args), fragment)


def test_start_from_slash_argument_text_on_stdin(project):
    res = lw(project, "start", "--session", "S1", "--args-stdin", input='"a; b | $(c)" --max-iterations 3\n')
    assert res.returncode == 0, res.stderr
    cfg = json.loads((project / ".loopwright/loops/prompt/loop.json").read_text())
    assert cfg["prompt"] == "a; b | $(c)" and cfg["max_iterations"] == 3


def test_start_uses_the_session_from_claude_codes_environment(project):
    res = lw(project, "start", "goal", env={"CLAUDE_CODE_SESSION_ID": "ENV-SESSION"})
    assert res.returncode == 0
    assert (
        json.loads((project / ".loopwright/loops/prompt/loop.json").read_text())["owner_session"]
        == "ENV-SESSION"
    )


def test_unsubstituted_session_placeholder_is_treated_as_unknown(project):
    lw(project, "start", "--session", "${CLAUDE_SESSION_ID}", "goal")
    assert json.loads((project / ".loopwright/loops/prompt/loop.json").read_text())["owner_session"] is None


def test_route_is_a_dry_run(project):
    lw(project, "start", "--session", "S1", "--completion-promise", "DONE", "goal")
    stop(project)
    before = snapshot(project)
    res = lw(project, "route", "--explain", "--message", "done\n<promise>DONE</promise>")
    assert res.returncode == 0
    assert res.stdout.splitlines()[0] == "LOOP_DONE"
    assert "completion: <promise>DONE</promise> found" in res.stdout
    res2 = lw(project, "route", "--explain")
    assert res2.stdout.splitlines()[0] == "CONTINUE" and "next prompt:" in res2.stdout
    assert snapshot(project) == before


def test_cancel_is_a_tombstone(project):
    lw(project, "start", "--session", "S1", "goal")
    res = lw(project, "cancel", "--reason", "changed my mind")
    assert res.returncode == 0 and "CANCELLED" in res.stdout
    assert stop(project) is None
    one_line_error(
        lw(project, "resume", "prompt", "--session", "S1"), "was cancelled; a cancelled loop stays ended"
    )
    report = (project / ".loopwright/loops/prompt/report.md").read_text()
    assert "CANCELLED" in report and "changed my mind" in report
    # A later cancel says so and changes nothing.
    again = lw(project, "cancel", "prompt")
    assert again.returncode == 0 and "already ended" in again.stdout


def test_resume_refuses_a_live_owner_and_takes_over_a_dead_one(project):
    lw(project, "start", "--session", "S1", "goal")
    lock = project / ".loopwright/loops/prompt/loop.lock"
    one_line_error(lw(project, "resume", "--session", "S2"), "Previous iteration 1 still active")
    data = json.loads(lock.read_text())
    data["pid"] = 999_999_999  # a process that does not exist
    lock.write_text(json.dumps(data))
    res = lw(project, "resume", "--session", "S2")
    assert res.returncode == 0 and 'loop "prompt" resumed' in res.stdout
    assert json.loads((project / ".loopwright/loops/prompt/loop.json").read_text())["owner_session"] == "S2"
    assert json.loads(lock.read_text())["owner"] == "session:S2"
    assert stop(project, "S1") is None  # the old owner no longer drives it
    assert stop(project, "S2")["decision"] == "block"


def test_release_lock_only_for_its_owner(project):
    lw(project, "start", "--session", "S1", "goal")
    one_line_error(lw(project, "release-lock", "--owner", "session:S2"), "held by session:S1, not session:S2")
    res = lw(project, "release-lock", "--owner", "session:S1")
    assert res.returncode == 0 and not (project / ".loopwright/loops/prompt/loop.lock").exists()


def test_teardown_refuses_a_live_loop(project):
    lw(project, "start", "--session", "S1", "goal")
    one_line_error(lw(project, "teardown", "prompt"), "is active and its lock is alive")
    assert lw(project, "teardown", "prompt", "--force").returncode == 0
    assert not (project / ".loopwright/loops/prompt").exists()
    assert stop(project) is None


def test_doctor_reports_state_problems(project):
    lw(project, "start", "--session", "S1", "goal")
    (project / ".loopwright/loops/prompt/budget.json").write_text("{")
    res = lw(project, "doctor")
    assert res.returncode == 1
    assert "budget.json is corrupt" in res.stdout
    assert "Stop hook" in res.stdout and "block cap" in res.stdout


def test_doctor_passes_on_a_healthy_project(project):
    lw(project, "start", "--session", "S1", "goal")
    res = lw(project, "doctor")
    assert res.returncode == 0, res.stdout
    assert "All checks passed." in res.stdout


def test_corrupt_loop_json_in_status_is_a_problem_line_not_a_crash(project):
    lw(project, "start", "--session", "S1", "goal")
    lw(project, "start", "--session", "S2", "--name", "other", "goal two")
    (project / ".loopwright/loops/prompt/loop.json").write_text("]")
    res = lw(project, "status", "--json")
    assert res.returncode == 0
    data = json.loads(res.stdout)
    by_name = {lp["name"]: lp for lp in data["loops"]}
    assert by_name["prompt"]["status"] == "untrusted" and "invalid JSON" in by_name["prompt"]["problem"]
    assert by_name["other"]["status"] == "active"  # the other loop is shown normally
    assert data["problems"] and data["problems"][0].startswith("prompt:")


def test_cli_finds_the_project_from_a_subdirectory(project):
    lw(project, "start", "--session", "S1", "goal")
    sub = project / "src" / "deep"
    sub.mkdir(parents=True)
    env = lw_env()
    res = subprocess.run([str(CLI), "status", "--json"], cwd=sub, capture_output=True, text=True, env=env)
    assert json.loads(res.stdout)["loops"][0]["name"] == "prompt"


def test_doctor_names_a_missing_gh_as_a_warning_only(project):
    res = lw(project, "doctor", env={"LOOPWRIGHT_GH": "/nonexistent/gh"})
    assert res.returncode == 0, res.stdout
    assert "only work loops over GitHub issues and review loops need it" in res.stdout


def test_a_reader_that_goes_away_ends_the_command_quietly(project):
    """`loopwright status | head -1`: the pipe closes under the writer; no error line and no
    Python message about an ignored exception, only a failing exit code as click's own."""
    lw(project, "start", "--session", "S1", "goal")
    for argv in (["status"], ["status", "--json"], ["fleet", "--help"]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first write
        try:
            res = subprocess.run(
                [str(CLI), *argv], cwd=project, stdout=write, stderr=subprocess.PIPE, text=True, env=lw_env()
            )
        finally:
            os.close(write)
        assert res.returncode == 1 and res.stderr == "", (argv, res.stderr)


def test_doctor_fails_a_fleet_install_without_its_packages_and_warns_of_a_missing_claude(
    project, monkeypatch
):
    """With $LOOPWRIGHT_DATABASE_URL naming a PostgreSQL fleet, psycopg missing is a failure
    (every fleet command would fail); without it, a note. A Claude Code CLI not found is a
    warning: `run` and the worker need one."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed: its import fails
    fleet = lw(project, "doctor", env={"LOOPWRIGHT_DATABASE_URL": "postgresql://lw@db/fleet"})
    assert fleet.returncode == 1, fleet.stdout
    failed = [line for line in fleet.stdout.splitlines() if line.startswith("[FAIL]")]
    assert failed == [
        "[FAIL] package psycopg: missing, and LOOPWRIGHT_DATABASE_URL names a PostgreSQL fleet: pip install"
        " '/path/to/loopwright[fleet]' from a checkout (it is not on PyPI); in Claude Code a new session"
        " installs them"
    ], fleet.stdout
    alone = lw(project, "doctor", env={"LOOPWRIGHT_CLAUDE": "/nonexistent/claude"})
    assert alone.returncode == 0, alone.stdout
    assert "[warn] package psycopg: missing: only a fleet on PostgreSQL needs it" in alone.stdout
    assert "[warn] claude: Claude Code's CLI is not on PATH" in alone.stdout
