"""`loopwright run --fleet-items FILE`, a fleet worker's hidden option: the loop it just started
shares its backlog with other fleet loops (`submit work --parallel N`) and works only the items
its worker reserved for it in the fleet's database, as listed in FILE (a file of the worker's,
outside the clone). The path goes into the loop's own signed loop.json: no file a clone ships,
and no word of the submitted row, can name another list.
"""

from __future__ import annotations

import os

from loopwright.actions.pick import config, pick_loop, read_budget
from loopwright.core.errors import UserError
from loopwright.state import loops
from loopwright.state.fspath import Path

MAX_PATH = 4096


def attach(state: Path, name: str, path: str) -> dict:
    """Loop ``name`` (started here moments ago, before its first turn) limited to the items the
    file at ``path`` lists as its own; the loop.json written. UserError when it cannot be."""
    from loopwright import modes

    where = os.path.abspath(path)
    if len(where) > MAX_PATH or not where.isprintable():
        raise UserError(f"--fleet-items {path!r}: not a usable path")
    paths = pick_loop(state, name, None, active_only=True)
    with loops.loop_mutex(paths):
        loop = config(paths)
        mode = modes.get(loop.get("mode"))
        if not mode.shares_backlog:
            raise UserError(
                f"--fleet-items: a {loop.get('mode')} loop does not share a backlog with other loops"
            )
        if int(read_budget(paths.configured(loop), loop).get("iterations_used", 0)):
            raise UserError(f'loop "{name}" has run already; --fleet-items is for a loop that starts now')
        return loops.save_config(paths, mode.with_fleet_items(loop, where))
