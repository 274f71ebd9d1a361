"""Drive the real Claude Code CLI offline against :mod:`fakeapi`.

* :func:`claude_binary` installs the pinned CLI (``CLAUDE_CODE_VERSION``) with
  npm into ``~/.cache/loopwright-claude-code-<version>/`` the first time it is
  needed (idempotent; concurrent callers serialise on a lock file and the
  install is done in a temporary directory that is renamed into place) and
  returns the path of ``node_modules/.bin/claude``.  Set
  ``LOOPWRIGHT_CLAUDE_BIN`` to use an existing binary instead (its version
  is checked).
* :func:`run_claude` runs ``claude -p PROMPT --output-format stream-json
  --verbose --include-hook-events --dangerously-skip-permissions`` with an
  offline environment (``ANTHROPIC_BASE_URL`` = the fake server, a scratch
  ``HOME``, no inherited ``CLAUDE*``/``ANTHROPIC*`` variables) and returns a
  :class:`ClaudeResult` with the parsed event stream.

Example::

    with fakeapi.ScriptedServer([fakeapi.text("hi")]) as server:
        res = run_claude("hello", cwd=tmp_path, plugin_dir=None,
                         server=server, home=tmp_path / "home")
    assert res.returncode == 0 and res.result_text == "hi"
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLAUDE_CODE_VERSION = "2.1.197"
NPM_PACKAGE = "@anthropic-ai/claude-code"

TESTS_DIR = Path(__file__).resolve().parent
# Outside the checkout (which users may add as a marketplace, copied whole);
# one copy per machine, shared by every checkout.
CACHE_DIR = Path(os.environ.get("LOOPWRIGHT_CLAUDE_CACHE") or Path.home() / ".cache")

# Variables copied from the calling environment; everything else (notably
# any CLAUDE*/ANTHROPIC* variable of an enclosing Claude Code session) is not.
_INHERITED_ENV = (
    "LOOPWRIGHT_RESIDENT_IDLE",  # how long the resident Stop server waits (tests/conftest.py)
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "XDG_CONFIG_HOME",
)  # where loopwright keeps the key that signs loops


# --------------------------------------------------------------------------
# Installation
# --------------------------------------------------------------------------


def _install_dir(version: str) -> Path:
    return CACHE_DIR / f"loopwright-claude-code-{version}"


def _bin_path(prefix: Path) -> Path:
    return prefix / "node_modules" / ".bin" / "claude"


def _version_ok(binary: Path, version: str) -> bool:
    # A HOME of its own: the CLI writes its settings there, and /tmp is shared with every
    # other process (xdist's workers included).
    try:
        with tempfile.TemporaryDirectory(prefix="lw-claude-home-") as home:
            out = subprocess.run(
                [str(binary), "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                env={**_base_env(), "HOME": home},
            )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip().startswith(version)


def claude_binary(version: str = CLAUDE_CODE_VERSION) -> str:
    """Path of the pinned ``claude`` executable, installing it if needed."""
    override = os.environ.get("LOOPWRIGHT_CLAUDE_BIN")
    if override:
        if not _version_ok(Path(override), version):
            raise RuntimeError(f"LOOPWRIGHT_CLAUDE_BIN={override} is not Claude Code {version}")
        return override

    final = _install_dir(version)
    binary = _bin_path(final)
    if binary.exists():
        return str(binary)

    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / f".loopwright-claude-code-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if binary.exists():  # another process finished while we waited
            return str(binary)
        tmp = Path(tempfile.mkdtemp(prefix=f".loopwright-claude-code-{version}-", dir=CACHE_DIR))
        try:
            proc = subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                    str(tmp),
                    f"{NPM_PACKAGE}@{version}",
                ],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"npm install {NPM_PACKAGE}@{version} failed:\n{proc.stdout}\n{proc.stderr}"
                )
            if not _version_ok(_bin_path(tmp), version):
                raise RuntimeError(f"installed {NPM_PACKAGE}@{version} does not report version {version}")
            os.chmod(tmp, 0o755)  # mkdtemp creates it 0700
            if final.exists():  # stale, incomplete directory from an older layout
                shutil.rmtree(final)
            os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return str(binary)


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


def _base_env() -> dict[str, str]:
    return {k: os.environ[k] for k in _INHERITED_ENV if k in os.environ}


def offline_env(
    server_url: str, home: str | os.PathLike[str], extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment ``run_claude`` gives the CLI."""
    env = _base_env()
    env.update(
        {
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": server_url,
            "ANTHROPIC_API_KEY": "sk-ant-fakeapi-test",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",  # allows --dangerously-skip-permissions as root
        }
    )
    env.update(extra or {})
    return env


def project_slug(cwd: str | os.PathLike[str]) -> str:
    """Directory name Claude Code uses under ``~/.claude/projects/``."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


@dataclass
class ClaudeResult:
    """Outcome of one ``claude -p`` run."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration: float
    home: Path
    cwd: Path
    events: list[dict[str, Any]] = field(default_factory=list)  # parsed stream-json lines
    unparsed: list[str] = field(default_factory=list)  # stdout lines that were not JSON

    # -- stream-json views --------------------------------------------------

    @property
    def init(self) -> dict[str, Any] | None:
        """The ``system``/``init`` event (tools, plugins, slash_commands, ...)."""
        for e in self.events:
            if e.get("type") == "system" and e.get("subtype") == "init":
                return e
        return None

    @property
    def result(self) -> dict[str, Any] | None:
        """The final ``result`` event (num_turns, result, usage, is_error, ...)."""
        for e in reversed(self.events):
            if e.get("type") == "result":
                return e
        return None

    @property
    def result_text(self) -> str | None:
        return (self.result or {}).get("result")

    @property
    def num_turns(self) -> int | None:
        return (self.result or {}).get("num_turns")

    @property
    def session_id(self) -> str | None:
        for e in self.events:
            if e.get("session_id"):
                return e["session_id"]
        return None

    @property
    def assistant_texts(self) -> list[str]:
        """Text blocks of all assistant messages, in order."""
        out = []
        for e in self.events:
            if e.get("type") == "assistant":
                for block in e.get("message", {}).get("content", []):
                    if block.get("type") == "text":
                        out.append(block["text"])
        return out

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """``tool_result`` blocks the CLI fed back to the model."""
        out = []
        for e in self.events:
            if e.get("type") == "user":
                content = e.get("message", {}).get("content")
                if isinstance(content, list):
                    out.extend(b for b in content if b.get("type") == "tool_result")
        return out

    def hook_events(self, hook_event: str | None = None, subtype: str | None = None) -> list[dict[str, Any]]:
        """``system`` events ``hook_started`` / ``hook_response`` (from
        ``--include-hook-events``), optionally filtered by hook event name
        (e.g. ``"Stop"``) and subtype (e.g. ``"hook_response"``)."""
        out = []
        for e in self.events:
            if e.get("type") != "system" or not str(e.get("subtype", "")).startswith("hook_"):
                continue
            if hook_event and e.get("hook_event") != hook_event:
                continue
            if subtype and e.get("subtype") != subtype:
                continue
            out.append(e)
        return out

    # -- files ----------------------------------------------------------------

    @property
    def transcript_path(self) -> Path | None:
        """``~/.claude/projects/<slug of cwd>/<session id>.jsonl`` (located by
        globbing, since the slug rules for long/odd paths are the CLI's)."""
        if not self.session_id:
            return None
        guess = self.home / ".claude" / "projects" / project_slug(self.cwd) / f"{self.session_id}.jsonl"
        if guess.exists():
            return guess
        found = sorted((self.home / ".claude" / "projects").glob(f"*/{self.session_id}.jsonl"))
        return found[0] if found else guess

    def transcript(self) -> list[dict[str, Any]]:
        """Parsed lines of the session transcript (``[]`` if none)."""
        path = self.transcript_path
        if path is None or not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def describe(self) -> str:
        """Human-readable summary for assertion messages."""
        return (
            f"claude exited {self.returncode} after {self.duration:.1f}s\n"
            f"args: {self.args}\n--- stderr ---\n{self.stderr[-4000:]}\n"
            f"--- stdout (tail) ---\n{self.stdout[-4000:]}"
        )


class ClaudeTimeout(AssertionError):
    pass


def run_claude(
    prompt: str,
    *,
    cwd: str | os.PathLike[str],
    plugin_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None,
    server: Any,
    home: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    session_id: str | None = None,
    extra_args: Iterable[str] = (),
    timeout: float = 120,
) -> ClaudeResult:
    """Run ``claude -p PROMPT`` offline against ``server`` (a
    :class:`fakeapi.ScriptedServer`) and return the parsed outcome.

    ``plugin_dir`` may be one directory, several, or ``None``.  ``home`` is
    created if missing.  ``env`` is added on top of the offline environment.
    ``extra_args`` go after the fixed options (e.g. ``["--resume", sid]``).
    On timeout the whole process group is killed and :class:`ClaudeTimeout`
    is raised.
    """
    home_path = Path(home)
    home_path.mkdir(parents=True, exist_ok=True)
    cwd_path = Path(cwd)
    args = [
        claude_binary(),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-hook-events",
        "--dangerously-skip-permissions",
    ]
    if plugin_dir is not None:
        dirs = [plugin_dir] if isinstance(plugin_dir, (str, os.PathLike)) else list(plugin_dir)
        for d in dirs:
            args += ["--plugin-dir", str(d)]
    if session_id:
        args += ["--session-id", session_id]
    args += list(extra_args)

    start = time.monotonic()
    proc = subprocess.Popen(
        args,
        cwd=cwd_path,
        env=offline_env(server.url, home_path, env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise ClaudeTimeout(
            f"claude -p timed out after {timeout}s\n--- stderr ---\n{stderr[-4000:]}\n--- stdout "
            f"---\n{stdout[-4000:]}"
        ) from None
    duration = time.monotonic() - start

    res = ClaudeResult(
        args=args,
        returncode=proc.returncode,
        stdout=stdout,
        stderr=stderr,
        duration=duration,
        home=home_path,
        cwd=cwd_path,
    )
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            res.events.append(json.loads(line))
        except ValueError:
            res.unparsed.append(line)
    return res


def validate_plugin(plugin_dir: str | os.PathLike[str]) -> subprocess.CompletedProcess:
    """``claude plugin validate DIR`` (offline, scratch HOME)."""
    with tempfile.TemporaryDirectory() as home:
        return subprocess.run(
            [claude_binary(), "plugin", "validate", str(plugin_dir)],
            capture_output=True,
            text=True,
            timeout=120,
            env={
                **_base_env(),
                "HOME": home,
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
        )


if __name__ == "__main__":  # `python tests/claude_cli.py install|validate DIR`
    import sys

    if len(sys.argv) >= 2 and sys.argv[1] == "install":
        print(claude_binary())
    elif len(sys.argv) == 3 and sys.argv[1] == "validate":
        out = validate_plugin(sys.argv[2])
        sys.stdout.write(out.stdout + out.stderr)
        sys.exit(out.returncode)
    else:
        sys.exit("usage: claude_cli.py install | validate DIR")
