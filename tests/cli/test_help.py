"""`loopwright --help` and every command's --help: what a person runs first, the agent's and
hooks' commands under their own heading, every option and argument explained, and errors that
name options as the user types them."""

from __future__ import annotations

import subprocess

import click

from conftest import REPO, cli, lw_env
from loopwright.cli.main import main

main.every()  # the root imports its commands as they are used; the checks below walk them all


def commands(group: click.Group, path: tuple = ("loopwright",)):
    """Every command under ``group`` with its path, the group's own included."""
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_every_option_and_argument_has_help():
    """An option says what it does (its help), an argument is explained in its command's help
    (by its metavar: `PROMPT is a goal…`); hidden ones are the worker's own plumbing."""
    missing = []
    for path, command in commands(main):
        for param in command.params:
            if getattr(param, "hidden", False) or param.name == "help":
                continue
            if isinstance(param, click.Option) and not (param.help or "").strip():
                missing.append(f"{' '.join(path)} {param.opts[0]}")
            if isinstance(param, click.Argument):
                metavar = param.human_readable_name
                if metavar not in (command.help or ""):
                    missing.append(f"{' '.join(path)} argument {metavar} (not named in its help)")
    assert not missing, "\n".join(missing)


def test_the_top_level_help_lists_a_persons_commands_first_and_the_agents_apart():
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "--help"], capture_output=True, text=True, env=lw_env(), timeout=60
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    heads = ["Commands:", "Setup and repair:", "Used inside a loop by the agent and the hooks:"]
    assert [text.index(h) for h in heads] == sorted(text.index(h) for h in heads)
    section = text[text.index("Commands:") : text.index("Setup and repair:")]
    first = [line.split()[0] for line in section.splitlines()[1:] if line.strip()]
    assert first[:3] == ["run", "start", "status"] and {"stop", "submit", "worker", "fleet"} <= set(first)
    assert "report" not in first
    agents = text[text.index(heads[2]) :]
    for name in ("report", "signal", "task", "lifecycle", "gate", "route", "statusline"):
        assert f"\n  {name} " in agents, name
    assert "Other commands:" not in text  # every command has its place


def test_errors_name_options_as_the_user_types_them(project):
    out = cli(project, "start", "--max-iterations", "0", "goal")
    assert out.returncode == 1 and "--max-iterations must be 1 or more" in out.stderr
    out = cli(project, "fleet", "limits", "--max-running", "-1", "--db", str(project / "r.sqlite"))
    assert out.returncode == 1 and "--max-running is a number of 0 or more" in out.stderr
    out = cli(project, "submit", "--db", str(project / "r.sqlite"), "--repo", "/srv/a.git",
              "--max-dollars", "-1", "goal")  # fmt: skip
    assert out.returncode == 1 and "error: --max-dollars must be between 0.0 and" in out.stderr
