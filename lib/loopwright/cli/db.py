"""`loopwright db`: the run registry's database (the embedded SQLite file, or the fleet's
PostgreSQL) and its schema."""

from __future__ import annotations

import time

import click

from loopwright.cli.base import db_option, echo, echo_json, fail, registry

NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


@click.group()
def db() -> None:
    """The run registry's database."""


@db.command("status")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(url: str | None, as_json: bool) -> None:
    """Which database the registry is, its schema version, the latest this loopwright knows
    and each step applied. Opening it applies the steps it lacks, as `serve` would."""
    from loopwright.registry import RegistryError

    reg = registry(url)
    try:
        info = reg.schema_status()
    except RegistryError as exc:
        fail(str(exc))
    finally:
        reg.close()
    if as_json:
        return echo_json(info)
    echo(f"database: {info['where']} ({NAMES.get(info['database'], info['database'])})")
    echo(f"schema version: {info['version']} (the latest this loopwright knows: {info['latest']})")
    width = max((len(str(step["name"])) for step in info["steps"]), default=0)
    for step in info["steps"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(step["applied_at"]))
        echo(f"  {step['version']:>3}  {step['name']:<{width}}  applied {when}")


COMMANDS = (db,)
