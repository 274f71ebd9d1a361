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

from loopwright.cli import fleet_limits
from loopwright.cli.base import echo, echo_json, fail, registry

MODES = ("work", "review", "task")


def db_option(fn):
    return click.option(
        "--db",
        "url",
        envvar="LOOPWRIGHT_DATABASE_URL",
        metavar="URL",
        help="The fleet's database: postgresql://… (default: the monitor's SQLite file, one machine).",
    )(fn)


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
@click.option(
    "--wrap-up/--no-wrap-up", default=None, help="A last turn for a handoff when a budget runs out."
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
def submit(words, repo, branch, name, account, tags, parallel, url, as_json, **rest) -> None:
    """Queue a loop for the fleet. WORDS is a goal, or a mode and its options (`submit work
    --source github …`, as `loopwright run` takes them). A worker whose --allow-repo accepts
    the repository claims it, works on the branch loopwright/<name> and pushes it after every
    iteration. With --parallel N, N work loops share the backlog: the fleet's database gives each
    item to one of them."""
    from loopwright.core.termsafe import one_line
    from loopwright.fleet import allow
    from loopwright.fleet import spec as specs
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
        fail(str(exc))
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
        rows = [
            reg.submit(kind=kind, spec=spec, repo=repo, branch=branch, account=account, tags=tags, name=n)
            for n in names
        ]
        unserved = _unserved(reg.workers(), account)
    except RegistryError as exc:
        fail(str(exc))
    finally:
        reg.close()
    if unserved:
        click.echo(f"loopwright: warning: {unserved}", err=True)
    if as_json:
        return echo_json(rows if parallel is not None else rows[0])
    for row in rows:
        where = f"on {repo} → branch {row['work_branch']}"
        echo(f"queued fleet loop {row['name']} ({kind}) {where} (id {row['id']})")


def _unserved(workers: list[dict], account: str) -> str | None:
    """Why no worker would claim a loop of ``account`` now (it waits in the queue), or None.
    Workers seen in the last ten minutes count; one started without --account takes any."""
    live = [w for w in workers if float(w.get("age") or 0) < 600]
    if not live:
        return "no worker has been seen in the last ten minutes: the loop waits until one starts"
    if any(w.get("account") in (None, account) for w in live):
        return None
    served = ", ".join(sorted({str(w["account"]) for w in live}))
    return (
        f"no worker runs account {account}'s loops (the workers take: {served}): the loop waits "
        f"until a worker starts with --account {account} or without --account"
    )


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
@click.option("--account", help="Only loops of this account.")
@click.option("--name", help="This worker's name (default: <host>-<random>).")
@click.option("--host", help="The host name shown for it (default: this machine's).")
@click.option("--data", type=click.Path(file_okay=False), help="Its workspaces and logs.")
@click.option("--lease", type=float, default=30.0, show_default=True, help="Seconds a claim holds unrenewed.")
@click.option("--heartbeat", type=float, default=10.0, show_default=True, help="Seconds between renewals.")
@click.option(
    "--poll", type=float, default=5.0, show_default=True, help="Seconds between looks at the queue."
)
@click.option("--claude", "claude_bin", envvar="LOOPWRIGHT_CLAUDE", help="Claude Code's CLI, for every loop.")
@click.option(
    "--claude-arg", "claude_args", multiple=True, help="Passed to claude in every loop; repeatable."
)
@click.option("--runner-arg", "runner_args", multiple=True, hidden=True, help="Passed to `loopwright run`.")
def worker(
    url, slots, allow, account, name, host, data, lease, heartbeat, poll, claude_bin, claude_args, runner_args
):
    """Run this machine's share of the fleet: claim up to --slots loops whose repository
    --allow-repo accepts, drive each with the headless runner in a clone under --data, push its
    branch after every iteration. SIGTERM drains (each loop finishes its iteration, then goes
    back to the queue); a second SIGTERM hands every loop back at once."""
    from loopwright.fleet.allow import Allow
    from loopwright.fleet.worker import Options, Worker

    if not allow:
        fail(
            "give --allow-repo PATTERN (repeatable): a worker clones only repositories its allow-list accepts"
        )
    try:
        Allow(list(allow))
    except ValueError as exc:
        fail(f"--allow-repo: {exc}")
    if not 0 < heartbeat < lease:
        fail("--heartbeat must be shorter than --lease (a claim must be renewed before it runs out)")
    claude = _claude(claude_bin)
    options = ["--claude", claude, *(f"--claude-arg={a}" for a in claude_args)]
    where = Path(data) if data else _default_data()
    opts = Options(
        slots, list(allow), where, name=name, host=host, account=account, lease=lease, heartbeat=heartbeat,
        poll=poll, runner_options=(*options, *runner_args),
    )  # fmt: skip
    reg = registry(url)
    try:
        code = Worker(reg, opts).run()
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
@click.option("--status", type=click.Choice(["queued", "running", "waiting_gate", "ended"]))
@click.option("--json", "as_json", is_flag=True)
def ls(url, status, as_json) -> None:
    """The fleet's loops, newest first."""
    from loopwright.core.termsafe import one_line

    reg = registry(url)
    try:
        rows = reg.fleet_loops(status)
    finally:
        reg.close()
    if as_json:
        return echo_json(rows)
    from loopwright.serve.fleetwatch import first_line, goal_of

    for r in rows:
        where = f" on {one_line(r['host'] or '')}" if r.get("worker") else ""
        echo(
            f"{r['name']:<14} {r['status']:<12} it {r['iteration']:<4} ${float(r['dollars'] or 0):.2f} "
            f"{one_line(r['outcome'] or '')}{where}  {one_line(first_line(goal_of(r)))[:60]}  "
            f"({one_line(r['repo'])[:50]}){_why(r)}"
        )


def _why(r: dict) -> str:
    """Why a loop failed, waits in the queue again, or had trouble, shortened: an ended loop
    that did not finish its work says the reason it ended, then its last client or worker
    error (when the reason does not hold it); a queued one why it was handed back."""
    from loopwright.core.recovery import FINISHED
    from loopwright.core.termsafe import one_line

    reason = r.get("reason") if isinstance(r.get("reason"), str) else ""
    error = r.get("last_error") if isinstance(r.get("last_error"), str) else ""
    if r["status"] == "ended" and r.get("outcome") in FINISHED:
        return ""
    shown = [reason] if reason and r["status"] in ("ended", "queued") else []
    if error and error not in reason:
        shown.append(f"last error: {error}")
    return f"  — {one_line('; '.join(shown))[:160]}" if shown else ""


@fleet.command("workers")
@db_option
@click.option("--json", "as_json", is_flag=True)
def workers(url, as_json) -> None:
    """The fleet's workers: host, slots used, account and seconds since each last beat."""
    from loopwright.core.termsafe import one_line

    reg = registry(url)
    try:
        rows = reg.workers()
    finally:
        reg.close()
    if as_json:
        return echo_json(rows)
    for r in rows:
        echo(
            f"{one_line(r['worker']):<24} {one_line(r['host']):<16} {r['used']}/{r['slots']} slots "
            f"beat {float(r['age']):.0f}s ago  account {one_line(r['account'] or 'any')}"
        )


def _steer(url: str | None, loop: str, what: str) -> None:
    reg = registry(url)
    try:
        row = reg.request(loop, what)
    finally:
        reg.close()
    if row is None:
        fail(f"no fleet loop {loop!r}: `loopwright fleet ls` lists them")
    if row["status"] == "ended":
        echo(f"{row['name']}: {row['outcome']}")
    else:
        echo(f"{row['name']}: its worker was asked to {what} it (within about a second)")


@fleet.command("stop")
@click.argument("loop")
@db_option
def stop(loop, url) -> None:
    """Stop a fleet loop as `loopwright stop` would: at its next Stop, with a report."""
    _steer(url, loop, "stop")


@fleet.command("cancel")
@click.argument("loop")
@db_option
def cancel(loop, url) -> None:
    """Cancel a fleet loop for good."""
    _steer(url, loop, "cancel")


@fleet.command("answer")
@click.argument("loop")
@click.argument("answer")
@db_option
def answer(loop, answer, url) -> None:
    """Answer the gate a fleet loop waits at; it goes on with the next worker that claims it."""
    reg = registry(url)
    try:
        row = reg.answer_gate(loop, answer, "cli")
    finally:
        reg.close()
    if row is None:
        fail(f"no gate waits in fleet loop {loop!r}")
    echo(f"{row['name']}: answered {answer!r}; queued again")


@fleet.command("events")
@click.argument("loop")
@db_option
@click.option("--json", "as_json", is_flag=True)
def events(loop, url, as_json) -> None:
    """A fleet loop's timeline, oldest first: claims (and failovers), iterations, errors of its
    client or worker, releases, requests, gate answers and its end, each with its time (UTC),
    host and claim (g<generation>) and why."""
    from loopwright.core.eventlines import lines

    reg = registry(url)
    try:
        row = reg.fleet_loop(loop)
        found = reg.events(row["id"]) if row else None
    finally:
        reg.close()
    if row is None:
        fail(f"no fleet loop {loop!r}")
    if as_json:
        return echo_json(found)
    for text in lines(found):
        echo(text)


fleet.add_command(fleet_limits.limits)

COMMANDS = (submit, worker, fleet)
