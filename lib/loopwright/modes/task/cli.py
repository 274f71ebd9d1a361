"""Task mode's commands: `loopwright lifecycle` (every status change of a TASK/ module,
checked against the state x command matrix) and `loopwright signal` (the auto loop's
per-step signal). The CLI adds them through the mode registry."""

from __future__ import annotations

import sys

import click

from loopwright.cli.base import Ctx, echo, echo_json, emit
from loopwright.core import jsoncodec, termsafe


@click.group()
def lifecycle() -> None:
    """ai-cli-task modules under TASK/: every status change, validated against the state x command matrix."""


@lifecycle.command("init")
@click.argument("module")
@click.option("--title", default="", help="Human-readable title.")
@click.option("--tags", default="", help="Comma-separated tags.")
@click.option(
    "--worktree", is_flag=True, help="Work in .worktrees/task-<module> instead of switching this checkout."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def lc_init(obj: Ctx, module, title, tags, worktree, as_json) -> None:
    """Create TASK/MODULE (status draft), its branch task/MODULE, and commit."""
    from loopwright.modes.task.ops.init import init

    res = init(obj.project_dir, module, title, [t.strip() for t in tags.split(",") if t.strip()], worktree)
    where = f" in worktree {res['worktree']}" if res["worktree"] else ""
    emit(
        as_json,
        res,
        f"TASK/{module} created (draft) on branch {res['branch']}{where}; fill in {res['dir']}/.target.md",
    )


@lifecycle.command("plan")
@click.argument("module")
@click.option(
    "--annotations", is_flag=True, help="The plan run processed annotations (instead of generating a plan)."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def lc_plan(obj: Ctx, module, annotations, as_json) -> None:
    """Record a plan run of TASK/MODULE: draft/blocked -> planning, review/executing -> re-planning."""
    from loopwright.modes.task.ops.transition import apply

    res = apply(obj.project_dir, module, "plan", result="(annotations)" if annotations else "(generated)")
    emit(
        as_json,
        res,
        f"TASK/{module}: plan recorded; status {res['from']} -> {res['to']}"
        + (f" (phase {res['phase']})" if res["phase"] else ""),
    )


@lifecycle.command("check")
@click.argument("module")
@click.option(
    "--checkpoint",
    type=click.Choice(["post-plan", "mid-exec", "post-exec"]),
    required=True,
    help="Which check this is: after the plan, during execution or after it.",
)
@click.option(
    "--result",
    required=True,
    help="post-plan: PASS|NEEDS_REVISION|BLOCKED; mid-exec: CONTINUE|NEEDS_FIX|REPLAN|BLOCKED;"
    " post-exec: ACCEPT|NEEDS_FIX|REPLAN",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def lc_check(obj: Ctx, module, checkpoint, result, as_json) -> None:
    """Record a check verdict on TASK/MODULE and its status change."""
    from loopwright.modes.task.ops.transition import apply

    res = apply(obj.project_dir, module, "check", checkpoint=checkpoint, result=result)
    emit(
        as_json,
        res,
        f"TASK/{module}: check {checkpoint} {result}; status {res['from']} -> {res['to']}"
        + (f"\nwarning: {res['warning']}" if res.get("warning") else ""),
    )


@lifecycle.command("exec")
@click.argument("module")
@click.option(
    "--result", help='Outcome: "(done)", "(mid-exec)", "(step-N)" or "(blocked)"; omit to start or continue.'
)
@click.option("--completed-steps", type=int, help="Steps of the plan completed so far.")
@click.option("--total-steps", type=int, help="Steps in the plan (for the commit message).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def lc_exec(obj: Ctx, module, result, completed_steps, total_steps, as_json) -> None:
    """Start, continue or finish the execution of TASK/MODULE (dependencies must be complete)."""
    from loopwright.modes.task.ops.transition import apply

    desc = None
    if completed_steps is not None and total_steps:
        desc = f"exec step {completed_steps}/{total_steps} {'done' if result else 'started'}"
    res = apply(
        obj.project_dir, module, "exec", result=result, completed_steps=completed_steps, description=desc
    )
    emit(as_json, res, f"TASK/{module}: exec {result or 'started'}; status {res['from']} -> {res['to']}")


@lifecycle.command("commit")
@click.argument("module")
@click.option(
    "--type",
    "kind",
    type=click.Choice(["feat", "fix", "refactor"]),
    required=True,
    help="The commit's kind in the convention: a feature, a fix or a refactoring.",
)
@click.option("--message", "-m", required=True, help="What changed.")
@click.pass_obj
def lc_commit(obj: Ctx, module, kind, message) -> None:
    """Commit all project changes for TASK/MODULE with the ai-cli-task convention (exec phase)."""
    from loopwright.modes.task.ops.commit import commit_work

    sha = commit_work(obj.project_dir, module, kind, message)
    echo(
        f"committed {sha[:10]}: -- ai-cli-task({module}):{kind} {message.strip()}"
        if sha
        else "nothing to commit"
    )


@lifecycle.command("merge")
@click.argument("module")
@click.option("--verify", help="Build/test command that must pass after the merge, e.g. 'pytest -q'.")
@click.option(
    "--continue", "cont", is_flag=True, help="Finish a merge whose conflicts you resolved and staged."
)
@click.option("--abort", is_flag=True, help="Abandon a merge in progress; the task stays executing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def lc_merge(obj: Ctx, module, verify, cont, abort, as_json) -> None:
    """Merge task/MODULE into its base branch; on success the task is complete and cleaned up."""
    from loopwright.modes.task.ops.merge import merge

    res = merge(obj.project_dir, module, verify=verify, cont=cont, abort=abort)
    if res["result"] == "success":
        removed = ", ".join(res["cleaned"]) or "nothing"
        text = f"TASK/{module}: merged into {res['base_branch']}; status complete; removed {removed}"
    elif res.get("aborted"):
        text = f"TASK/{module}: merge aborted; the task stays executing"
    else:
        text = (
            f"TASK/{module}: merge conflict"
            + (f" in {', '.join(res['conflicts'])}" if res.get("conflicts") else "")
            + f". {res['next']}"
        )
    emit(as_json, res, text)
    if res["result"] != "success":
        sys.exit(3)


@lifecycle.command("report")
@click.argument("module")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["full", "summary"]),
    default="full",
    show_default=True,
    help="The whole report, or a short summary.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def lc_report(obj: Ctx, module, fmt, as_json) -> None:
    """Write TASK/MODULE/.report.md from the task's files and commit history."""
    from loopwright.modes.task.ops.report import report

    res = report(obj.project_dir, module, fmt)
    emit(as_json, res, f"TASK/{module}: report written to {res['report']} ({res['commits']} task commits)")


@lifecycle.command("cancel")
@click.argument("module")
@click.option("--reason", default="user cancelled", show_default=True, help="Why, for the task's record.")
@click.option("--cleanup", is_flag=True, help="Also remove the worktree and delete the branch.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def lc_cancel(obj: Ctx, module, reason, cleanup, as_json) -> None:
    """Cancel TASK/MODULE in any status (snapshotting uncommitted changes first)."""
    from loopwright.modes.task.ops.cancel import cancel

    res = cancel(obj.project_dir, module, reason, cleanup)
    emit(
        as_json,
        res,
        res.get("message")
        or f"TASK/{module}: cancelled ({reason})"
        + (f"; snapshot {res['snapshot'][:10]}" if res.get("snapshot") else "")
        + (f"; removed {', '.join(res['cleaned'])}" if res.get("cleaned") else ""),
    )


@lifecycle.command("annotate")
@click.argument("module")
@click.argument("plan_file")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def lc_annotate(obj: Ctx, module, plan_file, as_json) -> None:
    """Apply TASK/MODULE/.tmp-annotations.json to PLAN_FILE, then delete it."""
    from loopwright.modes.task.ops.annotate import annotate

    res = annotate(obj.project_dir, module, plan_file)
    emit(
        as_json,
        res,
        "\n".join(
            [f"applied {len(res['applied'])} annotation(s) to {plan_file}:"]
            + [f"  {a['kind']} at line {a['line']}" for a in res["applied"]]
        ),
    )


@lifecycle.command("status")
@click.argument("module")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def lc_status(obj: Ctx, module, as_json) -> None:
    """TASK/MODULE's status, phase, dependencies, and the commands the matrix allows now."""
    from loopwright.modes.task.ops.status import status

    st = status(obj.project_dir, module)
    if as_json:
        echo_json(st)
        return
    echo(
        f"TASK/{module}: {st['status']}"
        + (f" (phase {st['phase']})" if st["phase"] else "")
        + f", {st['completed_steps']} step(s) done"
    )
    echo(f"  branch: {st['branch']}" + (f", worktree {st['worktree']}" if st["worktree"] else ""))
    if st["depends_on"]:
        echo(
            f"  depends on: {', '.join(st['depends_on'])}"
            + (
                f" (not complete: {', '.join(st['blocking_dependencies'])})"
                if st["blocking_dependencies"]
                else ""
            )
        )
    echo(f"  allowed now: {', '.join(st['allowed_commands'])}")
    if st["auto_signal"]:
        echo(f"  last signal: {st['auto_signal']}")


@lifecycle.command("stop")
@click.argument("module")
@click.option(
    "--reason",
    type=click.Choice(["timeout", "max_iterations", "user_stop", "stall_limit"]),
    default="user_stop",
    show_default=True,
    help="The reason recorded in .auto-stop (the auto loop ends STOPPED with it).",
)
@click.pass_obj
def lc_stop(obj: Ctx, module, reason) -> None:
    """Ask TASK/MODULE's running auto loop to stop between steps (writes .auto-stop)."""
    from loopwright.modes.task import signals
    from loopwright.modes.task.ops.taskmodule import locate

    mod = locate(obj.project_dir, module)
    mod.main_dir.mkdir(parents=True, exist_ok=True)
    signals.write_stop(mod.main_dir, reason)
    echo(f"TASK/{module}: stop requested ({reason}); the loop ends after the current step")


@click.command()
@click.argument("module")
@click.option(
    "--step",
    required=True,
    type=click.Choice(["plan", "check", "exec", "merge", "report"]),
    help="The step just done.",
)
@click.option(
    "--result",
    required=True,
    help="PASS, NEEDS_REVISION, ACCEPT, NEEDS_FIX, REPLAN, BLOCKED, CONTINUE, (generated), (annotations),"
    " (done), (mid-exec), (step-N), (blocked), success, conflict",
)
@click.option(
    "--next",
    "nxt",
    required=True,
    type=click.Choice(["plan", "check", "exec", "merge", "report", "(stop)"]),
    help="The step the auto loop takes next, or (stop).",
)
@click.option(
    "--checkpoint",
    default="",
    type=click.Choice(["", "post-plan", "mid-exec", "post-exec"]),
    help="The check's checkpoint, for a check step.",
)
@click.option("--iteration", type=int, help="The auto loop's iteration (given in its prompt).")
@click.option("--timestamp", help="ISO 8601 (default: now).")
@click.pass_obj
def signal(obj: Ctx, module, step, result, nxt, checkpoint, iteration, timestamp) -> None:
    """Write TASK/MODULE/.auto-signal after a step (validated; main worktree even in worktree mode)."""
    from loopwright.modes.task import signals
    from loopwright.modes.task.ops.taskmodule import locate

    mod = locate(obj.project_dir, module)
    mod.main_dir.mkdir(parents=True, exist_ok=True)
    sig = signals.write_signal(mod.main_dir, step, result, nxt, checkpoint, iteration, timestamp)
    echo("signal written: " + termsafe.clean_json(jsoncodec.dumps(sig).decode()))


COMMANDS = (lifecycle, signal)
