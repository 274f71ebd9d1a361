"""The ``loopwright`` command line (click): one module per noun, thin over the actions.

Every error is one line naming the problem and the fix, with a non-zero exit. A mode
with a ``cli`` part adds its own commands; this file never names a mode.

A command's module is imported when the command runs, not before: `loopwright report`, which
the agent runs every iteration, imported every command's module (the fleet's, the server's and
each mode's) and spent about half of its start-up on commands it never ran.
"""

from __future__ import annotations

from importlib import import_module

import click

from loopwright import __version__, modes
from loopwright.cli.base import Ctx, Group

# The module (under loopwright.cli) that defines each of the engine's commands; a mode's
# commands are found in its own ``cli`` part. tests/cli/test_command_table.py keeps this equal to
# the modules' COMMANDS.
WHERE = {
    "adopt": "loop", "cancel": "loop", "release-lock": "loop", "resume": "loop", "route": "loop",
    "start": "loop", "teardown": "loop",
    "db": "db",
    "discover": "doctor", "doctor": "doctor",
    "fleet": "fleet", "submit": "fleet", "worker": "fleet",
    "gate": "gate",
    "history": "status", "status": "status", "statusline": "status",
    "report": "iteration",
    "run": "run",
    "serve": "serve",
    "stop": "stop",
    "task": "tasks",
}  # fmt: skip


class Commands(Group):
    """The root group: each command imported from its module the first time it is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.load_modes()
        return sorted({*WHERE, *self.commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands:
            if name in WHERE:
                self.add_from(import_module(f"loopwright.cli.{WHERE[name]}"))
            else:
                self.load_modes()
        return self.commands.get(name)

    def load_modes(self) -> None:
        """Each registered mode's own commands (``modes/<name>/cli.py``, ``COMMANDS``)."""
        for name in modes.names():
            part = modes.part(name, "cli")
            if part is not None:
                self.add_from(part)

    def add_from(self, module) -> None:
        for command in getattr(module, "COMMANDS", ()):
            self.commands.setdefault(command.name, command)

    def every(self) -> dict[str, click.Command]:
        """Every command, each module imported (for the checks that walk them all)."""
        return {name: self.get_command(None, name) for name in self.list_commands(None)}


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
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
