"""`loopwright stop`: end a loop at its next Stop, with its report; this project's loop, or a
fleet loop by name when a fleet database is given."""

from __future__ import annotations

import os

import click

from loopwright.actions import start as starting
from loopwright.actions import stop as stopping
from loopwright.cli.base import Ctx, echo, env_session
from loopwright.state import loops


@click.command("stop")
@click.argument("name", required=False)
@click.option("--session", help="Stop the loop this session owns (default: $CLAUDE_CODE_SESSION_ID).")
@click.option(
    "--db",
    "url",
    metavar="URL",
    help="Stop fleet loop NAME in this database (postgresql://…) as `loopwright fleet stop` does. "
    "With $LOOPWRIGHT_DATABASE_URL set, a NAME that is no loop of this project is taken as a fleet loop.",
)
@click.pass_obj
def stop(obj: Ctx, name, session, url) -> None:
    """Stop loop NAME (default: this session's, else the only active loop) at its next Stop: its
    session finishes the turn under way, then the loop ends STOPPED:user_stop with its report. A
    loop no live session holds ends now. Unlike `cancel`, the loop's last turn is finished."""
    fleet = url or (os.environ.get("LOOPWRIGHT_DATABASE_URL") if name and not _local(obj, name) else None)
    if fleet:
        from loopwright.cli.fleet import steer

        return steer(fleet, name, "stop") if name else _need_name()
    echo(stopping.stop(obj.state, name, starting.clean_session(session) or env_session()))


def _local(obj: Ctx, name: str) -> bool:
    """Whether this project has a loop called ``name``."""
    try:
        return name in loops.loop_names(obj.state)
    except (OSError, loops.LoopError):
        return False


def _need_name() -> None:
    from loopwright.cli.base import fail

    fail("give the fleet loop's name: `loopwright stop NAME --db URL` (`loopwright fleet ls` lists them)")


COMMANDS = (stop,)
