"""Shared fixtures: a scratch project, and a way to run the real Claude Code CLI
with this repository loaded as a plugin."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
LIB = REPO / "lib"
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(LIB))

from hypothesis import HealthCheck, settings  # noqa: E402

import claude_cli  # noqa: E402
import fakeapi  # noqa: E402

# The throwaway PostgreSQL's fixtures, and its hook that marks them skipped without one.
from pgcluster import pg_cluster, pg_url, pytest_collection_modifyitems, reg, registry_url  # noqa: E402,F401

# The per-user key that signs loops (loopwright/trust.py) lives under
# $XDG_CONFIG_HOME: one scratch directory for the whole run, shared by in-process
# calls, CLI subprocesses and the real Claude Code CLI, never the developer's own.
KEY_HOME = tempfile.mkdtemp(prefix="lw-test-config-")
atexit.register(shutil.rmtree, KEY_HOME, True)  # one per process (and xdist worker): none left behind
os.environ["XDG_CONFIG_HOME"] = KEY_HOME

# git as on a machine where it knows no one: no global or system setting of the developer's
# (an identity, commit.gpgsign, hooks) reaches a test, and useConfigOnly keeps git from making
# up an identity from the host name. So a test or bench that commits without naming its own
# author fails on every machine, not only on a fresh one (issue 27).
GIT_CONFIG = Path(KEY_HOME) / "gitconfig"
GIT_CONFIG.write_text("[user]\n\tuseConfigOnly = true\n")
os.environ["GIT_CONFIG_GLOBAL"] = str(GIT_CONFIG)
os.environ["GIT_CONFIG_NOSYSTEM"] = "1"

# Every test's plugin data directory gets its own resident Stop server once a loop's Stop
# has run there (lib/loopwright/events/resident.py): let each go 20 s after its last Stop
# rather than the 10 minutes a user's waits, so a run leaves no crowd of them behind.
RESIDENT_IDLE = "20"
os.environ["LOOPWRIGHT_RESIDENT_IDLE"] = RESIDENT_IDLE


def pytest_configure(config: pytest.Config) -> None:
    import scheduling

    config.pluginmanager.register(scheduling, "loopwright-scheduling")  # long tests first


# No example database in the checkout: it may be added as a marketplace, copied whole. No
# clock either: a deadline per example, or the health check that finds generating them too
# slow, fails a property test on a machine busy with other work (or with xdist's workers).
settings.register_profile(
    "loopwright", database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("loopwright")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty git project directory."""
    proj = tmp_path / "project"
    proj.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    return proj


@pytest.fixture
def state(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The project's .loopwright directory, with the environment pointing at it
    the way Claude Code's hook environment does."""
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(project))
    monkeypatch.delenv("LOOPWRIGHT_STATE_DIR", raising=False)
    monkeypatch.delenv("CLAUDE_CODE_SESSION_ID", raising=False)
    return project / ".loopwright"


def cli(project: Path, *args: str, input: str | None = None, env: dict | None = None):
    """Run the `loopwright` command in this process (click's CliRunner), as a shell would
    with only ``env`` set of Claude Code's and loopwright's variables. The result has
    ``returncode``, ``stdout`` and ``stderr`` like a finished subprocess."""
    from types import SimpleNamespace

    from click.testing import CliRunner

    from loopwright.cli.main import main

    clean = {k: None for k in os.environ if k.startswith(("CLAUDE", "LOOPWRIGHT"))}
    clean.update(env or {})
    res = CliRunner().invoke(
        main, ["-C", str(project), *args], input=input, env=clean, catch_exceptions=False
    )
    return SimpleNamespace(returncode=res.exit_code, stdout=res.stdout, stderr=res.stderr)


def hook_stop(project: Path, session="S1", message=None, transcript=None) -> dict | None:
    """One Stop event through the real hook launcher, as Claude Code sends it; its answer."""
    payload = {
        "session_id": session,
        "transcript_path": str(transcript or project / "none.jsonl"),
        "cwd": str(project),
        "stop_hook_active": True,
    }
    if message is not None:
        payload["last_assistant_message"] = message
    out = subprocess.run(
        [str(REPO / "hooks" / "stop")],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project)),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def one_line_error(out) -> str:
    """The one ``loopwright: error: …`` line a command that failed on bad input printed
    (exit 1, nothing on stdout, no traceback)."""
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout == "" and "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("loopwright: error: "), out.stderr
    return lines[0]


def refused(out) -> str:
    """The same for a command run through click's runner in this process."""
    assert out.exit_code == 1, out.output
    lines = out.stderr.splitlines()
    assert out.stdout == "" and len(lines) == 1 and lines[0].startswith("loopwright: error: "), out.output
    return lines[0]


def lw_env(**extra: str) -> dict[str, str]:
    """Environment for running bin/loopwright or the hook launchers as processes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "LOOPWRIGHT"))}
    env["LOOPWRIGHT_PYTHON"] = sys.executable
    env["PATH"] = f"{REPO / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # Hand-made Stop events name transcripts that never get their turn's message: no
    # waiting for it (tests of the wait set their own limit).
    env["LOOPWRIGHT_CATCH_UP_SECONDS"] = "0"
    env["LOOPWRIGHT_RESIDENT_IDLE"] = RESIDENT_IDLE
    env.update(extra)
    return env


@dataclass
class Claude:
    """Runs the real CLI in ``project`` with this repo as a plugin."""

    project: Path
    home: Path

    def run(self, prompt: str, replies, *, env: dict | None = None, timeout: float = 180, **kw):
        server = (
            replies if isinstance(replies, fakeapi.ScriptedServer) else fakeapi.ScriptedServer(list(replies))
        )
        own = not isinstance(replies, fakeapi.ScriptedServer)
        if own:
            server.start()
        try:
            base = {"LOOPWRIGHT_PYTHON": sys.executable, "XDG_CONFIG_HOME": KEY_HOME}
            base.update(env or {})
            res = claude_cli.run_claude(
                prompt,
                cwd=self.project,
                plugin_dir=REPO,
                server=server,
                home=self.home,
                env=base,
                timeout=timeout,
                **kw,
            )
        finally:
            if own:
                server.stop()
        res.server = server
        return res

    def loops(self) -> dict:
        out = subprocess.run(
            [str(REPO / "bin" / "loopwright"), "-C", str(self.project), "status", "--json"],
            capture_output=True,
            text=True,
            env=lw_env(),
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return {lp["name"]: lp for lp in json.loads(out.stdout)["loops"]}


@pytest.fixture
def claude(project: Path, tmp_path: Path) -> Claude:
    claude_cli.claude_binary()
    return Claude(project=project, home=tmp_path / "home")
