"""`loopwright report`: the agent tells the loop what this iteration did (outcome, PRs,
comments, root cause); the next Stop folds it into the budget and the history."""

from __future__ import annotations

import click

from loopwright.actions import reports
from loopwright.cli.base import Ctx, echo, echo_json, env_session


@click.command("report")
@click.option(
    "--outcome", type=click.Choice(list(reports.OUTCOMES)), required=True, help="How this iteration went."
)
@click.option(
    "--pr", "prs", multiple=True, help="A PR this iteration touched (142 or #142); repeat for several."
)
@click.option("--comments", type=int, help="Review comments and replies pushed.")
@click.option("--merges", type=int, help="Merge API calls attempted.")
@click.option("--agents", type=int, help="Workers/reviewers/responders dispatched.")
@click.option(
    "--root-cause",
    help="Why it failed (required with --outcome failure);"
    " the same cause twice in a row fires the repeated-failure gate.",
)
@click.option("--item", help="The issue or PR the outcome is about, e.g. #44.")
@click.option("--external-error", help="An external service error, e.g. 'qmd-unreachable'.")
@click.option(
    "--exit-code",
    type=int,
    help="Exit code of the wrapped command (78 means the external service was unreachable).",
)
@click.option(
    "--tracked-pr",
    "tracked",
    multiple=True,
    metavar="N:BRANCH:START_SHA:END_SHA:STATE",
    help="A PR's state for the resume contract; repeatable.",
)
@click.option(
    "--worktree",
    "worktrees",
    multiple=True,
    metavar="PATH:BRANCH:SHA",
    help="A worktree this iteration left on disk; repeatable.",
)
@click.option("--task", help="The task these tokens belong to (token ledger).")
@click.option("--note", help="Free text for the journal.")
@click.option("--loop", "name", help="The loop (default: this session's).")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded entry as JSON.")
@click.pass_obj
def report_cmd(
    obj: Ctx,
    outcome,
    prs,
    comments,
    merges,
    agents,
    root_cause,
    item,
    external_error,
    exit_code,
    tracked,
    worktrees,
    task,
    note,
    name,
    as_json,
) -> None:
    """Report what this iteration did; the next Stop folds it into the budget and history."""
    entry = {
        "outcome": outcome,
        "prs": [reports.parse_pr(p) for p in prs],
        "comments": comments,
        "merges": merges,
        "agents": agents,
        "root_cause": root_cause,
        "item": item,
        "external_error": external_error,
        "exit_code": exit_code,
        "tracked_prs": [reports.parse_tracked_pr(t) for t in tracked],
        "worktrees": [reports.parse_worktree(w) for w in worktrees] if worktrees else None,
        "task": task,
        "note": note,
    }
    paths, record = reports.record_report(obj.state, name, env_session(), entry)
    if as_json:
        echo_json(record)
    else:
        echo(
            f"loopwright: iteration {record['iteration']} report recorded for loop {paths.name};"
            " it is counted when this turn ends."
        )


COMMANDS = (report_cmd,)
