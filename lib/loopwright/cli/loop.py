"""Commands on a loop's life: start, route (dry run), cancel, resume, release-lock,
teardown and adopt; thin over ``loopwright.actions``."""

from __future__ import annotations

import shutil
import sys
import time

import click

from loopwright.actions import cancel as cancelling
from loopwright.actions import pick
from loopwright.actions import resume as resuming
from loopwright.actions import start as starting
from loopwright.cli.base import Ctx, ceiling_options, echo, env_session
from loopwright.core import router
from loopwright.state import journal, loops, store
from loopwright.state import lock as locks


@click.command()
@click.argument("prompt", nargs=-1)
@click.option("--max-iterations", type=int, help="Iterations allowed (default: 20).")
@click.option(
    "--max-minutes", type=float, help="Wall-clock minutes allowed, from the recorded start (default: 60)."
)
@click.option("--max-tokens", type=int, help="Input + output tokens allowed, counted from the transcript.")
@click.option(
    "--max-dollars", type=float, help="Dollar ceiling (default 25; 0 tracks spend without a limit)."
)
@click.option("--max-prs", type=int, help="Distinct PRs the loop may touch (for modes that count them).")
@click.option(
    "--completion-promise",
    default=None,
    help='Sentinel text: the agent ends with <promise>TEXT</promise> (default "LOOP COMPLETE").',
)
@click.option("--name", help="Loop name (default: the mode, made unique).")
@click.option(
    "--lock",
    "lock_mode",
    type=click.Choice(["skip", "wait", "force"]),
    help="What resuming does against a live owner (default: skip).",
)
@click.option(
    "--gates",
    "gate_policy",
    type=click.Choice(["ask", "continue", "stop"]),
    help="Gate policy: ask the user (default), or decide unattended.",
)
@click.option(
    "--budget-file",
    type=click.Path(dir_okay=False),
    help="Keep budget.json at this path instead of the loop directory.",
)
@click.option(
    "--verify",
    help="A command that must pass (exit 0) before a completion claim is accepted, e.g. 'pytest -q'.",
)
@click.option(
    "--verify-timeout", type=float, help="Seconds the --verify command may run (default 300, at most 840)."
)
@click.option(
    "--session", help="Claude Code session id that owns the loop (default: $CLAUDE_CODE_SESSION_ID)."
)
@click.option("--prompt-file", type=click.File("r"), help="Read the goal from a file ('-' for stdin).")
@click.option(
    "--accept-project-rates",
    is_flag=True,
    help="Count the CLAUDE.md Loop Cost Rates rows priced below the built-in rates, as they are now "
    "(without it the built-in rates count for those models).",
)
@click.option(
    "--wrap-up/--no-wrap-up",
    default=None,
    help="When a budget runs out, give the agent one last turn to write handoff.md (default: on).",
)
@click.option(
    "--wrap-up-floor",
    type=float,
    help="Share of the dollar and token ceilings kept for the wrap-up before an iteration's cost is "
    "known (default 0.1).",
)
@click.option(
    "--judge/--no-judge",
    default=None,
    help="Have a small model (Claude Code headless, no tools) judge completion claims that pass the "
    "task gate and --verify; its 'not done' comes back to the agent as feedback.",
)
@click.option("--judge-model", help="The judge's model (default claude-haiku-4-5).")
@click.option("--judge-timeout", type=float, help="Seconds the judge may take (default 120, at most 600).")
@click.option(
    "--args-stdin",
    is_flag=True,
    help="Read the raw slash-command argument text from stdin (goal and options together).",
)
@click.pass_obj
def start(obj: Ctx, prompt, session, prompt_file, args_stdin, accept_project_rates, **options) -> None:
    """Start a loop in this project: the session keeps working on PROMPT until done or out of budget."""
    session = starting.clean_session(session) or env_session()
    if args_stdin:
        text = sys.stdin.read()
        # A heredoc adds one trailing newline; the user's own text is kept as is.
        req = starting.request_from_args_text(text[:-1] if text.endswith("\n") else text, session)
    else:
        goal = prompt_file.read() if prompt_file else " ".join(prompt)
        req = starting.StartRequest(prompt=goal.strip("\n") if prompt_file else goal, session=session)
    # Command-line options win over those inside the argument text.
    for attr, value in options.items():
        if value is not None:
            setattr(req, attr, value)
    if accept_project_rates:
        req.accept_project_rates = True
    paths, loop = starting.start(obj.state, req)
    echo(starting.announcement(loop))


@click.command()
@click.argument("name", required=False)
@click.option("--session", help="Pretend the Stop comes from this session (default: the loop's owner).")
@click.option(
    "--message", help="Pretend this is the agent's final message (default: what the transcript says)."
)
@click.option(
    "--transcript",
    "transcript_path",
    type=click.Path(dir_okay=False),
    help="Transcript to read (default: the one the loop last read).",
)
@click.option("--explain", is_flag=True, help="Show the snapshot and the reasons, not just the decision.")
@click.pass_obj
def route(obj: Ctx, name, session, message, transcript_path, explain) -> None:
    """Dry run: what the router would decide at a Stop of loop NAME (default: the session's, or
    the only active one) right now, and why. Changes nothing."""
    from loopwright.core.completion import sentinel
    from loopwright.events.hookinput import HookInput
    from loopwright.events.observe import observe

    state = obj.state
    paths = pick.pick_loop(state, name, session)
    loop = pick.config(paths)
    if loop.get("status") != loops.ACTIVE:
        echo(f"{loop.get('outcome')}")
        if explain:
            echo(f"loop {paths.name} has already ended: {loop.get('end_reason')}")
        return
    budget = loops.read_state(paths, "budget", move_corrupt=False) or {}
    tpath = transcript_path or (budget.get("cursor") or {}).get("path")
    sid = session or loop.get("owner_session") or "unknown"
    data = {"session_id": sid, "transcript_path": tpath, "cwd": str(state.parent), "stop_hook_active": True}
    if message is not None:
        data["last_assistant_message"] = message
    notes: list[str] = []
    snap = observe(paths, loop, HookInput(data), time.time(), notes, dry_run=True)
    decision = router.decide(snap)
    head = {router.CONTINUE: "CONTINUE", router.HOLD: "HOLD"}.get(decision.action, decision.outcome)
    echo(head)
    if not explain:
        return
    b = decision.budget or snap.budget
    claimed, where = router.completion_claimed(snap)
    iteration = decision.iteration or int(snap.budget.get("iterations_used", 0)) + 1
    uncounted = (decision.history or {}).get("counted") is False
    ends = (
        "a turn that does not count as an iteration (a wait or a gate); iteration "
        f"{int(b.get('iterations_used', 0)) + 1} is next"
        if uncounted
        else f"iteration {iteration}"
    )
    lines = [
        f"loop: {paths.name} ({loop['mode']} mode), owner session {loop.get('owner_session') or 'none'}",
        f"as session: {sid}",
        f"iteration: this Stop would end {ends} (of {loop['max_iterations']})",
        f"time: {b.get('minutes_elapsed', 0.0):.1f} of {loop['max_minutes']:g} minutes"
        f" (since {snap.budget.get('started_at')})",
        f"tokens: {b.get('tokens_in', 0)} in, {b.get('tokens_out', 0)} out"
        + (f" (limit {loop['max_tokens']})" if loop.get("max_tokens") else ""),
        f"transcript: {tpath or 'unknown'} ({snap.turn.bytes_read} new bytes,"
        f" tool used: {'yes' if snap.turn.used_tool else 'no'})",
        f"completion: {sentinel(loop['completion_promise'])} "
        + (f"found ({where})" if claimed else "not found in the final assistant message"),
        f"stop request: {snap.stop_request or 'none'}",
        f"cancelled: {'yes' if snap.cancelled else 'no'}",
        f"lock: {snap.lock_state}" + (f" ({locks.describe(snap.lock)})" if snap.lock else ""),
        f"why: {decision.reason}",
    ]
    lines += [f"note: {n}" for n in notes]
    if decision.prompt:
        lines += ["next prompt:", *("  " + ln for ln in decision.prompt.splitlines())]
    echo("\n".join(lines))


# --- cancel, resume, locks, teardown -------------------------------------------------------


@click.command()
@click.argument("name", required=False)
@click.option("--session", help="Cancel the loop this session owns.")
@click.option(
    "--reason", default="cancelled by the user", show_default=True, help="Why, for its report and journal."
)
@click.pass_obj
def cancel(obj: Ctx, name, session, reason) -> None:
    """Cancel loop NAME (default: this session's, or the only active one) for good, now: no
    later Stop can continue or revive it. `loopwright stop` lets it finish its turn instead."""
    echo(cancelling.cancel(obj.state, name, starting.clean_session(session) or env_session(), reason))


@click.command()
@click.argument("name", required=False)
@click.option("--session", help="The session that takes the loop over (default: $CLAUDE_CODE_SESSION_ID).")
@click.option(
    "--lock",
    "lock_mode",
    type=click.Choice(["skip", "wait", "force"]),
    help="When a live session holds the loop: skip (refuse, the default), wait until it is free,"
    " or force (after the force-unlock gate).",
)
@ceiling_options("Raise the {} ceiling (ceilings change only when you say so).")
@click.pass_obj
def resume(obj: Ctx, name, session, lock_mode, **ceilings) -> None:
    """Continue loop NAME in this session: after an interrupt or the block cap, when its session
    died (counters come back from the last history line), or after a budget ran out (with a
    higher ceiling)."""
    res = resuming.resume(
        obj.state,
        name,
        starting.clean_session(session) or env_session(),
        lock_mode=lock_mode,
        raise_to=ceilings,
    )
    echo(starting.resumed_note(res))


@click.command("release-lock")
@click.argument("name", required=False)
@click.option("--owner", required=True, help="The owner tag the lock must carry, e.g. session:<id>.")
@click.pass_obj
def release_lock(obj: Ctx, name, owner) -> None:
    """Free the lock of loop NAME (default: the only loop), only if the owner --owner names holds it."""
    paths = pick.pick_loop(obj.state, name, None, active_only=False)
    with loops.loop_mutex(paths):
        lk = loops.read_state(paths, "lock", move_corrupt=False)
        if not lk:
            echo(f"loopwright: loop {paths.name} has no lock; nothing to release.")
            return
        if lk.get("owner") != owner:
            raise loops.LoopError(
                f"the lock of loop {paths.name} is held by {lk.get('owner')}, not {owner}; nothing released"
            )
        paths.lock.unlink()
    journal.write(paths, {"event": "lock", "result": "released", "owner": owner}, session=None)
    echo(f"loopwright: released the lock of loop {paths.name} held by {owner}.")


@click.command()
@click.argument("name", required=False)
@click.option("--force", is_flag=True, help="Also remove an active loop whose lock is still alive.")
@click.pass_obj
def teardown(obj: Ctx, name, force) -> None:
    """Remove loop NAME and all its files (safe after a crash; refuses a live loop without --force)."""
    paths = pick.pick_loop(obj.state, name, None, active_only=False, trusted=False)
    loops.check_dirs(obj.state, paths.name)  # rmtree never follows symlinks, but say so plainly
    with loops.loop_mutex(paths):
        try:
            loop = loops.load_config(paths, move_corrupt=False)
        except (store.CorruptFile, loops.UntrustedLoop):
            loop = None  # not ours, or damaged: removing its files is always allowed
        if loop and loop.get("status") == loops.ACTIVE and not force:
            lk = loops.read_state(paths, "lock", move_corrupt=False)
            if lk and not locks.is_stale(lk, time.time()):
                raise loops.LoopError(
                    f"loop {paths.name} is active and its lock is alive ({locks.describe(lk)}); "
                    "cancel it first, or pass --force"
                )
        loops.clear_active(paths)
        shutil.rmtree(paths.dir)
    echo(f"loopwright: removed loop {paths.name}.")


@click.command()
@click.argument("name")
@click.option(
    "--yes",
    "digest",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="DIGEST",
    help="Take the loop over, exactly as the review showed it: DIGEST is the one the review printed.",
)
@click.pass_obj
def adopt(obj: Ctx, name: str, digest: str | None) -> None:
    """Take over loop NAME, which your loopwright did not create (cloned, copied, written by another user).

    Shows its goal, the command it runs on completion, its ceilings, spend and tasks, and a
    digest of what you read; with --yes DIGEST it becomes yours, exactly as shown (in a new
    private directory), and waits until you attach it to a session."""
    from loopwright.actions import adoption

    if digest is not None:
        echo(adoption.adopt(obj.state, name, digest))
        return
    seen, lines = adoption.review(obj.state, name)
    for line in lines:
        echo(line)
    echo(f"Digest of what you just read: {seen.digest}")
    echo(
        "\nloopwright never runs this loop as it is. If you want it to, run:"
        f"\n    loopwright adopt {name} --yes {seen.digest}"
        "\n(it refuses if the loop changes in the meantime)"
    )


COMMANDS = (start, route, cancel, resume, release_lock, teardown, adopt)
