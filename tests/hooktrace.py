"""Which process answered a Stop, read from the outside: each hook process's imports
(`python -X importtime` through a LOOPWRIGHT_PYTHON wrapper), and whether the resident Stop
server (lib/loopwright/events/resident.py) takes connections: each execution context has its
socket (events/handover.py), ``pycache/stop-<hash>.sock``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from conftest import REPO, lw_env


def traced_python(tmp_path: Path) -> tuple[Path, Path]:
    """A LOOPWRIGHT_PYTHON that logs each process's imports to a file of its own in the
    traces folder; (the wrapper, the traces folder)."""
    traces = tmp_path / "traces"
    traces.mkdir(exist_ok=True)
    wrapper = tmp_path / "python-traced"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -X importtime "$@" 2>>"{traces}/$$.log"\n')
    wrapper.chmod(0o755)
    return wrapper, traces


def imported(log: Path) -> set[str]:
    """The modules one traced process imported."""
    lines = log.read_text().splitlines()
    return {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}


def in_dir(path: Path, call):
    """``call(name)`` from within ``path``'s folder: a socket address holds ~105 bytes at most,
    less than a test's temporary paths (the launcher and the server do the same)."""
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        return call(path.name)
    finally:
        os.chdir(here)


def our_socket(cache: Path) -> Path:
    """The socket in ``cache`` of the server for this process's context, which is that of
    the hooks it runs plainly (same user, namespaces, limits, nice level...)."""
    from loopwright.events import handover

    return cache / os.fsdecode(handover.socket_name(handover.own()))


def sockets(cache: Path) -> list[Path]:
    """Every resident server's socket in ``cache``, one per execution context."""
    return sorted(cache.glob("stop-*.sock"))


def listening(sock: Path) -> bool:
    """Whether a server takes connections at ``sock``."""
    if not sock.exists():
        return False
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            in_dir(sock, probe.connect)
        except OSError:
            return False
    return True


def servers_for(data: Path) -> list[int]:
    """The resident servers started for ``data`` (by the environment they were started with:
    a hook starts one before it exits, so its absence right after a Stop is certain)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "--serve" in (proc.info["cmdline"] or []) and proc.environ().get("CLAUDE_PLUGIN_DATA") == str(
                data
            ):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def resident_leaders(data: Path) -> list[int]:
    """The servers for ``data`` that lead their own session: the resident server itself, not a
    fork answering one Stop (which may exit between the listing and this look at it)."""
    leaders = []
    for pid in servers_for(data):
        try:
            if os.getsid(pid) == pid:
                leaders.append(pid)
        except ProcessLookupError:
            continue
    return leaders


def plugin_data(tmp_path: Path):
    """A plugin data directory with its private bytecode cache (a fixture's body: its
    servers, if any, are stopped afterwards; a server whose socket is gone leaves within a
    second)."""
    path = tmp_path / "data"
    path.mkdir(mode=0o755)
    (path / "pycache").mkdir(mode=0o700)
    yield path
    for sock in sockets(path / "pycache"):
        sock.unlink(missing_ok=True)


def start_loop(project: Path, *options: str) -> Path:
    """A loop of session S1 in ``project``."""
    start = [str(REPO / "bin" / "loopwright"), "-C", str(project), "start", "--session", "S1"]
    start += ["--max-iterations", "50", *options, "goal"]
    out = subprocess.run(start, capture_output=True, text=True, env=lw_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    return project


class Hook:
    """Stops of session S1 through ``plugin``'s launcher, each recording what its own
    Python process imported."""

    def __init__(self, plugin: Path, project: Path, data: Path, tmp_path: Path) -> None:
        self.plugin, self.project, self.data, self.n = plugin, project, data, 0
        self.wrapper, self.traces = traced_python(tmp_path)

    def stop(self, wrap: tuple = (), message: str = "", **env: str) -> tuple[dict | None, set[str]]:
        """One Stop (its launcher run through the command ``wrap``, e.g. a sandbox): its
        answer and the loopwright modules its process imported."""
        self.n += 1
        before = set(self.traces.iterdir())
        event = {
            "session_id": "S1",
            "transcript_path": str(self.project / "none.jsonl"),
            "cwd": str(self.project),
            "stop_hook_active": True,
            "last_assistant_message": message or f"turn {self.n}",
        }
        base = {
            "CLAUDE_PROJECT_DIR": str(self.project),
            "CLAUDE_PLUGIN_DATA": str(self.data),
            "LOOPWRIGHT_PYTHON": str(self.wrapper),
        }
        out = subprocess.run(
            [*wrap, str(self.plugin / "hooks" / "stop")],
            input=json.dumps(event),
            capture_output=True,
            text=True,
            env=lw_env(**{**base, **env}),
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        ours = {
            n
            for log in set(self.traces.iterdir()) - before
            for n in imported(log)
            if n.startswith("loopwright")
        }
        return (json.loads(out.stdout) if out.stdout.strip() else None), ours

    @property
    def socket(self) -> Path:
        return our_socket(self.data / "pycache")

    def served(self) -> bool:
        """Whether a server listens (a connection is taken and closed at once)."""
        return listening(self.socket)
