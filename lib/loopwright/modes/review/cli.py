"""`loopwright review wait|merge`: what the agent runs inside a review loop."""

from __future__ import annotations

import click

from loopwright.actions import pick, reports
from loopwright.cli.base import Ctx, echo, env_session, fail
from loopwright.modes.review import pr as prs
from loopwright.modes.review import watch
from loopwright.state import loops

MAX_WAIT = 540.0  # under the Bash tool's 10-minute ceiling
EXIT_NOT_MERGED = 3


def _loop(obj: Ctx, name: str | None) -> tuple[loops.LoopPaths, dict, dict]:
    paths = pick.pick_loop(obj.state, name, env_session())
    loop = pick.config(paths)
    if not isinstance(loop.get("review"), dict):
        raise loops.LoopError(f"loop {paths.name} is not a review loop")
    budget = loops.read_state(paths.configured(loop), "budget", move_corrupt=False) or {}
    return paths, loop, budget.get("mode_state") or {}


@click.group()
def review() -> None:
    """Review loops: wait for the watched PR to move, merge it."""


@review.command("wait")
@click.option(
    "--max-wait", type=click.FloatRange(0, 3600), default=MAX_WAIT, show_default=True, help="Seconds at most."
)
@click.option(
    "--poll",
    type=click.FloatRange(0.1, 600),
    default=60.0,
    show_default=True,
    help="Seconds between readings.",
)
@click.option("--loop", "name", help="The loop (default: this session's).")
@click.pass_obj
def wait_cmd(obj: Ctx, max_wait: float, poll: float, name: str | None) -> None:
    """Wait until the PR gets new commits, reviews or comments, finished CI or a new state."""
    paths, loop, st = _loop(obj, name)
    baseline = {"head": st.get("wait_head"), "activity": st.get("wait_activity"), "ci": st.get("wait_ci")}
    changed, view = watch.wait(loop["review"], baseline, max_wait, poll, busy=paths.busy)
    watch.write_marker(paths.dir, watch.WAIT_FILE, {"changed": changed, "head": view.head})
    if changed:
        echo(f"loopwright: {changed}. End your turn now; loopwright decides what comes next.")
    else:
        echo(f"loopwright: PR #{view.number} did not move in {max_wait:g} s. End your turn now.")


@review.command("merge")
@click.option("--loop", "name", help="The loop (default: this session's).")
@click.pass_obj
def merge_cmd(obj: Ctx, name: str | None) -> None:
    """Merge the watched PR if it is ready (after human feedback was addressed: once the user approved)."""
    paths, loop, st = _loop(obj, name)
    cfg = loop["review"]
    view = watch.read(cfg)
    if view.problem:
        fail(view.problem)
    refusal = _refusal(view, cfg)
    if refusal:
        fail(refusal, code=EXIT_NOT_MERGED)
    humans = prs.human_feedback_addressed(view, st.get("last_end_sha"))
    if humans and st.get("merge_ok_sha") != view.head:
        watch.write_marker(paths.dir, watch.MERGE_FILE, {"sha": view.head, "humans": humans})
        fail(
            "not merged: since the previous iteration you addressed feedback from "
            f"{', '.join(humans)}, so the "
            "user decides first (the post-feedback-merge gate). End your turn now; loopwright asks.",
            code=EXIT_NOT_MERGED,
        )
    reports.record_report(
        obj.state, paths.name, env_session(), {"outcome": "success", "merges": 1, "item": f"#{view.number}"}
    )
    message = watch.merge(cfg, view.head)
    echo(f"loopwright: PR #{view.number} merged at {view.head[:12]} ({message}). End your turn.")


def _refusal(view: prs.PrView, cfg: dict) -> str | None:
    end = prs.terminal(view, cfg.get("hold_label") or "")
    if end:
        return f"PR #{view.number} is {end}; nothing to merge"
    if not prs.ci_green(view):
        running = prs.ci_running(view)
        return f"not merged: CI is {'still running' if running else 'not green'} on PR #{view.number}"
    return None


COMMANDS = (review,)
