"""`fleet ls` and `fleet workers` as tables: the columns of each (a header and a function of
the row), the ceilings a loop's spend and iterations are shown against, and why a queued loop
waits."""

from __future__ import annotations

from loopwright.cli.table import Column, lines


def loop_columns(waiting: dict) -> list:
    """`fleet ls`'s columns (a column is a header and a function of the row)."""
    from loopwright.serve.fleetwatch import first_line, goal_of

    return [
        Column("NAME", lambda r: r["name"]),
        Column("STATUS", lambda r: r["status"]),
        Column("ITER", lambda r: f"{r['iteration']}/{_ceiling(r, 'max_iterations')}", right=True),
        Column("SPEND", _spend, right=True),
        Column("HOST", lambda r: (r["host"] or "-") if r["status"] != "queued" else "-"),  # ended: its last
        Column("OUTCOME", lambda r: r["outcome"] or waiting.get(r["id"]) or _gate(r) or "-", width=60),
        Column("GOAL", lambda r: first_line(goal_of(r)), width=60),
        Column("REPO", lambda r: r["repo"], width=50),
        Column("CAUSE", cause, width=400),
    ]


def _gate(row: dict) -> str:
    """A loop waiting at a gate: its name and the options `fleet answer` takes."""
    gate = row.get("gate") if isinstance(row.get("gate"), dict) else None
    if row.get("status") != "waiting_gate" or gate is None:
        return ""
    from loopwright.core.gates import OPTIONS

    listed = gate.get("options") if isinstance(gate.get("options"), list) and gate.get("options") else None
    options = [str(o) for o in listed or OPTIONS.get(gate.get("name")) or []]
    return f"gate {gate.get('name')}: answer {'|'.join(options) or 'with one of its options'}"


def cause(row: dict) -> str:
    """Why a loop did not end well, or waits in the queue again (a preparation that failed, a
    row set aside, a hand-back), then its last client or worker error when the reason does not
    hold it; '-' for none."""
    from loopwright.core.recovery import FINISHED

    reason = row.get("reason") if isinstance(row.get("reason"), str) else ""
    error = row.get("last_error") if isinstance(row.get("last_error"), str) else ""
    if row["status"] == "ended" and row.get("outcome") in FINISHED:
        return "-"
    shown = [reason] if reason and row["status"] in ("ended", "queued") else []
    if error and error not in reason:
        shown.append(f"last error: {error}")
    return "; ".join(shown) or "-"


def _ceiling(row: dict, key: str):
    """The loop's own ceiling, else the default a loop gets."""
    from loopwright.state import loops

    limits = (row.get("spec") or {}).get("limits") if isinstance(row.get("spec"), dict) else None
    value = limits.get(key) if isinstance(limits, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return {"max_iterations": loops.DEFAULT_MAX_ITERATIONS, "max_dollars": loops.DEFAULT_MAX_DOLLARS}[key]


def _spend(row: dict) -> str:
    spent, ceiling = float(row["dollars"] or 0), float(_ceiling(row, "max_dollars"))
    return f"${spent:,.2f}/" + (f"${ceiling:,.2f}" if ceiling > 0 else "no limit")


def loop_lines(reg, status: str | None) -> list[str]:
    """`fleet ls` as lines: the table, or one line saying the list is empty."""
    rows = reg.fleet_loops(status)
    if not rows:
        what = f"no {status} fleet loops" if status else "no fleet loops"
        return [f"{what} in {reg.shown}: nothing queued (`loopwright submit` queues one)"]
    waiting = {i: f"waiting: {why}" for i, why in waiting_reasons(reg, rows).items()}
    return lines(loop_columns(waiting), rows)


def loop_rows(reg, status: str | None) -> list[dict]:
    """`fleet ls --json`: the rows, each queued one with why it waits (``waiting``: no live
    worker takes it; None when one would)."""
    rows = reg.fleet_loops(status)
    reasons = waiting_reasons(reg, rows)
    return [dict(r, waiting=reasons.get(r["id"])) for r in rows]


def waiting_reasons(reg, rows: list[dict]) -> dict:
    """Why each queued loop waits, by id, when no claim would take it now: no live worker
    would (its repository, verify or account, from what the workers publish), or the fleet's
    limits hold it back (its account paused, a cap spent or without room: core/attention.py,
    as the monitor's page says it)."""
    queued = [r for r in rows if r["status"] == "queued"]
    if not queued:
        return {}
    from loopwright.core.attention import Queue
    from loopwright.fleet.consent import Takers

    workers, report = reg.workers(), reg.limits_report()
    takers, why = Takers(workers), {}
    limits = Queue(workers, report["pauses"], report["limits"], report["now"], mean=report["iteration_mean"])
    for r in queued:
        unserved = takers.unserved(r["repo"], r["spec"], r["account"])
        reason = unserved.short if unserved else limits.held_back(r)
        if reason:
            why[r["id"]] = reason
    return why


def worker_columns() -> list:
    """`fleet workers`' columns (a row's ``holds``: the names of the loops it holds)."""
    return [
        Column("WORKER", lambda r: r["worker"]),
        Column("STATE", lambda r: r["state"]),
        Column("HOST", lambda r: r["host"]),
        Column("SLOTS", lambda r: f"{r['used']}/{r['slots']}", right=True),
        Column("BEAT", lambda r: f"{float(r['age'] or 0):.0f}s ago", right=True),
        Column("ACCOUNT", lambda r: r["account"] or "any"),
        Column("LOOPS", lambda r: " ".join(r["holds"]) or "-", width=80),
    ]
