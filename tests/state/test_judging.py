"""The judge's shell (state/judging.py): which client runs, with what environment, what
git tells it about the project (without running anything the project configures), and
the bound on the process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from loopwright.state import judging
from loopwright.state.fspath import Path


def executable(path) -> str:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def test_the_client_is_loopwright_claude_or_claude_on_path(tmp_path, project, monkeypatch):
    outside = tmp_path / "bin"
    outside.mkdir()
    claude = executable(outside / "claude")
    monkeypatch.setenv("LOOPWRIGHT_CLAUDE", claude)
    assert judging.find_client(Path(project)) == (claude, "")
    monkeypatch.delenv("LOOPWRIGHT_CLAUDE")
    monkeypatch.setenv("PATH", f"{outside}{os.pathsep}/usr/bin")
    assert judging.find_client(Path(project)) == (claude, "")
    monkeypatch.setenv("PATH", "/nonexistent")
    client, why = judging.find_client(Path(project))
    assert client is None and "LOOPWRIGHT_CLAUDE" in why


def test_a_file_of_the_project_never_becomes_the_judge(tmp_path, project, monkeypatch):
    planted = executable(project / "claude")
    # A relative PATH entry resolves in the project (the judge's working directory): skipped.
    monkeypatch.setenv("PATH", f".{os.pathsep}bin")
    monkeypatch.delenv("LOOPWRIGHT_CLAUDE", raising=False)
    monkeypatch.chdir(project)
    assert judging.find_client(Path(project))[0] is None
    # An absolute entry inside the project, or LOOPWRIGHT_CLAUDE naming a file in it: refused.
    monkeypatch.setenv("PATH", str(project))
    client, why = judging.find_client(Path(project))
    assert client is None and "inside the project" in why
    monkeypatch.setenv("LOOPWRIGHT_CLAUDE", planted)
    assert judging.find_client(Path(project))[0] is None
    # A link in the project to a program elsewhere is still the project's choice: refused.
    (project / "link").symlink_to(sys.executable)
    monkeypatch.setenv("LOOPWRIGHT_CLAUDE", str(project / "link"))
    assert judging.find_client(Path(project))[0] is None
    monkeypatch.setenv("LOOPWRIGHT_CLAUDE", "bin/claude")  # relative: would resolve in the project
    assert judging.find_client(Path(project))[0] is None


def test_the_judge_does_not_inherit_the_loops_session(monkeypatch):
    for name, value in (
        ("CLAUDE_CODE_SESSION_ID", "loop-session"),
        ("CLAUDE_PROJECT_DIR", "/p"),
        ("CLAUDE_PLUGIN_ROOT", "/plugin"),
        ("CLAUDE_PLUGIN_DATA", "/data"),
        ("LOOPWRIGHT_LATE_TICK", "1"),
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
        ("CLAUDE_CODE_MAX_RETRIES", "9"),
    ):
        monkeypatch.setenv(name, value)
    env = judging.client_env()
    assert not {
        "CLAUDE_CODE_SESSION_ID",
        "CLAUDE_PROJECT_DIR",
        "CLAUDE_PLUGIN_ROOT",
        "CLAUDE_PLUGIN_DATA",
    } & set(env)
    assert "LOOPWRIGHT_LATE_TICK" not in env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"  # the user's API settings stay
    assert env["CLAUDE_CODE_MAX_RETRIES"] == str(judging.RETRIES)
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "0")
    assert judging.client_env()["CLAUDE_CODE_MAX_RETRIES"] == "0"


def git(project, *args):
    subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True)


def test_git_tells_what_changed_without_running_what_the_project_configures(project, tmp_path):
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "start")
    (project / "parse.py").write_text("x = 1\n")
    git(project, "add", "parse.py")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "add the parser")
    (project / "parse.py").write_text("x = 2\ny = 3\n")
    (project / "notes.txt").write_text("new\n")
    bait = tmp_path / "pwned"
    git(project, "config", "core.fsmonitor", f"touch {bait}-fsmonitor; false")
    git(project, "config", "diff.external", f"touch {bait}-diff")
    git(project, "config", "core.pager", f"touch {bait}-pager; cat")
    out = judging.git_evidence(Path(project), None, time.monotonic() + 60)
    assert "parse.py" in out["diffstat"] and "2 insertions" in out["diffstat"]
    assert "?? notes.txt" in out["status"]
    assert "add the parser" in out["commits"]
    assert list(tmp_path.glob("pwned*")) == []
    plain = tmp_path / "plain"
    plain.mkdir()
    assert judging.git_evidence(Path(plain), None, time.monotonic() + 60)["diffstat"].startswith(
        "(not available"
    )


def test_the_process_is_bounded(tmp_path):
    script = "import sys, time; sys.stdout.write('x' * 5000); sys.stdout.flush(); time.sleep(600)"
    out, code, timed_out = judging.run_bounded(
        [sys.executable, "-c", script], Path(tmp_path), dict(os.environ), time.monotonic() + 2, 1000
    )
    assert timed_out and code is None and out == "x" * 1000
    out, code, timed_out = judging.run_bounded(
        ["/nonexistent/claude"], Path(tmp_path), {}, time.monotonic() + 5, 100
    )
    assert (code, timed_out) == (127, False) and "could not start" in out


@pytest.mark.parametrize("spent, allowed", [(None, 120.0), (800.0, 40.0), (839.5, 1.0)])
def test_the_judge_gets_what_the_check_left_of_the_stop(spent, allowed):
    result = {"seconds": spent} if spent is not None else None
    assert judging.time_allowed({"judge": True}, result) == allowed
