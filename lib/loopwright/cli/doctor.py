"""Checking the setup (`doctor`) and what a loop can use (`discover`)."""

from __future__ import annotations

import sys

import click

from loopwright.cli.base import Ctx, echo, echo_json


@click.command()
@click.pass_obj
def doctor(obj: Ctx) -> None:
    """Check the interpreter, packages, hook wiring, competing Stop hooks and loop state."""
    from loopwright.actions import doctor as checkup

    checks = checkup.run(obj.state)
    for c in checks:
        echo(f"[{c.level:>4}] {c.what}: {c.detail}")
    failed = [c for c in checks if c.level == checkup.FAIL]
    echo(f"{len(failed)} problem(s) found." if failed else "All checks passed.")
    sys.exit(1 if failed else 0)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print capabilities.json.")
@click.pass_obj
def discover(obj: Ctx, as_json) -> None:
    """Detect the CLI tools and MCP servers a loop can use; writes .loopwright/capabilities.json."""
    from loopwright.actions import discover as disc

    caps = disc.discover(obj.state)
    if as_json:
        echo_json(caps, indent=True)
        return
    echo(f"tools on PATH: {', '.join(caps['available']) or 'none'}")
    echo(f"project test commands: {', '.join(caps['project_test_commands']) or 'none found'}")
    servers = ", ".join(f"{m['name']} ({m['source']})" for m in caps["mcp_servers"]) or "none configured"
    echo(f"MCP servers: {servers}")
    echo(f"written to {obj.state / 'capabilities.json'}")


COMMANDS = (doctor, discover)
