"""Running the completion judge (core/judge.py): Claude Code headless, with no tools.

``claude -p --output-format json --model M`` runs in the project with stdin closed, no
shell, a time bound and its output capped. It gets no tools (``--tools ""``), no MCP
server (``--strict-mcp-config``), no plugin, hook, skill or CLAUDE.md (``--safe-mode``),
and leaves no session behind (``--no-session-persistence``). Its own session owns no
loop, so no Stop hook of loopwright's would take it for the loop's, and it does not
inherit the loop's session variables.

The command is ``$LOOPWRIGHT_CLAUDE`` or ``claude`` found on ``PATH`` (absolute entries
only), never a file inside the project; the model and time bound come from loop.json,
which only the user's start options write. A project's files choose neither.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time

from loopwright.core import judge, schema
from loopwright.core.errors import UnsafePath
from loopwright.state import loops, store, verify
from loopwright.state.fspath import Path

STOP_HOOK_SECONDS = verify.MAX_TIMEOUT  # the check and the judge share what a Stop may take
OUTPUT_CAP = 1024 * 1024  # the verdict is one line; more than this is no verdict
GIT_SECONDS = 10.0
GIT_CAP = 64 * 1024
RETRIES = 2  # an API error is retried this often inside the time bound, then it is "not judged"
CACHE_NAME = "judge-last.json"
# The loop's session, the plugin's variables and loopwright's own markers stay with the loop.
PRIVATE_ENV = (
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_PROJECT_DIR",
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_ENV_FILE",
    "LOOPWRIGHT_LATE_TICK",
    "LOOPWRIGHT_OWNER_PID",
)


def judge_loop(paths: loops.LoopPaths, snap, reuse: bool = False) -> dict:
    """Ask the judge about this Stop's completion claim. Never raises: a judge that cannot
    run gives no verdict. ``reuse``: the deferred final tick of the same Stop takes the run
    its first try made, so one claim is judged (and paid for) once."""
    loop = snap.loop
    key = _claim_key(snap)
    if reuse:
        kept = _cached(paths, key)
        if kept is not None:
            return kept
    started = time.monotonic()
    model = judge.model_of(loop)
    result = _ask(Path(loop["project_dir"]), snap, model, started + time_allowed(loop, snap.verify_result))
    result.update(model=model, seconds=round(time.monotonic() - started, 2))
    try:
        store.write_json(paths.dir / CACHE_NAME, {"key": key, "result": result}, durable=False)
    except (OSError, UnsafePath):
        pass  # only the deferred tick reads it: without it, that tick asks again
    return result


def time_allowed(loop: dict, verify_result: dict | None) -> float:
    """The judge's time bound: its own, within what the check left of the Stop's time."""
    spent = float((verify_result or {}).get("seconds") or 0.0)
    return max(1.0, min(judge.timeout_of(loop), STOP_HOOK_SECONDS - spent))


def _ask(project: Path, snap, model: str, deadline: float) -> dict:
    if not judge.valid_model(model):
        return judge.failure("error", f"{model!r} is not a model name")
    client, why = find_client(project)
    if client is None:
        return judge.failure("unavailable", why)
    evidence = {
        "goal": snap.loop.get("prompt"),
        "message": final_message(snap),
        "check": judge.check_evidence(snap.verify_result),
        **git_evidence(project, snap.loop.get("started_at"), deadline),
    }
    text = judge.prompt(evidence, secrets.token_hex(8))
    argv = [
        client,
        "-p",
        "--output-format",
        "json",
        "--model",
        model,
        "--system-prompt",
        judge.system_prompt(),
        "--no-session-persistence",
        "--strict-mcp-config",
        "--safe-mode",
        "--disable-slash-commands",
        "--tools",
        "",
        "--",  # the prompt is an argument, never a shell word; "--" ends the variadic --tools
        text,
    ]
    out, code, timed_out = run_bounded(argv, project, client_env(), deadline, OUTPUT_CAP)
    if timed_out:
        return judge.failure("timeout", f"no verdict within {judge.timeout_of(snap.loop):g} s")
    return judge.read_envelope(out, code, model)


def final_message(snap) -> str:
    """The agent's final message: the transcript's whole message when it has caught up with
    the hook's last text block, else that block."""
    whole, last = snap.turn.final_text, snap.last_message
    if whole and (not last or last.strip() in whole):
        return whole
    return last or whole or ""


def find_client(project: Path) -> tuple[str | None, str]:
    """Claude Code's CLI for the judge, and why there is none when it cannot be used."""
    wanted = os.environ.get("LOOPWRIGHT_CLAUDE") or "claude"
    if "/" in wanted:
        found = wanted if os.path.isabs(wanted) and _runnable(wanted) else None
        where = "$LOOPWRIGHT_CLAUDE (an absolute path is needed)"
    else:
        dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(d)]
        found = next((os.path.join(d, wanted) for d in dirs if _runnable(os.path.join(d, wanted))), None)
        where = f"{wanted!r} on PATH"
    if found is None:
        return None, f"Claude Code's CLI was not found ({where}); set LOOPWRIGHT_CLAUDE"
    roots = {os.path.realpath(project), os.path.abspath(project)}
    for path in (os.path.abspath(found), os.path.realpath(found)):  # the name and what it leads to
        if any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots):
            return None, f"{found} is inside the project; a project's files never run as the judge"
    return found, ""


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def client_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV and not k.startswith("CLAUDE_PLUGIN_")}
    mine = env.get("CLAUDE_CODE_MAX_RETRIES", "")
    env["CLAUDE_CODE_MAX_RETRIES"] = str(min(int(mine), RETRIES) if mine.isdigit() else RETRIES)
    return env


def git_evidence(project: Path, since: str | None, deadline: float) -> dict:
    """What changed in the project: the diff stat against HEAD, the short status, and the
    commits since the loop started. Git reads the project's own config, so the options that
    would run a configured program (external diff, textconv, fsmonitor, hooks) are off."""
    safe = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "--no-pager"]
    asks = {
        "diffstat": ["diff", "--stat", "--no-ext-diff", "--no-textconv", "--no-color", "HEAD"],
        "status": ["status", "--short", "--untracked-files=normal"],
        "commits": ["log", "--oneline", "--no-color", "-n", "20"] + ([f"--since={since}"] if since else []),
    }
    out = {}
    env = dict(client_env(), GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    for key, args in asks.items():
        until = min(deadline, time.monotonic() + GIT_SECONDS)
        text, code, timed_out = run_bounded(safe + args, project, env, until, GIT_CAP)
        if timed_out:
            text = "(git timed out)"
        elif code != 0:
            text = "(not available: " + (text.strip().splitlines() or ["git failed"])[-1][:200] + ")"
        out[key] = text
    return out


def run_bounded(
    argv: list[str], cwd: Path, env: dict, deadline: float, cap: int
) -> tuple[str, int | None, bool]:
    """Run ``argv`` (no shell, stdin closed, its own process group) until ``deadline``:
    its output (stdout and stderr; the last ``cap`` bytes), exit code, and whether it timed
    out (then the whole group is killed)."""
    import subprocess

    try:
        proc = subprocess.Popen(
            argv,
            cwd=str(cwd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except (OSError, ValueError) as exc:
        return f"could not start: {exc}", 127, False
    kept = bytearray()
    try:
        timed_out = verify._drain(proc, kept, deadline) or not verify._wait(proc, deadline)
        if timed_out:
            verify._kill_group(proc.pid)
            verify._wait(proc, time.monotonic() + 10.0)
    finally:
        proc.stdout.close()
        verify._kill_group(proc.pid)
    text = bytes(kept[-cap:]).decode("utf-8", errors="replace")
    return text, (None if timed_out else proc.returncode), timed_out


def _claim_key(snap) -> str:
    """One claim: the loop, its last committed tick, the final message."""
    tick = (snap.budget.get("tick") or {}).get("id") if isinstance(snap.budget.get("tick"), dict) else None
    parts = [snap.loop.get("loop_id") or snap.loop.get("id"), tick, snap.last_message, snap.turn.final_text]
    return hashlib.sha256(repr(parts).encode("utf-8", "surrogateescape")).hexdigest()


def _cached(paths: loops.LoopPaths, key: str) -> dict | None:
    try:
        kept = store.read_json(paths.dir / CACHE_NAME, spec=schema.JUDGE_CACHE)
    except (store.CorruptFile, OSError):
        return None
    if not kept or kept.get("key") != key:
        return None
    return dict(kept["result"], reused=True)
