"""`loopwright serve`: the monitor of this machine's headless runs, with its REST API."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from loopwright.cli.base import Ctx, echo, fail


@click.command("serve")
@click.option(
    "--port", type=int, default=8765, show_default=True, help="Port on 127.0.0.1 (0: any free one)."
)
@click.option(
    "--project",
    "projects",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    help="A project the monitor serves; repeatable (default: this one).",
)
@click.option("--claude", "claude_bin", envvar="LOOPWRIGHT_CLAUDE", help="Claude Code's CLI, for every run.")
@click.option("--claude-arg", "claude_args", multiple=True, help="Passed to claude in every run; repeatable.")
@click.option(
    "--login",
    "new_login",
    is_flag=True,
    help="Print a new one-time sign-in link to the running monitor, and exit.",
)
@click.option(
    "--notify",
    "notify",
    multiple=True,
    metavar="HOW",
    help="desktop, webhook:URL, slack:URL or command:CMD, told once when a loop shown ends or a gate waits.",
)
@click.option(
    "--db",
    envvar="LOOPWRIGHT_DATABASE_URL",
    metavar="URL",
    help="The run registry: postgresql://… for a fleet's shared database (default: a SQLite file "
    "in the monitor's data directory).",
)
@click.option(
    "--metrics-public",
    is_flag=True,
    help="Also serve /metrics without the token, on a port of its own (--metrics-port, --metrics-host).",
)
@click.option(
    "--metrics-port", type=int, help="The port of --metrics-public (default 8766; 0: any free one)."
)
@click.option(
    "--metrics-host",
    help="The address --metrics-public listens on (default 127.0.0.1; 0.0.0.0 for a Prometheus "
    "on another machine).",
)
@click.pass_obj
def serve(
    obj: Ctx, port, projects, claude_bin, claude_args, new_login, notify, db, metrics_public, metrics_port,
    metrics_host,
) -> None:  # fmt: skip
    """Serve the REST API of this machine's runs on 127.0.0.1 (token in the monitor's data
    directory), with its metrics at /metrics. Runs left behind by an earlier monitor are picked
    up again."""
    if new_login:
        return _print_login()
    if not metrics_public and (metrics_port is not None or metrics_host is not None):
        fail("--metrics-port and --metrics-host are where --metrics-public listens: add --metrics-public")
    try:
        import uvicorn

        from loopwright.serve import app, logins, runs, token
        from loopwright.serve.server import Server
    except ImportError as exc:
        fail(f"the monitor needs its web packages ({exc.name}); reinstall: pip install -r requirements.txt")
    home = token.data_dir()
    secret = token.token(home)
    reg = _registry(db, home)
    runner_args = (["--claude", claude_bin] if claude_bin else []) + [
        f"--claude-arg={a}" for a in claude_args
    ]
    jobs = runs.Runs(reg, runner_args, events=home / "events")
    served = [Path(p).resolve() for p in projects] or [obj.project_dir.resolve()]
    for note in runs.recover(reg, jobs, _loop_active):
        echo(f"loopwright serve: {note}")
    if notify:
        _watch(served, reg, list(notify))
    monitor = app.Monitor(served, reg, jobs, secret, home=home)
    sock = _listen("127.0.0.1", port, "--port")  # loopback only, whatever the environment says
    bound = sock.getsockname()[1]
    served_app, sockets = app.make_app(monitor), [sock]
    if metrics_public:
        served_app, public = _public_metrics(served_app, monitor, metrics_host, metrics_port, bound)
        sockets.append(public)
    # An open page's event stream never ends by itself: at exit each one ends within a second
    # (Monitor.closing), before the server's grace runs out and it would cut them with an error.
    config = uvicorn.Config(served_app, log_level="warning", timeout_graceful_shutdown=5)
    echo(f"loopwright serve: projects {', '.join(map(str, served))}")
    echo(f"loopwright serve: API on http://127.0.0.1:{bound}/api/ (token: {home / 'token'})")
    echo(f"loopwright serve: metrics on http://127.0.0.1:{bound}/metrics (the same token)")
    echo(f"loopwright serve: open http://127.0.0.1:{bound}/login?code={monitor.login_code()} (one use)")
    echo("loopwright serve: a new link any time: loopwright serve --login")
    logins.record(home, bound)  # where `serve --login` finds this monitor
    try:
        Server(config, monitor).run(sockets=sockets)
    finally:
        logins.forget(home)


def _listen(host: str, port: int, option: str) -> socket.socket:
    """A listening socket on ``host``:``port``; one line naming ``option`` when it cannot be had."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port} ({exc.strerror or exc}); check {option}")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        fail(f"cannot listen on {host}:{port} ({exc.strerror}); choose another {option}")
    sock.listen(128)  # connections wait in the backlog until the server takes them
    return sock


def _public_metrics(served_app, monitor, host: str | None, port: int | None, api_port: int):
    """``--metrics-public``: /metrics without the token on a port of its own (and nothing else
    there); the app that answers both ports, and the new port's socket. Connections are told
    apart by the port they came to, so the two ports differ whatever the addresses."""
    from loopwright.serve import metrics

    host = host or "127.0.0.1"
    port = 8766 if port is None else port
    if port == api_port:
        fail(f"--metrics-port {port} is the API's port: choose another")
    sock = _listen(host, port, "--metrics-host or --metrics-port")
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    echo(f"loopwright serve: metrics on http://{shown}:{bound}/metrics (no token: --metrics-public)")
    return metrics.with_public_port(served_app, monitor, bound), sock


def _registry(db: str | None, home: Path):
    """The registry --db names, or the monitor's own SQLite file; one line when it cannot be used."""
    from loopwright.registry import RegistryError, open_registry

    try:
        return open_registry(db, default=str(home / "runs.sqlite"))
    except RegistryError as exc:
        fail(str(exc))


def _print_login() -> None:
    """A new one-time link to the monitor this user runs: the code goes where only this user
    can write (the monitor's data directory), after the monitor proved it holds the token."""
    from loopwright.serve import logins, token

    home = token.data_dir()
    try:
        port = logins.running_port(home, logins.read_token(home))
        code = logins.mint(home)
    except logins.NoMonitor as exc:
        fail(str(exc))
    minutes = logins.TTL // 60
    echo(f"open http://127.0.0.1:{port}/login?code={code} (one use, within {minutes} minutes)")


def _watch(served: list[Path], reg, specs: list[str]) -> None:
    """``--notify``: every loop shown, told once when it ends and when a gate waits."""
    from loopwright.core.errors import UserError
    from loopwright.serve import notices

    def report(_what: str, notifier: str = "", error: str = "", **_fields) -> None:
        echo(f"loopwright serve: a {notifier} notification failed: {error}", err=True)

    try:
        notices.Watcher(served, reg, specs, report).start()
    except UserError as exc:
        fail(str(exc))


def _loop_active(row: dict) -> bool:
    from loopwright.actions import pick
    from loopwright.state import loops

    try:
        cfg = pick.config(loops.LoopPaths(Path(row["project"]) / ".loopwright", row["loop"]))
    except Exception:
        return False
    return cfg.get("status") == loops.ACTIVE


COMMANDS = (serve,)
