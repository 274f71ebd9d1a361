"""Starting a loop with the completion judge: the options of `loopwright start` and of the
slash command's argument text, what loop.json keeps, and what status shows."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import cli

CLIENT = {"LOOPWRIGHT_CLAUDE": sys.executable}  # any program outside the project passes the check


def loop_json(project, name="prompt"):
    return json.loads((project / ".loopwright" / "loops" / name / "loop.json").read_text())


def test_start_with_the_judge_keeps_its_settings_and_tells_the_agent(project):
    res = cli(project, "start", "--session", "S1", "--judge", "goal", env=CLIENT)
    assert res.returncode == 0, res.stderr
    assert "Completion judge: claude-haiku-4-5 (no tools)" in res.stdout
    cfg = loop_json(project)
    assert (cfg["judge"], cfg["judge_model"], cfg["judge_timeout"]) == (True, "claude-haiku-4-5", None)
    shown = json.loads(cli(project, "status", "--json").stdout)["loops"][0]["judge"]
    assert (shown["model"], shown["timeout"], shown["calls"]) == ("claude-haiku-4-5", 120.0, 0)
    text = cli(project, "status").stdout
    assert "judge: claude-haiku-4-5, 0 call(s): 0 done, 0 not done, 0 not judged · $0.0000" in text
    assert "last: none yet" in text


def test_start_without_the_judge_has_none(project):
    assert cli(project, "start", "--session", "S1", "goal").returncode == 0
    cfg = loop_json(project)
    assert cfg["judge"] is False and cfg["judge_model"] is None
    assert json.loads(cli(project, "status", "--json").stdout)["loops"][0]["judge"] is None
    assert "judge:" not in cli(project, "status").stdout


def test_the_slash_commands_text_takes_the_judge_options(project):
    text = '"make the tests pass" --judge --judge-model haiku --judge-timeout 30'
    res = cli(project, "start", "--session", "S1", "--args-stdin", input=text + "\n", env=CLIENT)
    assert res.returncode == 0, res.stderr
    cfg = loop_json(project)
    assert (cfg["prompt"], cfg["judge"], cfg["judge_model"], cfg["judge_timeout"]) == (
        "make the tests pass",
        True,
        "haiku",
        30.0,
    )


@pytest.mark.parametrize(
    "args, env, fragment",
    [
        (["--judge-model", "haiku"], CLIENT, "--judge-model and --judge-timeout go with --judge"),
        (["--judge", "--judge-model", "--dangerously-skip-permissions"], CLIENT, "is not a model name"),
        (["--judge", "--judge-model", "haiku; rm -rf ~"], CLIENT, "is not a model name"),
        (["--judge", "--judge-timeout", "0"], CLIENT, "--judge-timeout must be between 1 and 600"),
        (["--judge", "--judge-timeout", "601"], CLIENT, "--judge-timeout must be between 1 and 600"),
        (["--judge"], {"LOOPWRIGHT_CLAUDE": "/nonexistent/claude"}, "Claude Code's CLI was not found"),
    ],
)
def test_bad_judge_options_are_one_line_errors(project, args, env, fragment):
    res = cli(project, "start", "--session", "S1", *args, "goal", env=env)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], res.stderr
    assert not (project / ".loopwright" / "loops" / "prompt").exists()


def test_a_judge_inside_the_project_is_refused(project):
    planted = project / "claude"
    planted.write_text("#!/bin/sh\necho pwned\n")
    planted.chmod(0o755)
    res = cli(project, "start", "--session", "S1", "--judge", "goal", env={"LOOPWRIGHT_CLAUDE": str(planted)})
    assert res.returncode != 0 and "inside the project" in res.stderr
