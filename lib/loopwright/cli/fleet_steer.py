"""Steering fleet loops from the command line: a gate's answer (checked against the gate's
options as the API checks it, recorded with who gave it) and stop or cancel, of one loop or of
every loop a filter picks."""

from __future__ import annotations

import getpass
import socket

from loopwright.cli.base import echo, fail, registry
from loopwright.core import gates


def who() -> str:
    """The person at this terminal as the timeline records them: the OS user at this host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container without a passwd entry)
        import os

        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def answer_gate(url: str | None, loop: str, answer: str, raise_to: dict | None = None) -> None:
    """A gate's answer as the API gives it (the same checks, the same record): ``raise`` at the
    budget-escalation gate sets the new ceilings of ``raise_to`` ({"max_dollars": 20}), or
    raises each ceiling the gate asks about by half as much again."""
    from loopwright.core import raising
    from loopwright.core.termsafe import one_line
    from loopwright.fleet import spec as specs

    raise_to = {k: v for k, v in (raise_to or {}).items() if v is not None}
    if raise_to and answer != "raise":
        fail("the --max-* options go only with the answer raise: they are the new ceilings")
    reg = registry(url)
    try:
        row = reg.fleet_loop(loop) if 0 < len(loop) <= 200 else None
        if row is None:
            fail(f"no fleet loop {one_line(loop)[:80]!r}: `loopwright fleet ls` lists them")
        gate = row.get("gate") if isinstance(row.get("gate"), dict) else {}
        if row["status"] != "waiting_gate" or gate.get("answer"):
            fail(f"no gate waits in fleet loop {row['name']} (it is {row['status']})")
        problem = gates.fleet_answer_problem(gate, answer)
        if problem:
            fail(problem)
        new_spec, raised = None, None
        if answer == "raise" and gate.get("name") == raising.BUDGET_ESCALATION:
            try:
                limits, raised = raising.raised(row, gate, raise_to)
                new_spec = dict(row.get("spec") if isinstance(row.get("spec"), dict) else {}, limits=limits)
                specs.runner_args(row["kind"], new_spec)  # a ceiling a worker would refuse is refused now
            except (raising.RaiseError, specs.SpecError) as exc:
                fail(_with_flags(str(exc)))
        done = reg.record_gate_answer(row, answer, "cli", user=who(), spec=new_spec, raised=raised)
    finally:
        reg.close()
    if done is None:
        fail(
            f"the gate of fleet loop {row['name']} no longer waits as it did (answered or stopped meanwhile)"
        )
    said = f"{done['name']}: answered {answer!r} at gate {gate.get('name')}{_raised(raised)}"
    echo(f"{said}; queued again for a worker")


def _raised(raised: dict | None) -> str:
    """`` (max-dollars $5.00 -> $7.50)``: the ceilings a raise changed, as a person reads them."""
    if not raised:
        return ""

    def shown(key: str, value) -> str:
        if value is None:
            return "none"
        return f"${value:,.2f}" if key == "max_dollars" else f"{value:g}"

    pairs = [f"{k.replace('_', '-')} {shown(k, old)} -> {shown(k, new)}" for k, (old, new) in raised.items()]
    return " (" + ", ".join(pairs) + ")"


def _with_flags(text: str) -> str:
    """A raise's refusal naming the command line's options, not the spec's keys."""
    for key in ("max_iterations", "max_minutes", "max_tokens", "max_dollars", "max_prs"):
        text = text.replace(key, "--" + key.replace("_", "-"))
    return text


def _next(row: dict, before: dict, what: str) -> str:
    """What happens to one loop after a stop or cancel was asked of it."""
    name = row["name"]
    if before["status"] == "ended":
        return f"{name}: had already ended ({before['outcome']}); nothing to {what}"
    if row["status"] == "ended":
        return f"{name}: ended now ({row['outcome']}): no worker was running it"
    where = f" on {row['host']}" if row.get("host") else ""
    if what == "stop":
        return (
            f"{name}: its worker{where} hears within about a second and ends it at its next Stop "
            "(STOPPED:user_stop, with a report)"
        )
    return f"{name}: its worker{where} hears within about a second and ends it now (CANCELLED)"


def steer_one(url: str | None, loop: str, what: str) -> None:
    from loopwright.core.termsafe import one_line

    reg = registry(url)
    try:
        before = reg.fleet_loop(loop) if 0 < len(loop) <= 200 else None
        row = reg.request(before["id"], what) if before else None
    finally:
        reg.close()
    if row is None:
        fail(f"no fleet loop {one_line(loop)[:80]!r}: `loopwright fleet ls` lists them")
    echo(_next(row, before, what))


def _picked(rows: list[dict], how: dict) -> list[dict]:
    return [
        r
        for r in rows
        if r["status"] != "ended"
        and (how["status"] is None or r["status"] == how["status"])
        and (how["tag"] is None or how["tag"] in (r.get("tags") or []))
        and (how["account"] is None or r.get("account") == how["account"])
    ]


def _confirm(count: int, what: str, said: str, where: str, yes: bool) -> None:
    import sys

    import click

    if yes:
        return
    if not sys.stdin.isatty():
        fail(f"{what} {_loops(count)} ({said}) needs a confirmation: no terminal to ask, add --yes")
    if not click.confirm(f"{what} {_loops(count)} ({said}) in {where}?", default=False):
        fail(f"nothing done: the {_loops(count)} go on")


def steer_many(url: str | None, what: str, loop: str | None, how: dict, yes: bool) -> None:
    """Stop or cancel LOOP, or every loop not ended that the filter ``how`` picks (status, tag,
    account), once the user confirmed the count (or gave --yes)."""
    filtered = {k: v for k, v in how.items() if v is not None}
    if loop is not None and filtered:
        fail(f"give LOOP or a filter (--status, --tag, --account), not both: `fleet {what} LOOP` is one loop")
    if loop is not None:
        return steer_one(url, loop, what)
    if not filtered:
        fail(f"give LOOP, or --status, --tag or --account to {what} every loop they pick")
    said = ", ".join(f"{k} {v}" for k, v in filtered.items())
    reg = registry(url)
    try:
        picked = _picked(reg.fleet_loops(limit=1_000_000), how)
        if not picked:
            return echo(f"no fleet loop that has not ended matches {said}: nothing to {what}")
        _confirm(len(picked), what, said, reg.shown, yes)
        after = [reg.request(r["id"], what) for r in picked]
    finally:
        reg.close()
    now = sum(1 for r in after if r is not None and r["status"] == "ended")
    told = len(after) - now
    later = "at their next Stop" if what == "stop" else "at once"
    echo(
        f"asked {_loops(len(after))} to {what}: {now} ended now (no worker was running them), "
        f"{told} end on their workers {later}"
    )


def _loops(n: int) -> str:
    return f"{n} fleet loop{'' if n == 1 else 's'}"
