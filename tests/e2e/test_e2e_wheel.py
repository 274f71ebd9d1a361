"""loopwright installed as the README says for real use: a wheel built from this checkout,
installed with its [fleet] extra into a fresh virtualenv outside the checkout, and then only
that virtualenv's `loopwright` on PATH. `doctor` passes, `run` drives a loop through the real
Claude Code CLI to LOOP_DONE with the plugin the package carries, and `worker` + `submit` do
the same for a fleet loop on a throwaway PostgreSQL (psycopg from the extra). The wheel is
built and installed once per test run (shared by pytest-xdist's workers)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import claude_cli
import fakeapi
from conftest import KEY_HOME, REPO
from fleetkit import git, make_remote, stop_worker
from waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Not the wheel's business: what a user's checkout may hold beside the sources.
NOT_SOURCES = (".git", "tests", "bench", "docs", "build", "dist", "*.egg-info", "__pycache__", ".venv")


def _sh(argv: list, cwd: Path, timeout: float = 300) -> None:
    out = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{argv}: {out.stdout}{out.stderr}"


def _install(where: Path) -> None:
    """`pip install '.[fleet]'` in steps: the wheel from a copy of the checkout (pip would
    write build/ into the checkout itself), a virtualenv, the wheel and its dependencies."""
    for stale in ("src", "wheels", "venv"):
        shutil.rmtree(where / stale, ignore_errors=True)
    shutil.copytree(REPO, where / "src", ignore=shutil.ignore_patterns(*NOT_SOURCES))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    _sh([*pip, "wheel", "--no-deps", "-w", where / "wheels", where / "src"], where)
    wheel = next((where / "wheels").glob("loopwright-*.whl"))
    _sh([sys.executable, "-m", "venv", "--without-pip", where / "venv"], where)
    _sh([*pip, "--python", where / "venv/bin/python", "install", f"{wheel}[fleet]"], where)
    (where / "installed").touch()


@pytest.fixture(scope="session")
def venv_bin(tmp_path_factory) -> Path:
    """The bin/ of the virtualenv the wheel is installed in."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        where = tmp_path_factory.mktemp("installed")
        _install(where)
        return where / "venv" / "bin"
    where = tmp_path_factory.getbasetemp().parent / f"installed-{run_id}"  # one for all workers
    where.mkdir(exist_ok=True)
    with open(where / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (where / "installed").exists():
            _install(where)
    return where / "venv" / "bin"


def user_env(venv_bin: Path, home: Path, server_url: str = "http://127.0.0.1:9") -> dict:
    """A user's environment: PATH with the virtualenv's bin/ and nothing of the checkout's,
    no LOOPWRIGHT_PYTHON (the installed command finds its own interpreter)."""
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not d.startswith(str(REPO))]
    env = claude_cli.offline_env(server_url, home, {"XDG_CONFIG_HOME": KEY_HOME})
    env["PATH"] = os.pathsep.join([str(venv_bin), *keep])
    env.pop("LOOPWRIGHT_PYTHON", None)
    assert shutil.which("loopwright", path=env["PATH"]) == str(venv_bin / "loopwright")
    return env


def plugin_of(venv_bin: Path) -> Path:
    """Where the installed package keeps its plugin."""
    found = list((venv_bin.parent / "lib").glob("python3*/site-packages/loopwright/plugin"))
    assert len(found) == 1, found
    return found[0]


def loopwright(venv_bin: Path, env: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv_bin / "loopwright"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


def files(top: Path, *parts: str, pattern: str = "*") -> set[str]:
    return {
        str(p.relative_to(top))
        for part in parts
        for p in (top / part).rglob(pattern)
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_the_package_carries_the_whole_plugin(venv_bin):
    plugin = plugin_of(venv_bin)
    parts = (".claude-plugin", "bin", "commands", "hooks", "skills")
    assert files(plugin, *parts) == files(REPO, *parts)
    # The package again, where the hooks look for it: every module (the code archive's too).
    assert files(plugin, "lib", pattern="*.py") == files(REPO, "lib/loopwright", pattern="*.py")
    for name in ("requirements.txt", "requirements-fleet.txt"):  # what the SessionStart hook installs
        assert (plugin / name).read_bytes() == (REPO / name).read_bytes()
    for launcher in [
        "bin/loopwright",
        *(f"hooks/{h}" for h in ("session-start", "prompt", "stop", "tool-failure")),
    ]:
        assert os.access(plugin / launcher, os.X_OK), launcher


def test_doctor_passes_after_a_plain_install(venv_bin, project, home):
    out = loopwright(venv_bin, user_env(venv_bin, home), "doctor", cwd=project)
    assert out.returncode == 0 and "[FAIL]" not in out.stdout, out.stdout + out.stderr
    manifest = plugin_of(venv_bin) / ".claude-plugin" / "plugin.json"
    assert f"plugin manifest: {manifest}" in out.stdout
    assert f"Stop hook: {plugin_of(venv_bin) / 'hooks' / 'stop'}" in out.stdout


def test_run_drives_a_loop_with_the_installed_plugin(venv_bin, project, home):
    replies = [
        fakeapi.text("Iteration one."),
        fakeapi.text("All done and checked.\n<promise>DONE</promise>"),
    ]
    with fakeapi.ScriptedServer(replies) as server:
        argv = ["run", "--claude", claude_cli.claude_binary(), "--claude-arg=--dangerously-skip-permissions",
                "--poll-seconds", "0.5", "--stall-polls", "1000", "--json",
                "--completion-promise", "DONE", "--max-iterations", "5", "write the notes"]  # fmt: skip
        out = loopwright(venv_bin, user_env(venv_bin, home, server.url), *argv, cwd=project)
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0 and events[-1]["outcome"] == "LOOP_DONE", out.stdout + out.stderr
    client = next(e for e in events if e["event"] == "client")
    assert client["argv"][client["argv"].index("--plugin-dir") + 1] == str(plugin_of(venv_bin))
    history = (project / ".loopwright/loops/prompt/history.jsonl").read_text().splitlines()
    assert len(history) == 2 and server.remaining == 0  # both Stops ticked by the installed hook
    # The hooks ran with the package's interpreter: no second virtualenv built from the network.
    data = list(home.glob(".claude/plugins/data/*"))
    assert data and not [d for d in data if (d / "venv").exists()], data


def _row(venv_bin: Path, env: dict, url: str, name: str, cwd: Path) -> dict:
    out = loopwright(venv_bin, env, "fleet", "ls", "--db", url, "--json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return next((r for r in json.loads(out.stdout) if r["name"] == name), {})


def test_a_worker_drives_a_fleet_loop_with_the_installed_package(venv_bin, pg_url, tmp_path, home):
    remote, url = make_remote(tmp_path), str(pg_url)
    env = user_env(venv_bin, home)
    submit = ["submit", "--db", url, "--repo", f"file://{remote}", "--name", "notes",
              "--completion-promise", "DONE", "--max-iterations", "5", "write the notes"]  # fmt: skip
    queued = loopwright(venv_bin, env, *submit, cwd=tmp_path)
    assert queued.returncode == 0, queued.stderr
    replies = [
        fakeapi.bash("echo one > notes.txt", text="Starting the notes."),
        fakeapi.text("All done.\n<promise>DONE</promise>"),
    ]
    with fakeapi.ScriptedServer(replies) as server:
        argv = [venv_bin / "loopwright", "worker", "--db", url, "--slots", "1",
                "--allow-repo", f"file://{remote}", "--data", tmp_path / "w1", "--poll", "0.5",
                "--claude", claude_cli.claude_binary(), "--claude-arg=--dangerously-skip-permissions",
                "--runner-arg=--poll-seconds", "--runner-arg=0.5",
                "--runner-arg=--stall-polls", "--runner-arg=1000"]  # fmt: skip
        with open(tmp_path / "w1.log", "ab") as log:
            worker = subprocess.Popen(
                [str(a) for a in argv], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                env=user_env(venv_bin, home, server.url),
            )  # fmt: skip
        worker.log = tmp_path / "w1.log"
        try:
            row = wait_for(lambda: _row(venv_bin, env, url, "notes", tmp_path).get("status") == "ended"
                           and _row(venv_bin, env, url, "notes", tmp_path),
                           "the loop to end", within=240, every=0.5, proc=worker)  # fmt: skip
        finally:
            log = stop_worker(worker)
    assert row["outcome"] == "LOOP_DONE", log
    assert git("--git-dir", str(remote), "show", "loopwright/notes:notes.txt") == "one"
