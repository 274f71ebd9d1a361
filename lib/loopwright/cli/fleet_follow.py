"""Following the fleet as it changes: `submit --wait` and `fleet events --follow` print a loop's
timeline as its worker writes it, `fleet ls --watch` redraws the list. On PostgreSQL a
notification wakes the reader at once; every reader also polls, since SQLite has none and a
notification may be lost."""

from __future__ import annotations

import sys
import time

import click

from loopwright.cli.base import echo, echo_json
from loopwright.core import recovery
from loopwright.core.termsafe import one_line
from loopwright.registry.queue import CONTROL_CHANNEL, PROGRESS_CHANNEL, QUEUE_CHANNEL

POLL = 1.0  # the longest a change waits to be seen without a notification
CHANNELS = (PROGRESS_CHANNEL, QUEUE_CHANNEL, CONTROL_CHANNEL)


def event_line(e: dict, hosts: dict) -> str:
    """One timeline event as `fleet events` prints it (core/eventlines.py); ``hosts`` gathers
    each claim's host as the claims go by, for the events that name none."""
    from loopwright.core import eventlines

    hosts.update(eventlines.hosts_by_claim([e]))
    return eventlines.line(e, hosts)


def _waits(row: dict) -> bool:
    """At a gate nobody has answered yet."""
    gate = row.get("gate") if isinstance(row.get("gate"), dict) else {}
    return row["status"] == "waiting_gate" and not gate.get("answer")


def _end_line(row: dict) -> str:
    said = f" ({one_line(row['reason'])[:200]})" if row.get("reason") else ""
    return (
        f"{row['name']}: ended {row['outcome']} after {row['iteration']} "
        f"iteration{'' if row['iteration'] == 1 else 's'}, "
        f"${float(row['dollars'] or 0):,.2f}{said}"
    )


def _gate_line(row: dict) -> str:
    gate = row["gate"] if isinstance(row.get("gate"), dict) else {}
    options = gate.get("options") if isinstance(gate.get("options"), list) else []
    shown = "|".join(one_line(o) for o in options) or "OPTION"
    question = one_line(gate.get("question") or "")[:200]
    return (
        f"{row['name']}: waits at gate {one_line(gate.get('name'))}: {question} "
        f"(answer with `loopwright fleet answer {row['name']} {shown}`)"
    )


class _Timeline:
    """Each loop's events not printed yet, oldest first."""

    def __init__(self, reg, ids: list[str], as_json: bool) -> None:
        self.reg, self.as_json = reg, as_json
        self.after = dict.fromkeys(ids, 0)
        self.hosts: dict = {}  # each claim's host, from its event (core/eventlines.py)

    def show(self, row: dict, several: bool) -> None:
        while True:
            found = self.reg.events(row["id"], self.after[row["id"]], 500)
            for e in found:
                if self.as_json:
                    echo_json(dict(e, loop=row["name"]))
                else:
                    echo((f"{row['name']}: " if several else "") + event_line(e, self.hosts))
                self.after[row["id"]] = e["id"]
            if len(found) < 500:
                return


def follow_loops(reg, ids: list[str], as_json: bool, *, stop_at_gate: bool = False) -> int:
    """Print the loops' timelines as they grow until every loop has ended (or, with
    ``stop_at_gate``, waits at a gate); the exit code `loopwright run` gives that outcome."""
    timeline, listener = _Timeline(reg, ids, as_json), reg.listener(CHANNELS)
    told: set[str] = set()
    try:
        while True:
            rows = [reg.fleet_loop(i) for i in ids]  # before the events: none of theirs is missed
            for row in rows:
                timeline.show(row, len(rows) > 1)
                if _waits(row) and row["id"] not in told:
                    told.add(row["id"])
                    _say(as_json, row, _gate_line(row))
            done = [r for r in rows if r["status"] == "ended" or (stop_at_gate and _waits(r))]
            if len(done) == len(rows):
                for row in rows:
                    if row["status"] == "ended":
                        _say(as_json, row, _end_line(row))
                return max(_code(r) for r in rows)
            listener.wait(POLL)
    except KeyboardInterrupt:
        echo(
            "loopwright: stopped following; the loop goes on (`loopwright fleet events NAME --follow`)",
            err=True,
        )
        return 130
    finally:
        listener.close()


def _say(as_json: bool, row: dict, line: str) -> None:
    if as_json:
        keep = ("name", "status", "outcome", "reason", "iteration", "dollars", "gate")
        echo_json(
            {
                "loop": row["name"],
                "end" if row["status"] == "ended" else "waiting": {k: row.get(k) for k in keep},
            }
        )
    else:
        echo(line)


def _code(row: dict) -> int:
    if row["status"] != "ended":
        return recovery.exit_code(None, waiting=True)
    return recovery.exit_code(row["outcome"])


def wait_for_end(url: str | None, ids: list[str], as_json: bool) -> int:
    """`submit --wait`: the new loops followed to their end (or their first unanswered gate)."""
    from loopwright.cli.base import registry

    reg = registry(url)
    try:
        return follow_loops(reg, ids, as_json, stop_at_gate=True)
    finally:
        reg.close()


def watch_loops(reg, render, seconds: float) -> None:
    """`fleet ls --watch`: on a terminal, the list redrawn every ``seconds``; otherwise the list
    once, then each line that changed, as it changes. Until Ctrl-C."""
    tty = sys.stdout.isatty()
    seen: set[str] = set()
    try:
        while True:
            lines = render()
            if tty:
                click.clear()
                echo(f"every {seconds:g}s · {time.strftime('%H:%M:%S')} · Ctrl-C to stop")
                for line in lines:
                    echo(line)
            else:
                now = {" ".join(line.split()): line for line in lines}
                for key, line in now.items():
                    if key not in seen:
                        echo(line)
                seen = set(now)
                sys.stdout.flush()
            time.sleep(seconds)
    except KeyboardInterrupt:
        return
