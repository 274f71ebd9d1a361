"""`loopwright fleet workers`: the fleet's workers with their state and the loops they hold, and
forgetting the ones that stopped for good (a worker's row stays after it leaves, so that the
page and `fleet workers` say it stopped; one restarted under a new name leaves its old row)."""

from __future__ import annotations

import click

from loopwright.cli.base import db_option, echo, echo_json, fail, registry


def _forget(reg, names: tuple[str, ...], stopped: bool) -> None:
    from loopwright.registry.workers import STOPPED, worker_state

    rows = {str(r["worker"]): r for r in reg.workers()}
    unknown = [n for n in names if n not in rows]
    if unknown:
        fail(f"no worker named {unknown[0]!r} in {reg.shown}: `loopwright fleet workers` lists them")
    live = [n for n in names if worker_state(rows[n]) != STOPPED]
    if live:
        fail(f"worker {live[0]} has not stopped: stop it first (SIGTERM), or wait until it is silent 10 min")
    chosen = list(names) + [
        n for n, r in rows.items() if stopped and worker_state(r) == STOPPED and n not in names
    ]
    gone = [n for n in chosen if reg.forget_worker(n)]
    echo(
        f"forgot {len(gone)} stopped worker{'' if len(gone) == 1 else 's'}"
        + (f": {', '.join(gone)}" if gone else "")
    )


@click.command("workers")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the workers as JSON, each with its state.")
@click.option(
    "--forget", "names", multiple=True, metavar="WORKER",
    help="Remove this stopped worker from the list (repeatable); one still alive or stale is refused.",
)  # fmt: skip
@click.option("--forget-stopped", is_flag=True, help="Remove every stopped worker from the list.")
def workers(url, as_json, names, forget_stopped) -> None:
    """The fleet's workers: state (alive: its last heartbeat within its lease; stale: older, its
    loops fail over; stopped: it said it left, or it has been silent 10 minutes), host, slots
    used, seconds since its last beat, account and the loops it holds. A stopped worker stays
    listed until --forget or --forget-stopped removes it."""
    from loopwright.cli.fleet_tables import worker_columns
    from loopwright.cli.table import lines
    from loopwright.core.attention import holdings
    from loopwright.registry.workers import worker_state

    reg = registry(url)
    try:
        if names or forget_stopped:
            return _forget(reg, names, forget_stopped)
        rows = reg.workers()
        # What each holds by the loops' rows (a claim names its worker), as the page says it:
        # a beat's own list may be a beat old.
        held = holdings(reg.fleet_loops(status="running", limit=100_000) if rows else [], rows)
        rows = [dict(r, state=worker_state(r), holds=held[str(r["worker"])]) for r in rows]
    finally:
        reg.close()
    if as_json:
        return echo_json(rows)
    if not rows:
        return echo(f"no worker has beaten in {reg.shown}: start one with `loopwright worker`")
    for line in lines(worker_columns(), rows):
        echo(line)
