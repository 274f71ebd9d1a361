"""The fleet from the command line: `loopwright submit` puts a loop in the queue,
`loopwright worker` runs this machine's share of it, `loopwright fleet …` shows and steers it.

Every command takes ``--db URL`` (or $LOOPWRIGHT_DATABASE_URL): a ``postgresql://`` URL is a
database the machines of a fleet share; without one, the monitor's own SQLite file is used, for
a fleet of one machine.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import click

from loopwright.cli import fleet_limits, fleet_workers
from loopwright.cli.base import ceiling_options, db_option, echo, echo_json, fail, registry

MODES = ("work", "review", "task")


def limit_options(fn):
    for flag, kind, text in reversed(
        [
            ("--max-iterations", int, "Iterations allowed (default 20)."),
            ("--max-minutes", float, "Minutes of work allowed (default 60), across machines."),
            ("--max-tokens", int, "Input + output tokens allowed."),
            ("--max-dollars", float, "Dollar ceiling for this loop (default 25)."),
            ("--max-prs", int, "PRs the loop may touch (work and review loops)."),
        ]
    ):
        fn = click.option(flag, type=kind, help=text)(fn)
    return fn


def _spec(kind: str, words: tuple, limits: dict, options: dict) -> dict:
    spec: dict = {"limits": {k: v for k, v in limits.items() if v is not None}}
    spec.update({k: v for k, v in options.items() if v is not None})
    if kind == "prompt":
        spec["goal"] = " ".join(words)
    else:
        spec["args"] = list(words[1:])
    return spec


@click.command("submit", context_settings={"ignore_unknown_options": True})
@click.argument("words", nargs=-1, required=True)
@click.option(
    "--repo", required=True, help="The git repository the loop works on (any URL `git clone` takes)."
)
@click.option("--branch", help="The branch to start from (default: the repository's HEAD).")
@click.option("--name", help="The loop's name (default: f-<8 hex>); its branch is loopwright/<name>.")
@click.option(
    "--account", default="default", show_default=True, help="The account whose limits it counts in."
)
@click.option("--tag", "tags", multiple=True, help="A tag for fleet limits and the page; repeatable.")
@limit_options
@click.option("--completion-promise", help='Sentinel text (default "LOOP COMPLETE").')
@click.option("--verify", help="A command that must pass before a completion claim is accepted.")
@click.option("--judge/--no-judge", default=None, help="A small model judges completion claims.")
@click.option("--judge-model", help="The judge's model (default claude-haiku-4-5).")
@click.option("--judge-timeout", type=float, help="Seconds the judge may take (default 120, at most 600).")
@click.option(
    "--wrap-up/--no-wrap-up", default=None, help="A last turn for a handoff when a budget runs out."
)
@click.option("--wrap-up-floor", type=float, help="Share of the dollar/token ceilings kept for the wrap-up.")
@click.option(
    "--gates",
    type=click.Choice(["ask", "continue", "stop"]),
    help="Gate policy: ask (the loop waits for `fleet answer`, the default), or decide unattended.",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 64),
    help="N loops over one backlog (work loops), each item worked by one of them; named <name>-1…N.",
)
@db_option
@click.option(
    "--json", "as_json", is_flag=True, help="Print the queued row as JSON (a list with --parallel)."
)
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the loop to its end, printing its timeline; the exit code is `loopwright run`'s.",
)
def submit(words, repo, branch, name, account, tags, parallel, url, as_json, wait, **rest) -> None:
    """Queue a loop for the fleet. WORDS is a goal, or a mode and its options (`submit work
    --source github …`, as `loopwright run` takes them). A worker whose --allow-repo accepts
    the repository claims it, works on the branch loopwright/<name> and pushes it after every
    iteration. With --parallel N, N work loops share the backlog: the fleet's database gives each
    item to one of them. With --wait, follows the loop (every one with --parallel) until it ends
    and exits as `run` does: 0 done, 2 budget, 3 stalled, 4 stopped, 5 waiting at a gate."""
    from loopwright.core.termsafe import one_line
    from loopwright.fleet import allow
    from loopwright.fleet import spec as specs
    from loopwright.fleet.consent import Takers
    from loopwright.registry import RegistryError

    kind = words[0] if words[0] in MODES else "prompt"
    limits = {k: rest.pop(k) for k in list(rest) if k.startswith("max_")}
    spec = _spec(kind, words, limits, rest)
    if parallel is not None:
        spec["backlog"] = uuid.uuid4().hex  # the N loops' one backlog in the database (registry/items.py)
    names = _names(name, parallel)
    try:
        specs.runner_args(kind, spec)  # what a worker would refuse is refused now
    except specs.SpecError as exc:
        fail(exc.as_option())
    refused = allow.refused(repo)  # a URL no worker ever clones, whatever its allow-list
    if refused:
        fail(
            f"bad repository {one_line(repo)[:200]}: {refused}; give --repo a URL or absolute path git clones"
        )
    reg = registry(url)
    try:
        taken = [n for n in names if n is not None and reg.fleet_loop(n) is not None]
        if taken:
            fail(f"a fleet loop named {taken[0]} exists already: choose another --name")
        unserved = Takers(reg.workers()).unserved(repo, spec, account)
        if unserved and unserved.refuses:
            fail(unserved.line)
        rows = [
            reg.submit(kind=kind, spec=spec, repo=repo, branch=branch, account=account, tags=tags, name=n)
            for n in names
        ]
    except RegistryError as exc:
        fail(str(exc))
    finally:
        reg.close()
    if unserved:
        click.echo(f"loopwright: warning: {unserved.line}", err=True)
    if as_json:
        echo_json(rows if parallel is not None else rows[0])
    else:
        for row in rows:
            where = f"into {reg.shown}: {repo} → branch {row['work_branch']}"
            echo(f"queued fleet loop {row['name']} ({kind}) {where} (id {row['id']})")
    if wait:
        from loopwright.cli.fleet_follow import wait_for_end

        sys.exit(wait_for_end(url, [r["id"] for r in rows], as_json))


def _names(name: str | None, parallel: int | None) -> list:
    """The loops' names: ``name`` for one loop, <name>-1…N for --parallel N (drawn when none)."""
    from loopwright.state.project import is_loop_name

    if parallel is None:
        return [name]
    if name is None:
        return [None] * parallel
    names = [f"{name}-{i}" for i in range(1, parallel + 1)]
    if not all(is_loop_name(n) for n in names):
        rule = "1-64 letters, digits, '-' or '_'"
        fail(f"invalid --name {name!r} for --parallel {parallel}: the name {names[-1]} must be {rule}")
    return names


@click.command("worker")
@db_option
@click.option("--slots", type=click.IntRange(1, 64), default=1, show_default=True, help="Loops at once.")
@click.option(
    "--allow-repo",
    "allow",
    multiple=True,
    metavar="PATTERN",
    help="A repository this worker may clone (a glob: 'https://github.com/acme/*'); repeatable; required.",
)
@click.option(
    "--allow-verify",
    "allow_verify",
    multiple=True,
    metavar="PATTERN",
    help="A loop's --verify command this worker may run (a glob over the whole command: 'make test*'); "
    "repeatable; default none (loops with a verify wait for a worker that allows it).",
)
@click.option("--account", help="Only loops of this account.")
@click.option("--name", help="This worker's name (default: <host>-<random>).")
@click.option("--host", help="The host name shown for it (default: this machine's).")
@click.option(
    "--data", type=click.Path(file_okay=False),
    help="Its workspaces and logs (default: ~/.local/share/loopwright/worker; $XDG_DATA_HOME when set).",
)  # fmt: skip
@click.option("--lease", type=float, default=30.0, show_default=True, help="Seconds a claim holds unrenewed.")
@click.option("--heartbeat", type=float, default=10.0, show_default=True, help="Seconds between renewals.")
@click.option(
    "--poll", type=float, default=5.0, show_default=True, help="Seconds between looks at the queue."
)
@click.option("--claude", "claude_bin", envvar="LOOPWRIGHT_CLAUDE", help="Claude Code's CLI, for every loop.")
@click.option(
    "--claude-arg", "claude_args", multiple=True, help="Passed to claude in every loop; repeatable."
)
@click.option(
    "--notify", "notify", multiple=True, metavar="HOW",
    help="How each loop's runner tells of its end and its gates: desktop, webhook:URL, slack:URL or "
    "command:CMD; repeatable (default: this user's config.json, else the repository's run.notify).",
)  # fmt: skip
@click.option("--runner-arg", "runner_args", multiple=True, hidden=True, help="Passed to `loopwright run`.")
@click.option(
    "--prepare-backoff", type=click.FloatRange(0), default=60.0, hidden=True,
    help="Seconds a loop that could not be prepared waits first (then 4 times that).",
)  # fmt: skip
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Its log on stdout: a line a person reads per event, or one JSON object per event.",
)
def worker(
    url, slots, allow, allow_verify, account, name, host, data, lease, heartbeat, poll, claude_bin,
    claude_args, notify, runner_args, prepare_backoff, log_format,
):  # fmt: skip
    """Run this machine's share of the fleet: claim up to --slots loops whose repository
    --allow-repo accepts (and whose verify command, if any, --allow-verify accepts), drive each
    with the headless runner in a clone under --data, push its branch after every iteration.
    SIGTERM drains (each loop finishes its iteration, then goes back to the queue); a second
    SIGTERM hands every loop back at once."""
    from loopwright.fleet.allow import Allow
    from loopwright.fleet.consent import check_patterns
    from loopwright.fleet.worker import Options, Worker
    from loopwright.registry import RegistryError

    if not allow:
        fail(
            "give --allow-repo PATTERN (repeatable): a worker clones only repositories its allow-list accepts"
        )
    try:
        Allow(list(allow))
    except ValueError as exc:
        fail(f"--allow-repo: {exc}")
    try:
        check_patterns(allow_verify)
    except ValueError as exc:
        fail(f"--allow-verify: {exc}")
    if not 0 < heartbeat < lease:
        fail("--heartbeat must be shorter than --lease (a claim must be renewed before it runs out)")
    claude = _claude(claude_bin)
    _check_notifiers(notify)
    options = [
        "--claude",
        claude,
        *(f"--claude-arg={a}" for a in claude_args),
        *(f"--notify={n}" for n in notify),
    ]
    where = Path(data) if data else _default_data()
    opts = Options(
        slots, list(allow), where, name=name, host=host, account=account, lease=lease, heartbeat=heartbeat,
        poll=poll, runner_options=(*options, *runner_args), allow_verify=allow_verify, log_format=log_format,
        prepare_backoff=prepare_backoff,
    )  # fmt: skip
    reg = registry(url)
    try:
        code = Worker(reg, opts).run()
    except RegistryError as exc:  # its name is taken, or the database went away as it started
        fail(str(exc))
    finally:
        reg.close()
    sys.exit(code)


def _claude(program: str | None) -> str:
    """--claude as the absolute path every loop's runner is given; one line and exit code 2,
    before the worker starts, when it is not there (else every claim would fail the same way)."""
    from loopwright.runner.client import find_program, missing_program

    found = find_program(program or "claude")
    if found is None:
        fail(missing_program(program or "claude"), code=2)
    return found


def _default_data() -> Path:
    from loopwright.serve import token

    return token.data_dir().parent / "worker"


@click.group("fleet")
def fleet() -> None:
    """The fleet's loops: list them, stop or cancel one, answer a gate, read a timeline."""


@fleet.command("ls")
@db_option
@click.option(
    "--status",
    type=click.Choice(["queued", "running", "waiting_gate", "ended"]),
    help="Only the loops with this status.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the loops as JSON: every field of each row, and why a queued one waits (waiting).",
)
@click.option(
    "--watch",
    type=float,
    is_flag=False,
    flag_value=2.0,
    default=None,
    metavar="SECONDS",
    help="Redraw every SECONDS (2 when not given) until Ctrl-C; without a terminal, print each change.",
)
def ls(url, status, as_json, watch) -> None:
    """The fleet's loops, newest first: status, iteration of its ceiling, spend of its dollar
    ceiling, the host that runs it (or ran it last), its outcome or why it waits, its goal and
    repository."""
    if watch is not None and (as_json or watch <= 0):
        fail("--watch takes a number of seconds above 0, and no --json")
    reg = registry(url)
    try:
        from loopwright.cli.fleet_tables import loop_lines, loop_rows

        if watch is not None:
            from loopwright.cli.fleet_follow import watch_loops

            return watch_loops(reg, lambda: loop_lines(reg, status), watch)
        if as_json:
            return echo_json(loop_rows(reg, status))
        for line in loop_lines(reg, status):
            echo(line)
    finally:
        reg.close()


def _check_notifiers(notify) -> None:
    """Every --notify checked before the first claim, not found bad by each loop's runner."""
    from loopwright.core.errors import UserError
    from loopwright.runner import notify as notifiers

    try:
        for spec in notify:
            notifiers.parse(spec)
    except UserError as exc:
        fail(str(exc))


def steer(url: str | None, loop: str, what: str) -> None:
    """Stop or cancel one fleet loop; one line saying what happens next."""
    from loopwright.cli.fleet_steer import steer_one

    steer_one(url, loop, what)


def steer_options(what: str):
    """LOOP, or a filter for every loop it picks, with the confirmation's --yes."""

    def wrap(fn):
        for option in reversed(
            [
                click.argument("loop", required=False),
                click.option(
                    "--status",
                    type=click.Choice(["queued", "running", "waiting_gate"]),
                    help=f"Every loop with this status ({what} many at once).",
                ),
                click.option(
                    "--tag", help=f"Every loop with this tag that has not ended ({what} many at once)."
                ),
                click.option(
                    "--account", help=f"Every loop of this account that has not ended ({what} many at once)."
                ),
                click.option(
                    "--yes", is_flag=True, help="Do not ask for confirmation (needed without a terminal)."
                ),
                db_option,
            ]
        ):
            fn = option(fn)
        return fn

    return wrap


@fleet.command("stop")
@steer_options("stop")
def stop(loop, status, tag, account, yes, url) -> None:
    """Stop fleet loop LOOP as `loopwright stop LOOP` does: its worker ends it at its next Stop,
    with a report; a loop no worker runs ends now. With --status, --tag or --account instead of
    LOOP, every loop they pick, after showing how many and asking (--yes skips the question)."""
    from loopwright.cli.fleet_steer import steer_many

    steer_many(url, "stop", loop, {"status": status, "tag": tag, "account": account}, yes)


@fleet.command("cancel")
@steer_options("cancel")
def cancel(loop, status, tag, account, yes, url) -> None:
    """Cancel fleet loop LOOP for good: its worker ends it CANCELLED at once, without finishing
    the turn under way. With --status, --tag or --account instead of LOOP, every loop they pick,
    after showing how many and asking (--yes skips the question)."""
    from loopwright.cli.fleet_steer import steer_many

    steer_many(url, "cancel", loop, {"status": status, "tag": tag, "account": account}, yes)


@fleet.command("answer")
@click.argument("loop")
@click.argument("answer")
@db_option
@ceiling_options(
    "With raise at the budget-escalation gate: the new {} ceiling (default: half as much again)."
)
def answer(loop, answer, url, **raise_to) -> None:
    """Answer the gate fleet loop LOOP waits at with ANSWER, one of the gate's options (`fleet ls`
    and `fleet events` show them). raise at the budget-escalation gate raises the ceilings it asks
    about to the --max-* given, or each by half as much again. The answer goes into the loop's
    timeline with who gave it (user@host), and the loop goes on with the next worker that claims it."""
    from loopwright.cli.fleet_steer import answer_gate

    answer_gate(url, loop, answer, raise_to)


@fleet.command("events")
@click.argument("loop")
@db_option
@click.option(
    "--json", "as_json", is_flag=True, help="Print the events as JSON (one list; with --follow, a line each)."
)
@click.option(
    "--follow", is_flag=True, help="Go on printing events as they come until the loop ends (or Ctrl-C)."
)
def events(loop, url, as_json, follow) -> None:
    """Fleet loop LOOP's timeline, oldest first: claims (and failovers), iterations, errors of its
    client or worker, releases, requests, gate answers and its end, each with its time (UTC),
    host and claim (g<generation>) and why."""
    reg = registry(url)
    try:
        row = reg.fleet_loop(loop)
        if row is not None and follow:
            from loopwright.cli.fleet_follow import follow_loops

            follow_loops(reg, [row["id"]], as_json)
            return
        found = reg.events(row["id"]) if row else None
    finally:
        reg.close()
    if row is None:
        fail(f"no fleet loop {loop!r}")
    if as_json:
        return echo_json(found)
    from loopwright.core.eventlines import lines

    for text in lines(found):
        echo(text)


fleet.add_command(fleet_limits.limits)
fleet.add_command(fleet_workers.workers)

COMMANDS = (submit, worker, fleet)
