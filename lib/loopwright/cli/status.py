"""Where loops stand: `status`, `history` and the status-line command."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from loopwright.actions import pick
from loopwright.actions.overview import summaries
from loopwright.cli.base import Ctx, echo, echo_json, env_session, fail
from loopwright.state import lock as locks
from loopwright.state import loops, store


def _spend_line(s: dict) -> str:
    parts = [
        f"time {s['minutes_elapsed']:.1f}/{s['max_minutes']:g} min",
        f"tokens {s['tokens_in'] + s['tokens_out']}" + (f"/{s['max_tokens']}" if s["max_tokens"] else ""),
        f"spend ${s['dollars_estimate']:,.2f}"
        + (f"/${float(s['max_dollars']):,.2f}" if s["max_dollars"] else " (no limit)"),
    ]
    if s["max_prs"] or s["prs_touched"]:
        parts.append(f"PRs {len(s['prs_touched'])}" + (f"/{s['max_prs']}" if s["max_prs"] else ""))
    if s.get("comments_pushed") or s.get("merges_attempted"):
        parts.append(f"comments {s['comments_pushed']} · merges {s['merges_attempted']}")
    return " · ".join(parts)


def _lock_line(paths: loops.LoopPaths) -> str:
    try:
        lk = loops.read_state(paths, "lock", move_corrupt=False)
    except store.CorruptFile as exc:
        return f"lock: {exc}"
    if not lk:
        return "lock: free"
    state = "stale" if locks.is_stale(lk, time.time()) else "alive"
    return f"lock: {locks.describe(lk)}: {state}"


@click.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(obj: Ctx, name: str | None, as_json: bool) -> None:
    """Where every loop of this project stands (or just loop NAME)."""
    state = obj.state
    try:
        found, problems = summaries(state, name)
    except loops.LoopError as exc:
        fleet = " (a fleet loop? `loopwright fleet ls` and `fleet events NAME`)"
        fail(f"{exc}{fleet if name and os.environ.get('LOOPWRIGHT_DATABASE_URL') else ''}")
    if as_json:
        echo_json({"loops": found, "problems": problems}, indent=True)
        return
    if not found:
        echo(f'No loops in {state.parent}. Start one with /loopwright:loop "<goal>" in Claude Code.')
        if os.environ.get("LOOPWRIGHT_DATABASE_URL"):  # a fleet's user looks here first too
            echo("The fleet's loops (LOOPWRIGHT_DATABASE_URL): `loopwright fleet ls`.")
        return
    for s in found:
        _print_summary(state, s)


def _print_problem(paths: loops.LoopPaths, s: dict) -> bool:
    """An untrusted, older or damaged loop, in two lines; False for a loop to show in full."""
    if s.get("ended_copy"):
        echo(
            f"{s['name']}: OLDER COPY of a loop that has ended ({s['problem']}); "
            "loopwright never continues it."
        )
        echo(f"  Remove it with `loopwright teardown {s['name']} --force`.")
        return True
    if s["status"] == "untrusted":
        echo(f"{s['name']}: UNTRUSTED: not created by your loopwright in this project ({s['problem']}).")
        echo(
            f"  loopwright never runs it. See its goal and commands, and take it over if you mean to, with "
            f"`loopwright adopt {s['name']}`; or remove it with `loopwright teardown {s['name']} --force`."
        )
        return True
    if s["status"] == "damaged":
        echo(f"{s['name']}: DAMAGED: {s['problem']}")
        echo(f"  inspect the files in {paths.dir}; `loopwright teardown {s['name']} --force` removes it")
        return True
    return False


def _print_summary(state: Path, s: dict) -> None:
    paths = loops.LoopPaths(state, s["name"])
    if _print_problem(paths, s):
        return
    if s["status"] == loops.ACTIVE:
        what = " · ".join([f"{s['mode']} mode", *s.get("mode_status", [])])
        echo(f"{s['name']}: active ({what}), iteration {s['iteration']}/{s['max_iterations']}")
        echo(
            "  owner session: "
            + (s["owner_session"] or f"none yet: attach it with /loopwright:resume {s['name']}")
        )
        echo(f"  {_lock_line(paths)}")
        if s["paused"]:
            echo(
                f"  PAUSED since {s['paused_at']}: {s['last_reason']};"
                " send any message in that session, or /loopwright:resume"
            )
        if s["pending_gates"]:
            echo(
                f"  waiting for the user's answer to gate(s): {', '.join(s['pending_gates'])} "
                "(/loopwright:answer <gate> <option>)"
            )
    else:
        echo(f"{s['name']}: ended {s['outcome']} after {s['iteration']}/{s['max_iterations']} iterations")
    if s.get("problem"):
        echo(f"  DAMAGED: {s['problem']}; the loop stops at its next Stop")
    echo("  " + _spend_line(s))
    if s["last_reason"] and not s["paused"]:
        echo(f"  last decision: {s['last_reason']}")
    if s.get("last_error") and s["last_error"] not in (s["last_reason"] or ""):
        echo(f"  last client error: {s['last_error']}")
    for p in s["pauses"]:
        what = {
            "block-cap": "Claude Code's block cap ended the turn",
            "gate": "it waited for a gate answer",
        }.get(p["why"], "the session stopped (interrupt)")
        echo(f"  paused after iteration {p['after_iteration']}: {what}; resumed {p['resumed_at']}")
    for g in s["gates"]:
        echo(f"  gate {g['name']} (iteration {g.get('iteration')}): {g['answer']} ({g.get('by')})")
    if s["unknown_models"]:
        echo(
            f"  models without a known price (charged at the highest rate): {', '.join(s['unknown_models'])}"
        )
    _print_project_rates(s.get("project_rates"))
    _print_tasks_source(s)
    _print_wrap_up(s)
    if s.get("judge"):
        from loopwright.core.judge import last_word, line

        echo(f"  judge: {line(s['judge'])} · last: {last_word(s['judge'])}")
    if s["report"]:
        echo(f"  report: {s['report']}")
    if s.get("handoff"):
        echo(f"  handoff: {s['handoff']}")


def _print_wrap_up(s: dict) -> None:
    """The wrap-up setting while the loop runs; the wrap-up turn when it is under way."""
    if s.get("wrapping_up"):
        turn = s.get("wrap_up_turn") or {}
        echo(f"  WRAP-UP TURN under way: the loop ends with {turn.get('outcome')} at the next Stop")
    elif s["status"] == loops.ACTIVE:
        echo(
            "  wrap-up: "
            + ("on (one last turn for handoff.md when a budget runs out)" if s.get("wrap_up") else "off")
        )


def _print_tasks_source(s: dict) -> None:
    """Where the loop's tasks come from, when not from its own file."""
    from loopwright import modes
    from loopwright.state.tasksource import describe_source

    try:
        project_tasks = modes.get(s["mode"]).project_tasks
    except modes.UnknownMode:
        project_tasks = False
    line = describe_source(s.get("tasks_source"), project_tasks)
    if line:
        echo("  " + line[0].lower() + line[1:])


def _print_project_rates(pr: dict | None) -> None:
    """The project's CLAUDE.md rates below the built-in ones, and its problems."""
    if not pr:
        return
    from loopwright.state.claudemd import lowered_lines

    for line in lowered_lines(pr["lowered"], pr.get("file") or "CLAUDE.md"):
        echo(f"  {line}")
    for p in pr["problems"]:
        echo(f"  {p}")


@click.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per iteration.")
@click.option("--last", type=int, help="Only the last N iterations.")
@click.pass_obj
def history(obj: Ctx, name, as_json, last) -> None:
    """One row per iteration of loop NAME (default: this session's, or the only one): outcome,
    tokens, dollars, gates."""
    paths = pick.pick_loop(obj.state, name, env_session(), active_only=False)
    records, problems = store.read_jsonl(paths.history)
    if last:
        records = records[-last:]
    if as_json:
        for r in records:
            echo_json(r)
    else:
        echo(f"{'iter':>4}  {'outcome':<26}{'tokens in':>10}{'out':>8}{'dollars':>10}  gates")
        for r in records:
            gates_text = "; ".join(f"{g['name']}={g.get('answer')}" for g in r.get("gates") or [])
            outcome = str(r.get("outcome")) + (" (wait/gate)" if r.get("counted") is False else "")
            echo(
                f"{r.get('iteration', '?'):>4}  {outcome:<26}"
                f"{r.get('tokens_in_this_iter', 0):>10}"
                f"{r.get('tokens_out_this_iter', 0):>8}{r.get('dollars_this_iter', 0.0):>10.4f}  {gates_text}"
            )
    for p in problems:
        echo(f"problem: {p}", err=True)


@click.command()
def statusline() -> None:
    """One line for Claude Code's status line (reads its JSON on stdin; prints nothing when no loop)."""
    from loopwright.events.entry import statusline as line

    sys.exit(line())


COMMANDS = (status, history, statusline)
