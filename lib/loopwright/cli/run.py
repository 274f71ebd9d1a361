"""`loopwright run`: a loop in a headless Claude Code client, kept going until it ends."""

from __future__ import annotations

import os
import sys

import click

from loopwright.actions import start as starting
from loopwright.cli.base import Ctx, echo, echo_json, fail
from loopwright.core.errors import UserError
from loopwright.runner import notify as notifiers
from loopwright.runner import run as runner
from loopwright.runner.client import find_program, missing_program
from loopwright.state import plugindir


class Reporter:
    """Events as JSON lines (--json); otherwise one line each, and on a terminal one live
    progress line rewritten in place."""

    def __init__(self, as_json: bool, tty: bool):
        self.as_json, self.tty = as_json, tty
        self.live = False
        self.last_iteration = None

    def __call__(self, event: str, **fields) -> None:
        if self.as_json:
            echo_json({"event": event, **fields})
            return
        if event == "progress":
            self._progress(fields)
            return
        if event in ("client", "turn_end"):
            return
        self._clear()
        detail = " · ".join(f"{k} {v}" for k, v in fields.items() if v not in (None, "", []))
        echo(f"loopwright run: {event.replace('_', ' ')}" + (f": {detail}" if detail else ""))

    def _progress(self, p: dict) -> None:
        if p.get("iteration") is None:
            return
        money = f"${p.get('dollars_estimate') or 0:,.2f}" + (
            f"/${float(p['max_dollars']):,.2f}" if p.get("max_dollars") else ""
        )
        line = (
            f"iteration {p['iteration']}/{p.get('max_iterations')} · "
            f"{p.get('minutes_elapsed') or 0:.1f}/{p.get('max_minutes')} min · {money}"
            + (f" · {p['last_reason']}" if p.get("last_reason") else "")
        )
        if self.tty:
            click.echo("\r\x1b[2K" + line[:160], nl=False)
            self.live = True
        elif p["iteration"] != self.last_iteration:
            echo(f"loopwright run: {line}")
        self.last_iteration = p["iteration"]

    def _clear(self) -> None:
        if self.live:
            click.echo("\r\x1b[2K", nl=False)
            self.live = False


@click.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("prompt", nargs=-1)
@click.option("--loop", "loop_name", help="Drive this existing loop (any mode) instead of starting one.")
@click.option("--session", "session_id", help="The session id to run under (default: a new one).")
@click.option("--max-iterations", type=int, help="Iterations allowed (default: 20).")
@click.option("--max-minutes", type=float, help="Wall-clock minutes allowed (default: 60).")
@click.option("--max-tokens", type=int, help="Input + output tokens allowed.")
@click.option(
    "--max-dollars", type=float, help="Dollar ceiling (default 25; 0 tracks spend without a limit)."
)
@click.option(
    "--accept-project-rates",
    is_flag=True,
    default=None,
    help="Count the project's CLAUDE.md rates even where they are below the built-in ones.",
)
@click.option(
    "--wrap-up/--no-wrap-up",
    default=None,
    help="When a budget runs out, give the agent one last turn to write handoff.md (default: on).",
)
@click.option("--wrap-up-floor", type=float, help="Share of the dollar/token ceilings kept for the wrap-up.")
@click.option("--judge/--no-judge", default=None, help="A small model judges completion claims (no tools).")
@click.option("--judge-model", help="The judge's model (default claude-haiku-4-5).")
@click.option("--judge-timeout", type=float, help="Seconds the judge may take (default 120).")
@click.option("--completion-promise", help='Sentinel text (default "LOOP COMPLETE").')
@click.option("--verify", help="A command that must pass before a completion claim is accepted.")
@click.option("--name", help="Loop name (default: the mode, made unique).")
@click.option("--gates", "gate_policy", type=click.Choice(["ask", "continue", "stop"]), help="Gate policy.")
@click.option(
    "--claude",
    "claude_bin",
    envvar="LOOPWRIGHT_CLAUDE",
    default="claude",
    show_default=True,
    help="Claude Code's CLI to run (a path, or a name on PATH; also $LOOPWRIGHT_CLAUDE).",
)
@click.option("--claude-arg", "claude_args", multiple=True, help="Passed to claude as is; repeatable.")
@click.option(
    "--plugin-dir",
    help="Load loopwright's plugin from here (default: this checkout, or the copy installed with the "
    "package; none when Claude Code already has loopwright enabled).",
)
@click.option(
    "--poll-seconds", type=float, default=60.0, show_default=True, help="How often progress is checked."
)
@click.option("--stall-polls", type=int, default=3, show_default=True, help="Quiet polls that make a stall.")
@click.option(
    "--quota-wait", type=float, default=60.0, show_default=True, help="First wait on a usage limit (doubles)."
)
@click.option(
    "--notify",
    "notify",
    multiple=True,
    metavar="HOW",
    help="desktop, webhook:URL, slack:URL or command:CMD; repeatable. Also .loopwright.json's run.notify.",
)
@click.option("--json", "as_json", is_flag=True, help="Print events as JSON lines.")
@click.option(
    "--carry",
    "carry_file",
    type=click.Path(dir_okay=False, exists=True),
    hidden=True,
    help="A fleet worker's JSON {counters, handoff}: the new loop goes on from them (actions/carry.py).",
)
@click.option(
    "--fleet-items",
    "fleet_items",
    type=click.Path(dir_okay=False),
    hidden=True,
    help="A fleet worker's JSON list of the backlog items this loop holds (actions/fleetitems.py).",
)
@click.pass_obj
def run(
    obj: Ctx,
    prompt,
    loop_name,
    session_id,
    claude_bin,
    claude_args,
    plugin_dir,
    poll_seconds,
    stall_polls,
    quota_wait,
    notify,
    as_json,
    carry_file,
    fleet_items,
    **limits,
):
    """Run a loop unattended in a headless Claude Code client until it ends. PROMPT is a goal,
    a loopwright command line of any mode (e.g. "/loopwright:task auto demo"), or a mode and
    its options (e.g. `loopwright run work --source github --max-prs 5`). The exit code tells
    the outcome (0 done, 2 budget, 3 stalled, 4 stopped, 5 waiting for you)."""
    found = find_program(claude_bin)
    if not found:
        fail(missing_program(claude_bin))
    if poll_seconds <= 0 or stall_polls < 1 or quota_wait <= 0:
        fail("--poll-seconds and --quota-wait must be more than 0, --stall-polls at least 1")
    # The judge (state/judging.py), run from the client's Stop hook, uses this same CLI.
    os.environ["LOOPWRIGHT_CLAUDE"] = found
    if plugin_dir is None and not runner.plugin_enabled_in_claude():
        plugin_dir = str(plugindir.root())
    if plugindir.packaged() and not os.environ.get("LOOPWRIGHT_PYTHON"):
        # Installed by pip or pipx: the plugin's hooks run with this interpreter, which has
        # loopwright's packages (else its SessionStart hook would build a venv from the network).
        os.environ["LOOPWRIGHT_PYTHON"] = sys.executable
    own = _own_notifiers()
    specs = list(notify) or (own if own is not None else _project_notifiers(obj))
    try:
        for spec in specs:
            notifiers.parse(spec)
    except UserError as exc:
        fail(str(exc))
    opts = runner.Options(
        found, claude_args, plugin_dir, poll_seconds, stall_polls, quota_base=quota_wait, notify=specs
    )
    session = starting.clean_session(session_id) if session_id else None
    if session_id and (session is None or not runner.is_session_id(session)):
        fail(f"--session {session_id!r}: use a UUID such as Claude Code's session ids")
    job = runner.Run(obj.state, opts, Reporter(as_json, sys.stdout.isatty() and not as_json), session)
    from loopwright.runner import orphan

    try:
        orphan.watch()  # started by a fleet worker: it ends with the worker
        sys.exit(_go(job, obj, prompt, limits, loop_name, fleet_items, carry_file))
    except orphan.Orphaned:
        sys.exit(orphan.EXIT_CODE)


def _go(job, obj, prompt, limits, loop_name, fleet_items, carry_file) -> int:
    try:
        first = _begin(job, prompt, limits, loop_name)
        if fleet_items:  # before the carried counters: only a loop that starts now takes it
            from loopwright.actions import fleetitems

            fleetitems.attach(obj.state, job.paths.name, fleet_items)
        if carry_file and not loop_name:
            first = _carried(obj, job, carry_file) + first
    except UserError as exc:
        fail(str(exc))
    return job.go(first)


def _begin(job, prompt, limits: dict, loop_name: str | None) -> str:
    """Attach to the loop named, or start one from a mode's command line or a goal; the first prompt."""
    goal = _mode_command(prompt, limits) or " ".join(prompt)
    if loop_name:
        return job.attach(loop_name)
    if goal.lstrip().startswith("/loopwright:"):
        return job.command(goal.strip())
    req = starting.StartRequest(prompt=goal)
    for attr, value in limits.items():
        if value is not None:
            setattr(req, attr, value)
    return job.start(req)


def _carried(obj: Ctx, job, carry_file: str) -> str:
    """The counters and handoff another machine's worker left, put into the new loop; the
    handoff's text, to open the first prompt with."""
    from loopwright.actions import carry
    from loopwright.core import jsoncodec

    try:
        with open(carry_file, "rb") as fh:
            data = jsoncodec.loads(fh.read(1 << 20))
    except (OSError, ValueError) as exc:
        raise UserError(f"--carry {carry_file}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"--carry {carry_file}: not a JSON object")
    handoff = data.get("handoff") if isinstance(data.get("handoff"), str) else None
    carry.apply(obj.state, job.paths.name, data.get("counters") or {}, handoff, session=job.session)
    return f"{handoff}\n\n---\n\n" if handoff else ""


def _mode_command(words: tuple, limits: dict) -> str | None:
    """`run MODE OPTIONS…` as the mode's own command line, looping (``--loop``) when the
    command offers that; None when PROMPT is a goal. A goal's words may not look like options."""
    import shlex

    from loopwright import modes

    part = modes.part(words[0], "slash") if words and words[0] in modes.names() else None
    if part is None:
        stray = [w for w in words if w.startswith("--")]
        if stray:
            fail(f"no such option: {stray[0]} (a goal that starts with -- must be quoted)")
        return None
    known = getattr(part, "OPTIONS", {})
    rest = list(words[1:])
    if "--loop" in known and "--loop" not in rest:
        rest.insert(0, "--loop")
    for key, value in limits.items():
        option = "--gates" if key == "gate_policy" else "--" + key.replace("_", "-")
        if value is False:  # a --x/--no-x flag turned off
            option, value = "--no-" + option[2:], True
        if value is not None:
            if option not in known:
                fail(f"{option} does not apply to `run {words[0]}`")
            rest += (
                [option]
                if value is True
                else [option, f"{value:g}" if isinstance(value, float) else str(value)]
            )
    return f"/loopwright:{words[0]} " + " ".join(shlex.quote(w) for w in rest)


def _own_notifiers() -> list[str] | None:
    """``notify`` from the user's own config.json (state/userconfig.py), the same list a
    session's loops use; when it is there (even empty) it replaces the project's ``run.notify``."""
    from loopwright.state import userconfig

    try:
        return userconfig.notifiers()
    except userconfig.ConfigProblem as exc:
        fail(f"{exc}; fix the file or move it away")


def _project_notifiers(obj: Ctx) -> list[str]:
    """``run.notify`` from the project's .loopwright.json: webhooks and desktop only. A
    committed file must never make loopwright run a command (see docs/safety.md)."""
    from loopwright.state.project import project_config

    config, _ = project_config(obj.state.parent)
    specs = [s for s in (config.get("run") or {}).get("notify") or [] if isinstance(s, str)]
    refused = [s for s in specs if not s.startswith(("webhook:", "slack:", "desktop"))]
    for spec in refused:
        echo(
            f"loopwright: .loopwright.json run.notify {spec!r} ignored: only --notify may run a command",
            err=True,
        )
    return [s for s in specs if s not in refused]


COMMANDS = (run,)
