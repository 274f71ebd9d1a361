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

from . import __version__, control, loops, router, store
from . import lock as locks
from . import start as starting
from .errors import UserError
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


def ceiling_options(help_text: str):
    """The --max-* options for commands that raise ceilings; ``help_text`` has one {} for the budget."""
    specs = (("--max-iterations", int, "iteration"), ("--max-minutes", float, "wall-clock minutes"),
             ("--max-tokens", int, "token"), ("--max-dollars", float, "dollar"), ("--max-prs", int, "PR"))

    def wrap(fn):
        for flag, kind, what in reversed(specs):
            fn = click.option(flag, type=kind, help=help_text.format(what))(fn)
        return fn

    return wrap


def _env_session() -> str | None:
    """Inside Claude Code (the agent's Bash tool) the session id is in the environment."""
    return starting.clean_session(os.environ.get("CLAUDE_CODE_SESSION_ID"))


class Group(click.Group):
    """Turns known failures into one-line errors instead of tracebacks."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
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
@click.option("--max-minutes", type=float, help="Wall-clock minutes allowed, from the recorded start (default: 60).")
@click.option("--max-tokens", type=int, help="Input + output tokens allowed, counted from the transcript.")
@click.option("--max-dollars", type=float, help="Dollar ceiling (default 25; 0 tracks spend without a limit).")
@click.option("--max-prs", type=int, help="Distinct PRs the loop may touch (work mode; default 20 there).")
@click.option("--completion-promise", default=None, help='Sentinel text: the agent ends with <promise>TEXT</promise> (default "LOOP COMPLETE").')
@click.option("--name", help="Loop name (default: the mode, made unique).")
@click.option("--lock", "lock_mode", type=click.Choice(["skip", "wait", "force"]), help="What resuming does against a live owner (default: skip).")
@click.option("--gates", "gate_policy", type=click.Choice(["ask", "continue", "stop"]), help="Gate policy: ask the user (default), or decide unattended.")
@click.option("--budget-file", type=click.Path(dir_okay=False), help="Keep budget.json at this path instead of the loop directory.")
@click.option("--verify", help="A command that must pass (exit 0) before a completion claim is accepted, e.g. 'pytest -q'.")
@click.option("--verify-timeout", type=float, help="Seconds the --verify command may run (default 300, at most 840).")
@click.option("--session", help="Claude Code session id that owns the loop (default: $CLAUDE_CODE_SESSION_ID).")
@click.option("--prompt-file", type=click.File("r"), help="Read the goal from a file ('-' for stdin).")
@click.option("--args-stdin", is_flag=True, help="Read the raw slash-command argument text from stdin (goal and options together).")
@click.pass_obj
def start(obj: Ctx, prompt, session, prompt_file, args_stdin, **options) -> None:
    """Start a loop in this project: the session keeps working on PROMPT until done or out of budget."""
    session = starting.clean_session(session) or _env_session()
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
    paths, loop = starting.start(obj.state, req)
    click.echo(starting.announcement(loop))


# --- status -------------------------------------------------------------------------------


def loop_summary(paths: loops.LoopPaths) -> dict:
    cfg = control.config(paths)
    paths.configured(cfg)
    try:
        budget = store.read_json(paths.budget, move_corrupt=False) or {}
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
        "max_iterations": budget.get("max_iterations", cfg.get("max_iterations")),
        "owner_session": cfg.get("owner_session"),
        "started_at": cfg.get("started_at"),
        "ended_at": cfg.get("ended_at"),
        "last_reason": cfg.get("end_reason") if not active else r.get("last_reason"),
        "minutes_elapsed": budget.get("minutes_elapsed", 0.0),
        "max_minutes": budget.get("max_minutes", cfg.get("max_minutes")),
        "tokens_in": budget.get("tokens_in", 0),
        "tokens_out": budget.get("tokens_out", 0),
        "max_tokens": budget.get("max_tokens", cfg.get("max_tokens")),
        "dollars_estimate": budget.get("dollars_estimate", 0.0),
        "max_dollars": budget.get("max_dollars", cfg.get("max_dollars")),
        "rate_table_source": budget.get("rate_table_source"),
        "unknown_models": budget.get("unknown_models") or [],
        "prs_touched": budget.get("prs_touched") or [],
        "max_prs": budget.get("max_prs", cfg.get("max_prs")),
        "pending_gates": [g["name"] for g in budget.get("pending_gates") or [] if not g.get("answer")],
        "gates": budget.get("gates_log") or [],
        "pauses": r.get("pauses") or [],
        "paused": active and r.get("last_action") == router.PAUSE,
        "paused_at": r.get("paused_at") if active and r.get("last_action") == router.PAUSE else None,
        "prompt": cfg.get("prompt"),
        "task_module": cfg.get("task_module"),
        "report": str(paths.report) if paths.report.exists() else None,
    }


def _spend_line(s: dict) -> str:
    parts = [f"time {s['minutes_elapsed']:.1f}/{s['max_minutes']:g} min",
             f"tokens {s['tokens_in'] + s['tokens_out']}" + (f"/{s['max_tokens']}" if s["max_tokens"] else ""),
             f"spend ${s['dollars_estimate']:,.2f}" + (f"/${float(s['max_dollars']):,.2f}" if s["max_dollars"] else " (no limit)")]
    if s["max_prs"] or s["prs_touched"]:
        parts.append(f"PRs {len(s['prs_touched'])}" + (f"/{s['max_prs']}" if s["max_prs"] else ""))
    return " · ".join(parts)


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
            what = f"{s['mode']} mode" + (f", TASK/{s['task_module']}" if s.get("task_module") else "")
            click.echo(f"{s['name']}: active ({what}), iteration {s['iteration']}/{s['max_iterations']}")
            click.echo(f"  owner session: {s['owner_session'] or 'none yet (waiting for adoption)'}")
            click.echo(f"  {_lock_line(paths)}")
            if s["paused"]:
                click.echo(f"  PAUSED since {s['paused_at']}: {s['last_reason']}; send any message in that session, or /loopwright:resume")
            if s["pending_gates"]:
                click.echo(f"  waiting for the user's answer to gate(s): {', '.join(s['pending_gates'])} "
                           "(/loopwright:answer <gate> <option>)")
        else:
            click.echo(f"{s['name']}: ended {s['outcome']} after {s['iteration']}/{s['max_iterations']} iterations")
        click.echo("  " + _spend_line(s))
        if s["last_reason"] and not s["paused"]:
            click.echo(f"  last decision: {s['last_reason']}")
        for p in s["pauses"]:
            what = {"block-cap": "Claude Code's block cap ended the turn", "gate": "it waited for a gate answer"}.get(
                p["why"], "the session stopped (interrupt)")
            click.echo(f"  paused after iteration {p['after_iteration']}: {what}; resumed {p['resumed_at']}")
        for g in s["gates"]:
            click.echo(f"  gate {g['name']} (iteration {g.get('iteration')}): {g['answer']} ({g.get('by')})")
        if s["unknown_models"]:
            click.echo(f"  models without a known price (charged at the highest rate): {', '.join(s['unknown_models'])}")
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
@click.option("--lock", "lock_mode", type=click.Choice(["skip", "wait", "force"]), help="When a live session holds the loop: skip (refuse, the default), wait until it is free, or force (after the force-unlock gate).")
@ceiling_options("Raise the {} ceiling (ceilings change only when you say so).")
@click.pass_obj
def resume(obj: Ctx, name, session, lock_mode, **ceilings) -> None:
    """Continue a loop in this session: after an interrupt or the block cap, when its session
    died (counters come back from the last history line), or after a budget ran out (with a
    higher ceiling)."""
    res = control.resume(obj.state, name, starting.clean_session(session) or _env_session(), lock_mode=lock_mode, raise_to=ceilings)
    click.echo(starting.resumed_note(res))


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


# --- iteration reports, gates, history -------------------------------------------------------------


@main.command("report")
@click.option("--outcome", type=click.Choice(list(control.OUTCOMES)), required=True, help="How this iteration went.")
@click.option("--pr", "prs", multiple=True, help="A PR this iteration touched (142 or #142); repeat for several.")
@click.option("--comments", type=int, help="Review comments and replies pushed.")
@click.option("--merges", type=int, help="Merge API calls attempted.")
@click.option("--agents", type=int, help="Workers/reviewers/responders dispatched.")
@click.option("--root-cause", help="Why it failed (required with --outcome failure); the same cause twice in a row fires the repeated-failure gate.")
@click.option("--item", help="The issue or PR the outcome is about, e.g. #44.")
@click.option("--external-error", help="An external service error, e.g. 'qmd-unreachable'.")
@click.option("--exit-code", type=int, help="Exit code of the wrapped command (78 means the external service was unreachable).")
@click.option("--tracked-pr", "tracked", multiple=True, metavar="N:BRANCH:START_SHA:END_SHA:STATE", help="A PR's state for the resume contract; repeatable.")
@click.option("--worktree", "worktrees", multiple=True, metavar="PATH:BRANCH:SHA", help="A worktree this iteration left on disk; repeatable.")
@click.option("--task", help="The task these tokens belong to (token ledger).")
@click.option("--note", help="Free text for the journal.")
@click.option("--loop", "name", help="The loop (default: this session's).")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded entry as JSON.")
@click.pass_obj
def report_cmd(obj: Ctx, outcome, prs, comments, merges, agents, root_cause, item, external_error, exit_code, tracked,
               worktrees, task, note, name, as_json) -> None:
    """Report what this iteration did; the next Stop folds it into the budget and history."""
    entry = {
        "outcome": outcome, "prs": [control.parse_pr(p) for p in prs], "comments": comments, "merges": merges,
        "agents": agents, "root_cause": root_cause, "item": item, "external_error": external_error,
        "exit_code": exit_code, "tracked_prs": [control.parse_tracked_pr(t) for t in tracked],
        "worktrees": [control.parse_worktree(w) for w in worktrees] if worktrees else None, "task": task, "note": note,
    }
    paths, record = control.record_report(obj.state, name, _env_session(), entry)
    if as_json:
        click.echo(orjson.dumps(record).decode())
    else:
        click.echo(f"loopwright: iteration {record['iteration']} report recorded for loop {paths.name}; it is counted when this turn ends.")


@main.group()
def gate() -> None:
    """Gates: decisions the loop waits for (budget escalation, force-unlock, repeated failure)."""


@gate.command("answer")
@click.argument("gate_name", metavar="GATE")
@click.argument("answer", metavar="OPTION")
@click.option("--loop", "name", help="The loop (default: this session's, or the only one).")
@ceiling_options("With 'budget-escalation raise': the new {} ceiling.")
@click.pass_obj
def gate_answer(obj: Ctx, gate_name, answer, name, **raise_to) -> None:
    """Record the user's answer to a waiting gate, verbatim."""
    click.echo(control.answer_gate(obj.state, name, _env_session(), gate_name, answer, raise_to))


@gate.command("list")
@click.option("--loop", "name", help="The loop (default: this session's, or the only one).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def gate_list(obj: Ctx, name, as_json) -> None:
    """Gates waiting for an answer."""
    paths = control.pick_loop(obj.state, name, _env_session(), active_only=False)
    cfg = control.config(paths)
    budget = store.read_json(paths.configured(cfg).budget, move_corrupt=False) or {}
    waiting = [g for g in budget.get("pending_gates") or [] if not g.get("answer")]
    if as_json:
        click.echo(orjson.dumps({"loop": paths.name, "gates": waiting}).decode())
        return
    if not waiting:
        click.echo(f"loop {paths.name}: no gate is waiting.")
    for g in waiting:
        click.echo(f"{g['name']}: {g['question']} (options: {', '.join(g['options'])})")


@main.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per iteration.")
@click.option("--last", type=int, help="Only the last N iterations.")
@click.pass_obj
def history(obj: Ctx, name, as_json, last) -> None:
    """One row per iteration: outcome, tokens, dollars, gates."""
    paths = control.pick_loop(obj.state, name, _env_session(), active_only=False)
    records, problems = store.read_jsonl(paths.history)
    if last:
        records = records[-last:]
    if as_json:
        for r in records:
            click.echo(orjson.dumps(r).decode())
    else:
        click.echo(f"{'iter':>4}  {'outcome':<26}{'tokens in':>10}{'out':>8}{'dollars':>10}  gates")
        for r in records:
            gates_text = "; ".join(f"{g['name']}={g.get('answer')}" for g in r.get("gates") or [])
            click.echo(f"{r.get('iteration', '?'):>4}  {str(r.get('outcome')):<26}{r.get('tokens_in_this_iter', 0):>10}"
                       f"{r.get('tokens_out_this_iter', 0):>8}{r.get('dollars_this_iter', 0.0):>10.4f}  {gates_text}")
    for p in problems:
        click.echo(f"problem: {p}", err=True)


@main.command()
def statusline() -> None:
    """One line for Claude Code's status line (reads its JSON on stdin; prints nothing when no loop)."""
    from .entry import statusline as line

    sys.exit(line())


# --- tasks ------------------------------------------------------------------------------------


def _task_file(obj: Ctx, loop_name: str | None, project_arg: str | None = None) -> Path:
    from . import tasks as taskreg
    from .project import project_config

    state = obj.state if not project_arg else Path(project_arg).absolute() / STATE_DIRNAME
    project = state.parent
    config, problem = project_config(project)
    if problem:
        click.echo(f"loopwright: {problem}", err=True)
    loop_dir = None
    session = _env_session()
    if loop_name:
        loop_dir = control.pick_loop(state, loop_name, None, active_only=False).dir
    elif session:
        try:
            loop_dir = control.pick_loop(state, None, session, own_only=True).dir
        except loops.LoopError:
            loop_dir = None  # this session runs no loop: the project's own registry
    try:
        return taskreg.tasks_path(project, state, loop_dir, config)
    except taskreg.TaskError as exc:
        raise loops.LoopError(str(exc)) from None




def _emit(as_json: bool, data: dict, text: str) -> None:
    click.echo(orjson.dumps(data).decode() if as_json else text)


@main.group()
def task() -> None:
    """Tasks: the loop's work list. A loop cannot finish while a task is open.

    Inside a loop the tasks belong to that loop; elsewhere to the project. The file is
    $LOOPWRIGHT_TASKS_FILE (absolute) if set, else `tasks_file` in .loopwright.json.
    """


@task.command("add")
@click.argument("text", nargs=-1, required=True)
@click.option("--depends-on", multiple=True, metavar="ID", help="A task that must be done first; repeatable.")
@click.option("--source", default="manual", show_default=True, help="Where the task came from.")
@click.option("--loop", "loop_name", help="The loop whose tasks to change (default: this session's).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def task_add(obj: Ctx, text, depends_on, source, loop_name, as_json) -> None:
    """Add an open task; prints its id."""
    from . import tasks as taskreg

    entry = taskreg.add(_task_file(obj, loop_name), " ".join(text), source, list(depends_on))
    _emit(as_json, entry, entry["id"])


@task.command("complete")
@click.argument("task_id", metavar="ID")
@click.option("--loop", "loop_name", help="The loop whose tasks to change (default: this session's).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def task_complete(obj: Ctx, task_id, loop_name, as_json) -> None:
    """Mark a task done (a task already done stays as it is)."""
    from . import tasks as taskreg

    entry, changed = taskreg.complete(_task_file(obj, loop_name), task_id)
    _emit(as_json, {"task": entry, "changed": changed},
          f"{task_id} done" if changed else f"{task_id} was already done; nothing changed")


@task.command("update")
@click.argument("task_id", metavar="ID")
@click.argument("text", nargs=-1, required=True)
@click.option("--loop", "loop_name", help="The loop whose tasks to change (default: this session's).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def task_update(obj: Ctx, task_id, text, loop_name, as_json) -> None:
    """Replace a task's description (its status is kept)."""
    from . import tasks as taskreg

    entry = taskreg.update(_task_file(obj, loop_name), task_id, " ".join(text))
    _emit(as_json, entry, f"{task_id} updated")


@task.command("remove")
@click.argument("task_id", metavar="ID")
@click.argument("reason", nargs=-1)
@click.option("--loop", "loop_name", help="The loop whose tasks to change (default: this session's).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def task_remove(obj: Ctx, task_id, reason, loop_name, as_json) -> None:
    """Remove a task for good (REASON defaults to "manual")."""
    from . import tasks as taskreg

    entry = taskreg.remove(_task_file(obj, loop_name), task_id, " ".join(reason) or "manual")
    _emit(as_json, entry, f"{task_id} removed ({entry['reason']})")


@task.command("list")
@click.argument("project_dir", required=False, type=click.Path(file_okay=False))
@click.option("--loop", "loop_name", help="The loop whose tasks to show (default: this session's).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def task_list(obj: Ctx, project_dir, loop_name, as_json) -> None:
    """All tasks, grouped by status: open oldest first, done most recent first."""
    from . import tasks as taskreg

    path = _task_file(obj, loop_name, project_dir)
    reg = taskreg.load(path)
    for p in reg.problems:
        click.echo(f"loopwright: {p}", err=True)
    if as_json:
        click.echo(orjson.dumps({"file": str(path), "open": reg.open, "done": reg.done, "problems": reg.problems}).decode())
        return
    if not reg.total:
        click.echo(f"No tasks ({path}).")
        return
    click.echo(taskreg.render(reg, budget_chars=10**12))
    click.echo(taskreg.pressure_line(reg))



@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print capabilities.json.")
@click.pass_obj
def discover(obj: Ctx, as_json) -> None:
    """Detect the CLI tools and MCP servers a loop can use; writes .loopwright/capabilities.json."""
    from . import discover as disc

    caps = disc.discover(obj.state)
    if as_json:
        click.echo(orjson.dumps(caps, option=orjson.OPT_INDENT_2).decode())
        return
    click.echo(f"tools on PATH: {', '.join(caps['available']) or 'none'}")
    click.echo(f"project test commands: {', '.join(caps['project_test_commands']) or 'none found'}")
    servers = ", ".join(f"{m['name']} ({m['source']})" for m in caps["mcp_servers"]) or "none configured"
    click.echo(f"MCP servers: {servers}")
    click.echo(f"written to {obj.state / 'capabilities.json'}")


# --- task modules (ai-cli-task lifecycle) ------------------------------------------------------------------


def _project(obj: Ctx) -> Path:
    return obj.state.parent





@main.group()
def lifecycle() -> None:
    """ai-cli-task modules under TASK/: every status change, validated against the state x command matrix."""


@lifecycle.command("init")
@click.argument("module")
@click.option("--title", default="", help="Human-readable title.")
@click.option("--tags", default="", help="Comma-separated tags.")
@click.option("--worktree", is_flag=True, help="Work in .worktrees/task-<module> instead of switching this checkout.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def lc_init(obj: Ctx, module, title, tags, worktree, as_json) -> None:
    """Create TASK/MODULE (status draft), its branch task/MODULE, and commit."""
    from . import taskops

    res = taskops.init(_project(obj), module, title, [t.strip() for t in tags.split(",") if t.strip()], worktree)
    where = f" in worktree {res['worktree']}" if res["worktree"] else ""
    _emit(as_json, res, f"TASK/{module} created (draft) on branch {res['branch']}{where}; fill in {res['dir']}/.target.md")


@lifecycle.command("plan")
@click.argument("module")
@click.option("--annotations", is_flag=True, help="The plan run processed annotations (instead of generating a plan).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def lc_plan(obj: Ctx, module, annotations, as_json) -> None:
    """Record a plan run: draft/blocked -> planning, review/executing -> re-planning."""
    from . import taskops

    res = taskops.apply(_project(obj), module, "plan", result="(annotations)" if annotations else "(generated)")
    _emit(as_json, res, f"TASK/{module}: plan recorded; status {res['from']} -> {res['to']}" + (f" (phase {res['phase']})" if res["phase"] else ""))


@lifecycle.command("check")
@click.argument("module")
@click.option("--checkpoint", type=click.Choice(["post-plan", "mid-exec", "post-exec"]), required=True)
@click.option("--result", required=True, help="post-plan: PASS|NEEDS_REVISION|BLOCKED; mid-exec: CONTINUE|NEEDS_FIX|REPLAN|BLOCKED; post-exec: ACCEPT|NEEDS_FIX|REPLAN")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def lc_check(obj: Ctx, module, checkpoint, result, as_json) -> None:
    """Record a check verdict and its status change."""
    from . import taskops

    res = taskops.apply(_project(obj), module, "check", checkpoint=checkpoint, result=result)
    _emit(as_json, res, f"TASK/{module}: check {checkpoint} {result}; status {res['from']} -> {res['to']}"
            + (f"\nwarning: {res['warning']}" if res.get("warning") else ""))


@lifecycle.command("exec")
@click.argument("module")
@click.option("--result", help='Outcome: "(done)", "(mid-exec)", "(step-N)" or "(blocked)"; omit to start or continue.')
@click.option("--completed-steps", type=int, help="Steps of the plan completed so far.")
@click.option("--total-steps", type=int, help="Steps in the plan (for the commit message).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def lc_exec(obj: Ctx, module, result, completed_steps, total_steps, as_json) -> None:
    """Start, continue or finish execution (dependencies must be complete)."""
    from . import taskops

    desc = None
    if completed_steps is not None and total_steps:
        desc = f"exec step {completed_steps}/{total_steps} {'done' if result else 'started'}"
    res = taskops.apply(_project(obj), module, "exec", result=result, completed_steps=completed_steps, description=desc)
    _emit(as_json, res, f"TASK/{module}: exec {result or 'started'}; status {res['from']} -> {res['to']}")


@lifecycle.command("commit")
@click.argument("module")
@click.option("--type", "kind", type=click.Choice(["feat", "fix", "refactor"]), required=True)
@click.option("--message", "-m", required=True, help="What changed.")
@click.pass_obj
def lc_commit(obj: Ctx, module, kind, message) -> None:
    """Commit all project changes with the ai-cli-task convention (exec phase)."""
    from . import taskops

    sha = taskops.commit_work(_project(obj), module, kind, message)
    click.echo(f"committed {sha[:10]}: -- ai-cli-task({module}):{kind} {message.strip()}" if sha else "nothing to commit")


@lifecycle.command("merge")
@click.argument("module")
@click.option("--verify", help="Build/test command that must pass after the merge, e.g. 'pytest -q'.")
@click.option("--continue", "cont", is_flag=True, help="Finish a merge whose conflicts you resolved and staged.")
@click.option("--abort", is_flag=True, help="Abandon a merge in progress; the task stays executing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def lc_merge(obj: Ctx, module, verify, cont, abort, as_json) -> None:
    """Merge task/MODULE into its base branch; on success the task is complete and cleaned up."""
    from . import taskops

    res = taskops.merge(_project(obj), module, verify=verify, cont=cont, abort=abort)
    if res["result"] == "success":
        text = f"TASK/{module}: merged into {res['base_branch']}; status complete; removed {', '.join(res['cleaned']) or 'nothing'}"
    elif res.get("aborted"):
        text = f"TASK/{module}: merge aborted; the task stays executing"
    else:
        text = f"TASK/{module}: merge conflict" + (f" in {', '.join(res['conflicts'])}" if res.get("conflicts") else "") + f". {res['next']}"
    _emit(as_json, res, text)
    if res["result"] != "success":
        sys.exit(3)


@lifecycle.command("report")
@click.argument("module")
@click.option("--format", "fmt", type=click.Choice(["full", "summary"]), default="full", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def lc_report(obj: Ctx, module, fmt, as_json) -> None:
    """Write TASK/MODULE/.report.md from the task's files and commit history."""
    from . import taskops

    res = taskops.report(_project(obj), module, fmt)
    _emit(as_json, res, f"TASK/{module}: report written to {res['report']} ({res['commits']} task commits)")


@lifecycle.command("cancel")
@click.argument("module")
@click.option("--reason", default="user cancelled", show_default=True)
@click.option("--cleanup", is_flag=True, help="Also remove the worktree and delete the branch.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def lc_cancel(obj: Ctx, module, reason, cleanup, as_json) -> None:
    """Cancel a task in any status (snapshotting uncommitted changes first)."""
    from . import taskops

    res = taskops.cancel(_project(obj), module, reason, cleanup)
    _emit(as_json, res, res.get("message") or f"TASK/{module}: cancelled ({reason})"
            + (f"; snapshot {res['snapshot'][:10]}" if res.get("snapshot") else "")
            + (f"; removed {', '.join(res['cleaned'])}" if res.get("cleaned") else ""))


@lifecycle.command("annotate")
@click.argument("module")
@click.argument("plan_file")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def lc_annotate(obj: Ctx, module, plan_file, as_json) -> None:
    """Apply TASK/MODULE/.tmp-annotations.json to PLAN_FILE, then delete it."""
    from . import taskops

    res = taskops.annotate(_project(obj), module, plan_file)
    _emit(as_json, res, "\n".join([f"applied {len(res['applied'])} annotation(s) to {plan_file}:"]
                                     + [f"  {a['kind']} at line {a['line']}" for a in res["applied"]]))


@lifecycle.command("status")
@click.argument("module")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def lc_status(obj: Ctx, module, as_json) -> None:
    """Status, phase, dependencies, and the commands the matrix allows now."""
    from . import taskops

    st = taskops.status(_project(obj), module)
    if as_json:
        click.echo(orjson.dumps(st).decode())
        return
    click.echo(f"TASK/{module}: {st['status']}" + (f" (phase {st['phase']})" if st["phase"] else "") + f", {st['completed_steps']} step(s) done")
    click.echo(f"  branch: {st['branch']}" + (f", worktree {st['worktree']}" if st["worktree"] else ""))
    if st["depends_on"]:
        click.echo(f"  depends on: {', '.join(st['depends_on'])}" + (f" (not complete: {', '.join(st['blocking_dependencies'])})" if st["blocking_dependencies"] else ""))
    click.echo(f"  allowed now: {', '.join(st['allowed_commands'])}")
    if st["auto_signal"]:
        click.echo(f"  last signal: {st['auto_signal']}")


@lifecycle.command("stop")
@click.argument("module")
@click.option("--reason", type=click.Choice(["timeout", "max_iterations", "user_stop", "stall_limit"]), default="user_stop", show_default=True)
@click.pass_obj
def lc_stop(obj: Ctx, module, reason) -> None:
    """Ask a running auto loop to stop between steps (writes .auto-stop)."""
    from . import signals, taskops

    mod = taskops.locate(_project(obj), module)
    mod.main_dir.mkdir(parents=True, exist_ok=True)
    signals.write_stop(mod.main_dir, reason)
    click.echo(f"TASK/{module}: stop requested ({reason}); the loop ends after the current step")


@main.command()
@click.argument("module")
@click.option("--step", required=True, type=click.Choice(["plan", "check", "exec", "merge", "report"]))
@click.option("--result", required=True, help="PASS, NEEDS_REVISION, ACCEPT, NEEDS_FIX, REPLAN, BLOCKED, CONTINUE, (generated), (annotations), (done), (mid-exec), (step-N), (blocked), success, conflict")
@click.option("--next", "nxt", required=True, type=click.Choice(["plan", "check", "exec", "merge", "report", "(stop)"]))
@click.option("--checkpoint", default="", type=click.Choice(["", "post-plan", "mid-exec", "post-exec"]))
@click.option("--iteration", type=int, help="The auto loop's iteration (given in its prompt).")
@click.option("--timestamp", help="ISO 8601 (default: now).")
@click.pass_obj
def signal(obj: Ctx, module, step, result, nxt, checkpoint, iteration, timestamp) -> None:
    """Write TASK/MODULE/.auto-signal after a step (validated; main worktree even in worktree mode)."""
    from . import signals, taskops

    mod = taskops.locate(_project(obj), module)
    mod.main_dir.mkdir(parents=True, exist_ok=True)
    sig = signals.write_signal(mod.main_dir, step, result, nxt, checkpoint, iteration, timestamp)
    click.echo(f"signal written: {orjson.dumps(sig).decode()}")


def run() -> None:
    """Console entry point."""
    main(prog_name="loopwright")
