"""`loopwright gate`: the decisions a loop waits for."""

from __future__ import annotations

import click

from loopwright.actions import gates, pick
from loopwright.cli.base import Ctx, ceiling_options, echo, echo_json, env_session
from loopwright.state import loops


@click.group()
def gate() -> None:
    """Gates: decisions the loop waits for (budget escalation, force-unlock, repeated failure)."""


@gate.command("answer")
@click.argument("gate_name", metavar="GATE")
@click.argument("answer", metavar="OPTION")
@click.option("--loop", "name", help="The loop (default: this session's, or the only one).")
@ceiling_options("With 'budget-escalation raise': the new {} ceiling.")
@click.pass_obj
def gate_answer(obj: Ctx, gate_name, answer, name, **raise_to) -> None:
    """Record the user's answer to the waiting gate GATE, verbatim: OPTION is one of its options
    (`loopwright gate list` shows them)."""
    echo(gates.answer_gate(obj.state, name, env_session(), gate_name, answer, raise_to))


@gate.command("list")
@click.option("--loop", "name", help="The loop (default: this session's, or the only one).")
@click.option("--json", "as_json", is_flag=True, help="Print the loop and its waiting gates as JSON.")
@click.pass_obj
def gate_list(obj: Ctx, name, as_json) -> None:
    """Gates waiting for an answer."""
    paths = pick.pick_loop(obj.state, name, env_session(), active_only=False)
    cfg = pick.config(paths)
    budget = loops.read_state(paths.configured(cfg), "budget", move_corrupt=False) or {}
    waiting = [g for g in budget.get("pending_gates") or [] if not g.get("answer")]
    if as_json:
        echo_json({"loop": paths.name, "gates": waiting})
        return
    if not waiting:
        echo(f"loop {paths.name}: no gate is waiting.")
    for g in waiting:
        echo(f"{g['name']}: {g['question']} (options: {', '.join(g['options'])})")


COMMANDS = (gate,)
