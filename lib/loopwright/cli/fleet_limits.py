"""`loopwright fleet limits`: the fleet's daily dollar budget and running caps, for the whole
fleet, one account or one tag; without a setting, the limits, today's spend and the pauses."""

from __future__ import annotations

import time

import click

from loopwright.cli.base import db_option, echo, echo_json, fail, registry


def _money(value) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _held(row: dict) -> str:
    """The dollars the scope's running loops hold, and ``+?`` when some hold a cost not known yet."""
    if "held" not in row:
        return "-"
    return _money(row["held"]) + ("+?" if row.get("held_unknown") else "")


def _count(value) -> str:
    return "-" if value is None else str(value)


def _scope(account: str | None, tag: str | None) -> str:
    if account is not None and tag is not None:
        fail("give --account or --tag, not both: a limit is the fleet's, one account's or one tag's")
    return f"account:{account}" if account is not None else f"tag:{tag}" if tag is not None else "fleet"


def _show(report: dict, where: str) -> None:
    """Every scope with a limit or with spend today: its caps, what it spent and runs."""
    echo(f"fleet limits in {where}, day {report['day']} (UTC; the budget resets at midnight UTC)")
    rows = {r["scope"]: r for r in report["limits"]}
    for scope, dollars in report["spend"].items():
        rows.setdefault(
            scope, {"scope": scope, "max_dollars_per_day": None, "max_running": None, "spent_today": dollars}
        )
    if not rows:
        echo("no limits set and nothing spent today")
    else:
        echo(
            f"  {'scope':<24} {'dollars/day':>12} {'spent today':>12} {'held':>10} {'running':>8} "
            f"{'max running':>12}"
        )
    for row in sorted(rows.values(), key=lambda r: (r["scope"] != "fleet", r["scope"])):
        echo(
            f"  {row['scope']:<24} {_money(row['max_dollars_per_day']):>12} {_money(row['spent_today']):>12} "
            f"{_held(row):>10} {_count(row.get('running')):>8} {_count(row['max_running']):>12}"
        )
    if any(r.get("held") or r.get("held_unknown") for r in rows.values()):
        echo(
            "held: what running loops hold for iterations begun and not recorded yet; a claim counts"
            " it as spent (a ? is a cost not known yet)"
        )
    for pause in report["pauses"]:
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(pause["until"]))
        by = f", by {pause['set_by']}" if pause["set_by"] else ""
        echo(
            f"paused: account {pause['account']} until {until} ({pause['reason'] or 'no reason given'}{by}); "
            "its loops wait for the reset"
        )


@click.command("limits")
@db_option
@click.option("--max-dollars-per-day", type=float, metavar="D", help="Dollars the scope may spend a UTC day.")
@click.option("--max-running", type=int, metavar="N", help="Loops of the scope running at once, at most.")
@click.option("--account", metavar="A", help="Limit this account's loops (default: the whole fleet).")
@click.option("--tag", metavar="T", help="Limit the loops with this tag (default: the whole fleet).")
@click.option("--clear", is_flag=True, help="Remove the scope's limits.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def limits(url, max_dollars_per_day, max_running, account, tag, clear, as_json) -> None:
    """The fleet's limits: a daily dollar budget (a UTC day) and a cap on loops running at
    once, for the whole fleet, one --account or one --tag. Checked when a worker claims a loop
    and when an iteration ends, with its spend: past a budget no loop is claimed, and a running
    loop ends BUDGET_EXHAUSTED:fleet_dollars after the iteration it is running once one of its
    iterations ends with today's spend at the cap, or within the loop's mean iteration cost of
    it. An account whose loop meets a usage limit (HTTP 429) is paused until the limit resets:
    every worker hands its loops back, and they go on after the reset. With no setting, shows
    the limits, today's spend and the paused accounts."""
    from loopwright.registry import RegistryError

    scope = _scope(account, tag)
    setting = max_dollars_per_day is not None or max_running is not None
    if clear and setting:
        fail("--clear removes a scope's limits: give it without --max-dollars-per-day or --max-running")
    reg = registry(url)
    try:
        if clear:
            done = {"scope": scope, "cleared": reg.clear_limits(scope)}
        elif setting:
            done = reg.set_limits(scope, max_dollars_per_day=max_dollars_per_day, max_running=max_running)
        else:
            done = reg.limits_report()
    except RegistryError as exc:
        fail(str(exc))
    finally:
        reg.close()
    if as_json:
        return echo_json(done)
    if clear:
        return echo(f"{scope}: limits removed" if done["cleared"] else f"{scope}: had no limits")
    if setting:
        return echo(
            f"{scope}: at most {_money(done['max_dollars_per_day'])} a day, "
            f"{_count(done['max_running'])} running at once"
        )
    _show(done, reg.shown)
