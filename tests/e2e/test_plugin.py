"""The plugin as Claude Code sees it: the manifest validates, and on a machine
with nothing installed the SessionStart hook builds the interpreter the other
hooks then use."""

import json
import shutil
import subprocess
import sys

import pytest

import claude_cli
import fakeapi
from conftest import REPO, lw_env


def test_claude_plugin_validate_passes():
    for target in (REPO, REPO / ".claude-plugin" / "plugin.json"):
        out = claude_cli.validate_plugin(target)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Validation passed" in out.stdout and "warning" not in out.stdout.lower()


def plugin_copy(tmp_path):
    root = tmp_path / "plugin"
    for part in ("hooks", "lib", "bin", "commands", "skills", ".claude-plugin"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "requirements.txt", root / "requirements.txt")
    shutil.copy(REPO / "requirements-fleet.txt", root / "requirements-fleet.txt")
    return root


@pytest.mark.slow
def test_session_start_installs_packages_once_and_again_when_requirements_change(tmp_path):
    root = plugin_copy(tmp_path)
    data, env_file = tmp_path / "data", tmp_path / "env.sh"
    # python3 on PATH is a recorder: each start of it is a line in starts.log.
    shims, starts = tmp_path / "shims", tmp_path / "starts.log"
    shims.mkdir()
    (shims / "python3").write_text(f"#!/bin/sh\necho \"$*\" >> '{starts}'\nexec '{sys.executable}' \"$@\"\n")
    (shims / "python3").chmod(0o755)
    env = lw_env(CLAUDE_PLUGIN_DATA=str(data), CLAUDE_ENV_FILE=str(env_file))
    env.pop("LOOPWRIGHT_PYTHON")
    env["PATH"] = f"{shims}:{env['PATH']}"

    def run():
        out = subprocess.run(
            [str(root / "hooks" / "session-start")], capture_output=True, text=True, env=env, timeout=600
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    def python_starts() -> int:
        return len(starts.read_text().splitlines()) if starts.exists() else 0

    # A fleet's database is named: its PostgreSQL client is installed too.
    env["LOOPWRIGHT_DATABASE_URL"] = "postgresql://lw@db.example/fleet"
    msg = run()
    assert python_starts() >= 1  # the venv was made with python3 from PATH
    assert "installed its Python packages" in json.loads(msg)["systemMessage"]
    py = data / "venv" / "bin" / "python"
    check = subprocess.run(
        [str(py), "-c", "import click, portalocker, psutil, psycopg, psycopg_pool"], capture_output=True
    )
    assert check.returncode == 0, check.stderr
    assert f"export LOOPWRIGHT_DATA='{data}'" in env_file.read_text()
    # Nothing changed: no output, no reinstall, and no Python started at all (one file
    # comparison; what that costs in time is for `make bench`).
    before, venv_id = python_starts(), (py.parent.parent.stat().st_ino, py.parent.parent.stat().st_mtime_ns)
    log = (data / "install.log").read_bytes()
    msg = run()
    assert msg == "" and python_starts() == before
    assert (py.parent.parent.stat().st_ino, py.parent.parent.stat().st_mtime_ns) == venv_id
    assert (data / "install.log").read_bytes() == log
    # The bundled requirements change, and no fleet database is named any more: it reinstalls,
    # without the PostgreSQL client.
    with open(root / "requirements.txt", "a") as fh:
        fh.write("# bumped\n")
    del env["LOOPWRIGHT_DATABASE_URL"]
    msg = run()
    assert "installed" in msg and python_starts() > before
    assert subprocess.run([str(py), "-c", "import psycopg"], capture_output=True).returncode != 0
    # The hooks now pick that interpreter.
    probe = subprocess.run(
        ["sh", "-c", f'. "{root}/hooks/lib.sh"; echo "$LW_PY"'], capture_output=True, text=True, env=env
    )
    assert probe.stdout.strip() == str(py)


@pytest.mark.e2e
@pytest.mark.slow
def test_fresh_machine_session_bootstraps_and_runs_a_loop(claude, tmp_path):
    """No LOOPWRIGHT_PYTHON: the real CLI's SessionStart hook builds the venv under
    the plugin data directory, and the loop then runs on it."""
    replies = [
        fakeapi.bash('echo "data=$LOOPWRIGHT_DATA"; loopwright status --json', text="Checking the loop."),
        fakeapi.text("first pass done"),
        fakeapi.text("all done\n<promise>DONE</promise>"),
    ]
    res = claude.run(
        '/loopwright:loop "bootstrap check" --completion-promise DONE',
        replies,
        env={"LOOPWRIGHT_PYTHON": ""},
        timeout=600,
    )
    assert res.returncode == 0, res.describe()
    venv_python = (
        claude.home / ".claude" / "plugins" / "data" / "loopwright-inline" / "venv" / "bin" / "python"
    )
    assert venv_python.exists(), res.describe()
    assert claude.loops()["prompt"]["outcome"] == "LOOP_DONE"
    tool_out = json.dumps(res.tool_results)
    assert '\\"name\\": \\"prompt\\"' in tool_out or '"name": "prompt"' in tool_out, tool_out
