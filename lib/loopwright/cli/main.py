"""The ``loopwright`` command line (click): one module per noun, thin over the actions.

Every error is one line naming the problem and the fix, with a non-zero exit. A mode
with a ``cli`` part adds its own commands; this file never names a mode.
"""

from __future__ import annotations

import click

from loopwright import __version__, modes
from loopwright.cli import db, doctor, fleet, gate, iteration, loop, run, serve, status, stop, tasks
from loopwright.cli.base import Ctx, Group


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loopwright")
@click.option(
    "-C",
    "--project",
    metavar="DIR",
    help="Project directory (default: $CLAUDE_PROJECT_DIR, else the git top level, else .).",
)
@click.pass_context
def main(ctx: click.Context, project: str | None) -> None:
    """loopwright: run a Claude Code session through many iterations, unattended and within budgets."""
    ctx.obj = Ctx(project)


for _noun in (loop, stop, run, serve, status, gate, iteration, tasks, doctor, db, fleet):
    for _command in _noun.COMMANDS:
        main.add_command(_command)


def add_mode_commands(group: click.Group) -> None:
    """Each registered mode's own commands (``modes/<name>/cli.py``, ``COMMANDS``)."""
    for name in modes.names():
        part = modes.part(name, "cli")
        for command in getattr(part, "COMMANDS", ()):
            group.add_command(command)


add_mode_commands(main)

# `loopwright --help` lists what a person runs first, and apart the commands the agent and the
# hooks run inside a loop (tests/cli/test_help.py keeps every command in one of them).
main.sections = (
    ("Commands",
     ("run", "start", "status", "stop", "cancel", "resume", "history", "submit", "worker", "fleet", "serve")),
    ("Setup and repair", ("doctor", "db", "adopt", "teardown", "release-lock", "discover")),
    ("Used inside a loop by the agent and the hooks",
     ("report", "gate", "task", "signal", "lifecycle", "review", "route", "statusline")),
)  # fmt: skip


def run() -> None:
    """Console entry point."""
    main(prog_name="loopwright")
