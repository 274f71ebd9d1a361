"""`loopwright stop`: a loop's session finishes the turn under way and the next Stop ends the
loop STOPPED:user_stop with its report; a loop no live session holds ends now; a fleet loop's
name with a database is stopped as `fleet stop` stops it. One line says what happens next."""

from __future__ import annotations

import json

from conftest import cli, hook_stop


def loop_json(project, name="prompt") -> dict:
    return json.loads((project / ".loopwright" / "loops" / name / "loop.json").read_text())


def test_a_loop_with_a_live_session_stops_at_its_next_stop_with_a_report(project):
    cli(project, "start", "--session", "S1", "goal")
    hook_stop(project, "S1", "working")  # the session holds the loop now (its lock)
    out = cli(project, "stop")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "loopwright: loop prompt stops at its next Stop: its session finishes the turn under way, then the "
        "loop ends STOPPED:user_stop with a report; `loopwright cancel prompt` ends it now.\n"
    )
    assert loop_json(project)["status"] == "active"
    answer = hook_stop(project, "S1", "still working")  # the next Stop ends it: no block
    assert "decision" not in answer and "ended: STOPPED:user_stop" in answer["systemMessage"]
    ended = loop_json(project)
    assert (ended["status"], ended["outcome"]) == ("ended", "STOPPED:user_stop")
    assert (project / ".loopwright" / "loops" / "prompt" / "report.md").is_file()
    again = cli(project, "stop", "prompt")
    assert again.stdout.startswith("loopwright: loop prompt has already ended (STOPPED:user_stop)")


def test_a_loop_no_session_holds_ends_now(project):
    cli(project, "start", "--name", "idle", "goal")  # waits to be attached: no session, no lock
    out = cli(project, "stop", "idle")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        "loopwright: loop idle had no live session, so it ended now: STOPPED:user_stop"
    )
    assert loop_json(project, "idle")["outcome"] == "STOPPED:user_stop"


def test_stop_without_a_loop_is_one_line(project):
    out = cli(project, "stop", "nope")
    assert out.returncode == 1 and out.stderr.startswith("loopwright: error: no loop named nope")
