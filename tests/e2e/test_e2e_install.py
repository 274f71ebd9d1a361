"""The plugin installed the way the README says (marketplace add + install), and
the /loopwright:status command, through the real CLI."""

import json
import subprocess
import sys

import pytest

import claude_cli
import fakeapi
from conftest import REPO
from e2e_support import conv, loop_json, ok, prompt_context, stop_answers

pytestmark = pytest.mark.e2e


def cli(home, *args):
    env = claude_cli.offline_env("http://127.0.0.1:9", home)
    return subprocess.run(
        [claude_cli.claude_binary(), *args], capture_output=True, text=True, env=env, timeout=180
    )


def test_marketplace_install_then_a_loop_runs_without_plugin_dir(project, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    added = cli(home, "plugin", "marketplace", "add", str(REPO))
    assert added.returncode == 0, added.stdout + added.stderr
    installed = cli(home, "plugin", "install", "loopwright@loopwright")
    assert installed.returncode == 0 and "Successfully installed" in installed.stdout, (
        installed.stdout + installed.stderr
    )
    with fakeapi.ScriptedServer([fakeapi.text("first"), fakeapi.text("second")]) as server:
        res = claude_cli.run_claude(
            '/loopwright:loop "installed check" --max-iterations 2 --no-wrap-up',
            cwd=project,
            plugin_dir=None,
            server=server,
            home=home,
            env={"LOOPWRIGHT_PYTHON": sys.executable},
        )
        res.server = server
        ok(res)
    assert len(conv(res)) == 2
    answers = stop_answers(res)
    assert answers[0]["decision"] == "block" and "MAX_ITERATIONS" in answers[1]["systemMessage"]
    assert loop_json(project)["outcome"] == "MAX_ITERATIONS"
    installed_root = json.loads((home / ".claude/plugins/installed_plugins.json").read_text())["plugins"][
        "loopwright@loopwright"
    ][0]["installPath"]
    assert "/plugins/cache/" in installed_root


def test_status_command_shows_the_loops(claude, project):
    res = claude.run('/loopwright:loop "status check" --max-iterations 1 --no-wrap-up', [fakeapi.text("one")])
    ok(res)
    res2 = claude.run("/loopwright:status", [fakeapi.text("The loop ended after its only iteration.")])
    ok(res2)
    context = prompt_context(conv(res2)[0])
    assert "prompt: ended MAX_ITERATIONS after 1/1 iterations" in context
