"""Helpers shared by the end-to-end tests: reading a loop's files, and what the
real Claude Code client sent and received."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import claude_cli
import fakeapi
from conftest import KEY_HOME, REPO, lw_env

FEEDBACK = "Stop hook feedback"


def usage(inp: int, out: int = 0, cw: int = 0, cr: int = 0) -> dict[str, int]:
    """A scripted reply's token usage (input, output, cache write, cache read)."""
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cache_creation_input_tokens": cw,
        "cache_read_input_tokens": cr,
    }


def loop_dir(project: Path, name: str = "prompt") -> Path:
    return project / ".loopwright" / "loops" / name


def loop_json(project: Path, name: str = "prompt") -> dict:
    return json.loads((loop_dir(project, name) / "loop.json").read_text())


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def history(project: Path, name: str = "prompt") -> list[dict]:
    return read_jsonl(loop_dir(project, name) / "history.jsonl")


def journal(project: Path, name: str = "prompt") -> list[dict]:
    return read_jsonl(loop_dir(project, name) / "journal.jsonl")


def stop_answers(res) -> list[dict | None]:
    """What the loopwright Stop hook printed at each Stop, parsed (None: no output)."""
    out = []
    for ev in res.hook_events("Stop", "hook_response"):
        raw = (ev.get("stdout") or ev.get("output") or "").strip()
        out.append(json.loads(raw) if raw else None)
    return out


def is_block(answer: dict | None) -> bool:
    return bool(answer) and answer.get("decision") == "block"


def conv(res) -> list[fakeapi.Request]:
    return res.server.conversation_requests


def feedback_prompts(res) -> list[str]:
    """The user text of every conversation request that carries Stop hook feedback."""
    return [r.last_user_text() for r in conv(res) if FEEDBACK in r.last_user_text()]


def prompt_context(req: fakeapi.Request) -> str:
    """Every text of the request's user and system messages: a slash command's
    expansion and the UserPromptSubmit hook's additionalContext (Claude Code
    2.1.197 sends that in a ``system`` message)."""
    parts = []
    for message in req.body["messages"]:
        if message["role"] not in ("user", "system"):
            continue
        content = message["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        parts += [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(parts)


def ok(res) -> None:
    assert res.returncode == 0, res.describe()
    assert not res.server.exhausted_requests, "the scripted conversation ran out:\n" + res.describe()


def loopwright(
    project: Path, *args: str, session: str | None = None, **env: str
) -> subprocess.CompletedProcess:
    """bin/loopwright in ``project``, as a shell in it would run it."""
    extra = dict(env)
    if session:
        extra["CLAUDE_CODE_SESSION_ID"] = session
    return subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), *args],
        capture_output=True,
        text=True,
        env=lw_env(**extra),
        timeout=60,
    )


def run_headless(
    project: Path,
    home: Path,
    server,
    *args: str,
    env: dict | None = None,
    timeout: float = 180,
    as_json: bool = True,
):
    """`loopwright run --json ARGS…` against the scripted server: the finished process and its
    events (none without ``as_json``: then its output is the lines a person reads)."""
    extra = {"LOOPWRIGHT_PYTHON": sys.executable, "XDG_CONFIG_HOME": KEY_HOME, **(env or {})}
    cmd = [
        str(REPO / "bin" / "loopwright"),
        "-C",
        str(project),
        "run",
        "--claude",
        claude_cli.claude_binary(),
        "--claude-arg=--dangerously-skip-permissions",
        "--poll-seconds",
        "0.5",
        # No stall unless a test asks for one (its own --stall-polls comes later and wins): a
        # client starved of CPU on a busy machine must not look stalled after 1.5 s.
        "--stall-polls",
        "1000",
        *(["--json"] if as_json else []),
        *args,
    ]
    out = subprocess.run(
        cmd,
        env=claude_cli.offline_env(server.url, home, extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return out, events
