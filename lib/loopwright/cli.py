"""The ``loopwright`` command line (click).

Every error is one line naming the problem and the fix, with a non-zero exit.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import click
import orjson

from . import __version__, control, loops, router, slashargs, store
from . import lock as locks
from . import start as starting
from .project import STATE_DIRNAME, state_dir


class Ctx:
    def __init__(self, project: str | None):
        self.project = project

    @property
    def state(self) -> Path:
        if self.project and not os.environ.get("LOOPWRIGHT_STATE_DIR"):
            return Path(self.project).absolute() / STATE_DIRNAME
        return state_dir()


def fail(message: str, code: int = 1) -> None:
    click.echo(f"loopwright: error: {message}", err=True)
    sys.exit(code)


def _env_session() -> str | None:
    """Inside Claude Code (the agent's Bash tool) the session id is in the environment."""
    return starting.clean_session(os.environ.get("CLAUDE_CODE_SESSION_ID"))


class Group(click.Group):
    """Turns known failures into one-line errors instead of tracebacks."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (loops.LoopError, store.CorruptFile, slashargs.ArgError) as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"{exc.strerror or exc} ({exc.filename or 'file'}); check the path and its permissions")
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            if os.environ.get("LOOPWRIGHT_DEBUG") == "1":
                raise
            fail(f"internal error ({type(exc).__name__}: {exc}); rerun with LOOPWRIGHT_DEBUG=1 for the traceback")


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loopwright")
@click.option("-C", "--project", metavar="DIR", help="Project directory (default: $CLAUDE_PROJECT_DIR, else the git top level, else .).")
@click.pass_context
def main(ctx: click.Context, project: str | None) -> None:
    """loopwright: run a Claude Code session through many iterations, unattended and within budgets."""
    ctx.obj = Ctx(project)


# --- start ----------------------------------------------------------------------------

@main.command()
@click.argument("prompt", nargs=-1)
@click.option("--max-iterations", type=int, help="Iterations allowed (prompt mode default: 20).")
@click.option("--max-minutes", type=float, help="Wall-clock minutes allowed (default: 60).")
@click.option("--max-tokens", type=int, help="Tokens allowed (input + output), counted from the transcript.")
@click.option("--max-dollars", type=float, help="Dollar ceiling (default 25; 0 tracks spend without a limit).")
@click.option("--completion-promise", default=None, help='Sentinel text: the agent ends with <promise>TEXT</promise> (default "LOOP COMPLETE").')
@click.option("--name", help="Loop name (default: the mode, made unique).")
@click.option("--session", help="Claude Code session id that owns the loop (slash commands pass ${CLAUDE_SESSION_ID}).")
@click.option("--prompt-file", type=click.File("r"), help="Read the goal from a file ('-' for stdin).")
@click.option("--args-stdin", is_flag=True, help="Read the raw slash-command argument text from stdin (goal and options together).")
@click.pass_obj
def start(obj: Ctx, prompt, max_iterations, max_minutes, max_tokens, max_dollars, completion_promise, name, session, prompt_file, args_stdin) -> None:
    """Start a loop in this project: the session keeps working on PROMPT until done or out of budget."""
    session = starting.clean_session(session) or _env_session()
    if args_stdin:
        text = sys.stdin.read()
        # The heredoc adds one trailing newline; the user's own text is kept as is.
        req = starting.request_from_args_text(text[:-1] if text.endswith("\n") else text, session)
    else:
        goal = prompt_file.read() if prompt_file else " ".join(prompt)
        req = starting.StartRequest(prompt=goal.strip("\n") if prompt_file else goal, session=session)
    # Command-line options win over those inside the argument text.
    for attr, value in (("max_iterations", max_iterations), ("max_minutes", max_minutes), ("max_tokens", max_tokens),
                        ("max_dollars", max_dollars), ("completion_promise", completion_promise), ("name", name)):
        if value is not None:
            setattr(req, attr, value)
    paths, loop = starting.start(obj.state, req)
    click.echo(starting.announcement(loop))


# --- status -------------------------------------------------------------------------------


def loop_summary(paths: loops.LoopPaths) -> dict:
    cfg = control.config(paths)
    try:
        budget = store.read_json(paths.budget) or {}
    except store.CorruptFile as exc:
        budget = {"_problem": str(exc)}
    used = int(budget.get("iterations_used", 0))
    active = cfg.get("status") == loops.ACTIVE
    r = budget.get("router") or {}
    return {
        "name": cfg.get("name", paths.name),
        "mode": cfg.get("mode"),
        "status": loops.ACTIVE if active else loops.ENDED,
        "outcome": cfg.get("outcome"),
        "iteration": used + 1 if active else used,
        "max_iterations": cfg.get("max_iterations"),
        "owner_session": cfg.get("owner_session"),
        "started_at": cfg.get("started_at"),
        "ended_at": cfg.get("ended_at"),
        "last_reason": cfg.get("end_reason") if not active else r.get("last_reason"),
        "minutes_elapsed": budget.get("minutes_elapsed", 0.0),
        "max_minutes": cfg.get("max_minutes"),
        "tokens_in": budget.get("tokens_in", 0),
        "tokens_out": budget.get("tokens_out", 0),
        "max_tokens": cfg.get("max_tokens"),
        "pauses": r.get("pauses") or [],
        "paused": active and r.get("last_action") == router.PAUSE,
        "paused_at": r.get("paused_at") if active and r.get("last_action") == router.PAUSE else None,
        "prompt": cfg.get("prompt"),
        "report": str(paths.report) if paths.report.exists() else None,
    }


def _lock_line(paths: loops.LoopPaths) -> str:
    try:
        lk = store.read_json(paths.lock)
    except store.CorruptFile as exc:
        return f"lock: {exc}"
    if not lk:
        return "lock: free"
    state = "stale" if locks.is_stale(lk, time.time()) else "alive"
    return f"lock: {locks.describe(lk)}: {state}"


@main.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(obj: Ctx, name: str | None, as_json: bool) -> None:
    """Where every loop of this project stands (or just loop NAME)."""
    state = obj.state
    names = [loops.validate_name(name)] if name else loops.loop_names(state)
    if name and not loops.LoopPaths(state, name).dir.is_dir():
        raise loops.LoopError(f"no loop named {name} in {state}")
    summaries, problems = [], []
    for n in names:
        try:
            summaries.append(loop_summary(loops.LoopPaths(state, n)))
        except (loops.LoopError, store.CorruptFile) as exc:
            problems.append(f"{n}: {exc}")
    if as_json:
        click.echo(orjson.dumps({"loops": summaries, "problems": problems}, option=orjson.OPT_INDENT_2).decode())
        return
    if not summaries and not problems:
        click.echo(f"No loops in {state.parent}. Start one with /loopwright:loop \"<goal>\" in Claude Code.")
        return
    for s in summaries:
        paths = loops.LoopPaths(state, s["name"])
        if s["status"] == loops.ACTIVE:
            click.echo(f"{s['name']}: active ({s['mode']} mode), iteration {s['iteration']}/{s['max_iterations']}, "
                       f"{s['minutes_elapsed']:.1f}/{s['max_minutes']:g} min, {s['tokens_in'] + s['tokens_out']} tokens")
            click.echo(f"  owner session: {s['owner_session'] or 'none yet (waiting for adoption)'}")
            if s["paused"]:
                click.echo(f"  PAUSED since {s['paused_at']}: Claude Code's block cap ended the turn after "
                           f"iteration {s['iteration'] - 1}; send any message in that session, or /loopwright:resume")
            click.echo(f"  {_lock_line(paths)}")
        else:
            click.echo(f"{s['name']}: ended {s['outcome']} after {s['iteration']}/{s['max_iterations']} iterations "
                       f"({s['minutes_elapsed']:.1f} min, {s['tokens_in'] + s['tokens_out']} tokens)")
        if s["last_reason"]:
            click.echo(f"  last decision: {s['last_reason']}")
        for p in s["pauses"]:
            what = ("Claude Code's block cap ended the turn" if p["why"] == "block-cap" else "the session stopped (interrupt)")
            click.echo(f"  paused after iteration {p['after_iteration']}: {what}; resumed {p['resumed_at']}")
        if s["report"]:
            click.echo(f"  report: {s['report']}")
    for p in problems:
        click.echo(f"problem: {p}")


# --- route ----------------------------------------------------------------------------------


@main.command()
@click.argument("name", required=False)
@click.option("--session", help="Pretend the Stop comes from this session (default: the loop's owner).")
@click.option("--message", help="Pretend this is the agent's final message (default: what the transcript says).")
@click.option("--transcript", "transcript_path", type=click.Path(dir_okay=False), help="Transcript to read (default: the one the loop last read).")
@click.option("--explain", is_flag=True, help="Show the snapshot and the reasons, not just the decision.")
@click.pass_obj
def route(obj: Ctx, name, session, message, transcript_path, explain) -> None:
    """Dry run: what the router would decide at a Stop right now, and why. Changes nothing."""
    from . import hook
    from .completion import sentinel

    state = obj.state
    paths = control.pick_loop(state, name, session)
    loop = control.config(paths)
    if loop.get("status") != loops.ACTIVE:
        click.echo(f"{loop.get('outcome')}")
        if explain:
            click.echo(f"loop {paths.name} has already ended: {loop.get('end_reason')}")
        return
    budget = store.read_json(paths.budget, move_corrupt=False) or {}
    tpath = transcript_path or (budget.get("cursor") or {}).get("path")
    sid = session or loop.get("owner_session") or "unknown"
    data = {"session_id": sid, "transcript_path": tpath, "cwd": str(state.parent), "stop_hook_active": True}
    if message is not None:
        data["last_assistant_message"] = message
    notes: list[str] = []
    snap = hook.observe(paths, loop, hook.HookInput(data), time.time(), notes, dry_run=True)
    decision = router.decide(snap)
    head = {router.CONTINUE: "CONTINUE", router.HOLD: "HOLD"}.get(decision.action, decision.outcome)
    click.echo(head)
    if not explain:
        return
    b = decision.budget or snap.budget
    claimed, where = router.completion_claimed(snap)
    lines = [
        f"loop: {paths.name} ({loop['mode']} mode), owner session {loop.get('owner_session') or 'none'}",
        f"as session: {sid}",
        f"iteration: this Stop would end iteration {decision.iteration or int(snap.budget.get('iterations_used', 0)) + 1} of {loop['max_iterations']}",
        f"time: {b.get('minutes_elapsed', 0.0):.1f} of {loop['max_minutes']:g} minutes (since {snap.budget.get('started_at')})",
        f"tokens: {b.get('tokens_in', 0)} in, {b.get('tokens_out', 0)} out"
        + (f" (limit {loop['max_tokens']})" if loop.get("max_tokens") else ""),
        f"transcript: {tpath or 'unknown'} ({snap.turn.bytes_read} new bytes, tool used: {'yes' if snap.turn.used_tool else 'no'})",
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
    click.echo("\n".join(lines))


# --- cancel, resume, locks, teardown -------------------------------------------------------


@main.command()
@click.argument("name", required=False)
@click.option("--session", help="Cancel the loop this session owns.")
@click.option("--reason", default="cancelled by the user", show_default=True)
@click.pass_obj
def cancel(obj: Ctx, name, session, reason) -> None:
    """Cancel a loop for good: no later Stop can continue or revive it."""
    click.echo(control.cancel(obj.state, name, starting.clean_session(session) or _env_session(), reason))


@main.command()
@click.argument("name", required=False)
@click.option("--session", help="The session that takes the loop over (default: $CLAUDE_CODE_SESSION_ID).")
@click.pass_obj
def resume(obj: Ctx, name, session) -> None:
    """Continue an active loop in this session: after an interrupt, the block cap, or when its session died."""
    _, loop = control.resume(obj.state, name, starting.clean_session(session) or _env_session())
    click.echo(starting.announcement(loop, verb="resumed"))


@main.command("release-lock")
@click.argument("name", required=False)
@click.option("--owner", required=True, help="The owner tag the lock must carry, e.g. session:<id>.")
@click.pass_obj
def release_lock(obj: Ctx, name, owner) -> None:
    """Free a loop's lock, only if OWNER holds it."""
    paths = control.pick_loop(obj.state, name, None, active_only=False)
    with loops.loop_mutex(paths):
        lk = store.read_json(paths.lock)
        if not lk:
            click.echo(f"loopwright: loop {paths.name} has no lock; nothing to release.")
            return
        if lk.get("owner") != owner:
            raise loops.LoopError(f"the lock of loop {paths.name} is held by {lk.get('owner')}, not {owner}; nothing released")
        paths.lock.unlink()
    store.append_jsonl(paths.journal, {"at": locks.now_iso(), "loop": paths.name, "event": "lock", "result": "released", "owner": owner})
    click.echo(f"loopwright: released the lock of loop {paths.name} held by {owner}.")


@main.command()
@click.argument("name", required=False)
@click.option("--force", is_flag=True, help="Also remove an active loop whose lock is still alive.")
@click.pass_obj
def teardown(obj: Ctx, name, force) -> None:
    """Remove a loop and all its files (safe after a crash; refuses a live loop without --force)."""
    paths = control.pick_loop(obj.state, name, None, active_only=False)
    with loops.loop_mutex(paths):
        try:
            loop = loops.load_config(paths)
        except store.CorruptFile:
            loop = None
        if loop and loop.get("status") == loops.ACTIVE and not force:
            lk = store.read_json(paths.lock, move_corrupt=False)
            if lk and not locks.is_stale(lk, time.time()):
                raise loops.LoopError(
                    f"loop {paths.name} is active and its lock is alive ({locks.describe(lk)}); "
                    "cancel it first, or pass --force"
                )
        loops.clear_active(paths)
        shutil.rmtree(paths.dir)
    click.echo(f"loopwright: removed loop {paths.name}.")


@main.command()
@click.pass_obj
def doctor(obj: Ctx) -> None:
    """Check the interpreter, packages, hook wiring, competing Stop hooks and loop state."""
    from . import doctor as checkup

    checks = checkup.run(obj.state)
    for c in checks:
        click.echo(f"[{c.level:>4}] {c.what}: {c.detail}")
    failed = [c for c in checks if c.level == checkup.FAIL]
    click.echo(f"{len(failed)} problem(s) found." if failed else "All checks passed.")
    sys.exit(1 if failed else 0)


def run() -> None:
    """Console entry point."""
    main(prog_name="loopwright")
