"""What every `loopwright` command shares: the context object, safe output, one-line
errors, the ceiling options and the session the command runs in."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from loopwright.core import jsoncodec, termsafe
from loopwright.core.errors import UserError
from loopwright.state.project import STATE_DIRNAME, state_dir


class Ctx:
    def __init__(self, project: str | None):
        self.project = project

    @property
    def state(self) -> Path:
        if self.project and not os.environ.get("LOOPWRIGHT_STATE_DIR"):
            return Path(self.project).absolute() / STATE_DIRNAME
        return state_dir()

    @property
    def project_dir(self) -> Path:
        return self.state.parent


def echo(text: object = "", err: bool = False) -> None:
    """Print text that may hold what the agent or a file wrote: control characters are
    shown as escapes, never sent to the terminal."""
    click.echo(termsafe.clean(text), err=err)


def echo_json(obj: object, indent: bool = False) -> None:
    click.echo(termsafe.clean_json(jsoncodec.dumps(obj, indent=indent).decode()))


def emit(as_json: bool, data: dict, text: str) -> None:
    """``data`` as JSON with --json, else the sentence ``text``."""
    if as_json:
        echo_json(data)
    else:
        echo(text)


def fail(message: str, code: int = 1) -> None:
    echo(f"loopwright: error: {message}", err=True)
    sys.exit(code)


def db_option(fn):
    """``--db URL`` (or $LOOPWRIGHT_DATABASE_URL) of the commands that read or write the registry."""
    return click.option(
        "--db",
        "url",
        envvar="LOOPWRIGHT_DATABASE_URL",
        metavar="URL",
        help="The fleet's database: postgresql://… (default: the monitor's SQLite file, one machine).",
    )(fn)


def registry(url: str | None):
    """The registry at ``url`` (or $LOOPWRIGHT_DATABASE_URL, else the monitor's SQLite file);
    a database that cannot be opened is one line and exit code 1."""
    from loopwright.registry import RegistryError, open_registry
    from loopwright.serve import token

    try:
        return open_registry(url, default=str(token.data_dir() / "runs.sqlite"))
    except RegistryError as exc:
        fail(str(exc))


def ceiling_options(help_text: str):
    """The --max-* options for commands that raise ceilings; ``help_text`` has one {} for the budget."""
    specs = (
        ("--max-iterations", int, "iteration"),
        ("--max-minutes", float, "wall-clock minutes"),
        ("--max-tokens", int, "token"),
        ("--max-dollars", float, "dollar"),
        ("--max-prs", int, "PR"),
    )

    def wrap(fn):
        for flag, kind, what in reversed(specs):
            fn = click.option(flag, type=kind, help=help_text.format(what))(fn)
        return fn

    return wrap


def env_session() -> str | None:
    """Inside Claude Code (the agent's Bash tool) the session id is in the environment."""
    from loopwright.actions import start as starting  # not at the top: most commands never ask

    return starting.clean_session(os.environ.get("CLAUDE_CODE_SESSION_ID"))


class Group(click.Group):
    """Turns known failures into one-line errors instead of tracebacks; lists its commands in
    ``sections`` ((title, names) in the order a person needs them), the rest after them."""

    sections: tuple = ()

    def format_commands(self, ctx: click.Context, formatter) -> None:
        names = self.list_commands(ctx)
        listed = {n for _, group in self.sections for n in group}
        groups = [*self.sections, ("Other commands", [n for n in names if n not in listed])]
        limit = formatter.width - 6 - max((len(n) for n in names), default=0)
        for title, group in groups:
            rows = []
            for name in group:
                command = self.get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            fail(str(exc))
        except BrokenPipeError:
            # The reader went away (`loopwright status | head -1`): click's main ends quietly.
            raise
        except OSError as exc:
            fail(f"{exc.strerror or exc} ({exc.filename or 'file'}); check the path and its permissions")
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            if os.environ.get("LOOPWRIGHT_DEBUG") == "1":
                raise
            fail(
                f"internal error ({type(exc).__name__}: {exc});"
                " rerun with LOOPWRIGHT_DEBUG=1 for the traceback"
            )
