"""Hook entry points. Standard library only until a loop is known to be active:
this runs after every turn of every session with the plugin enabled."""

from __future__ import annotations

import json
import os
import sys

from .project import has_active_loops, state_dir

# Larger stdin is refused (with a note) rather than parsed.
MAX_STDIN_BYTES = 16 * 1024 * 1024


def stop() -> int:
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    try:
        data = json.loads(raw) if len(raw) <= MAX_STDIN_BYTES else None
    except Exception:
        data = None
    if not isinstance(data, dict):
        data = None
    if not (os.environ.get("LOOPWRIGHT_STATE_DIR") or os.environ.get("CLAUDE_PROJECT_DIR")):
        # The launcher could not decide without the hook's cwd; decide here, cheaply.
        cwd = data.get("cwd") if data else None
        state = state_dir(cwd if isinstance(cwd, str) else None)
    else:
        state = state_dir()
    if not has_active_loops(state):
        return 0
    if data is not None and not _may_concern(state, data.get("session_id")):
        return 0  # another session's loop: pass through without loading anything more
    try:
        from . import hook
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        print(json.dumps({"systemMessage": (
            f"loopwright: a loop is active but its Python packages are missing ({missing}); "
            "the session stops here. Start a new session so the SessionStart hook installs them, "
            "or run `loopwright doctor`."
        )}))
        return 0
    return hook.main_with(raw)


def _may_concern(state, session) -> bool:
    """Whether some active loop is this session's, or could be (unowned, unreadable)."""
    if not isinstance(session, str):
        return True  # let the full hook explain what is wrong with the input
    for entry in os.listdir(state / "active"):
        cfg = _read_json(state / "loops" / entry / "loop.json")
        if cfg is None or cfg.get("status") != "active" or cfg.get("owner_session") in (session, None):
            return True
    return False


def prompt() -> int:
    """UserPromptSubmit: only prompts that are loopwright commands go further."""
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    try:
        text = json.loads(raw).get("prompt")
    except Exception:
        return 0
    if not isinstance(text, str) or not text.lstrip().startswith("/loopwright:"):
        return 0
    try:
        from . import slash
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        print(json.dumps({"decision": "block", "reason": (
            f"loopwright: error: its Python packages are missing ({missing}). Start a new session so the "
            "SessionStart hook installs them, or run `loopwright doctor`."
        )}))
        return 0
    return slash.main_with(raw)


def statusline() -> int:
    """`loopwright statusline`: one line for Claude Code's status line, or nothing.

    Claude Code runs this often, so it stays in the standard library and reads
    only the small progress.json of the session's loop.
    """
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    try:
        data = json.loads(raw)
    except Exception:
        return 0
    if not isinstance(data, dict):
        return 0
    session = data.get("session_id")
    ws = data.get("workspace") if isinstance(data.get("workspace"), dict) else {}
    project = ws.get("project_dir") or data.get("cwd")
    if os.environ.get("LOOPWRIGHT_STATE_DIR"):
        state = state_dir()
    elif isinstance(project, str) and project:
        from pathlib import Path

        state = Path(project) / ".loopwright"
    else:
        state = state_dir()
    if not session or not has_active_loops(state):
        return 0
    for entry in sorted(os.listdir(state / "active")):
        loop_dir = state / "loops" / entry
        cfg = _read_json(loop_dir / "loop.json")
        if not cfg or cfg.get("owner_session") != session or cfg.get("status") != "active":
            continue
        p = _read_json(loop_dir / "progress.json")
        if p is None:  # no Stop has run yet
            print(f"loopwright · {entry} · iteration 1/{cfg.get('max_iterations')} · starting")
            return 0
        parts = [f"loopwright · {entry}", f"iteration {int(p.get('iteration') or 0) + 1}/{p.get('max_iterations')}",
                 f"{float(p.get('minutes_elapsed') or 0):.0f}/{float(p.get('max_minutes') or 0):g} min"]
        spent = float(p.get("dollars_estimate") or 0.0)
        parts.append(f"${spent:,.2f}" + (f"/${float(p['max_dollars']):,.2f}" if p.get("max_dollars") else ""))
        if p.get("paused"):
            parts.append("PAUSED")
        if p.get("pending_gates"):
            parts.append("waiting for: " + ", ".join(p["pending_gates"]))
        print(" · ".join(parts))
        return 0
    return 0


def _read_json(path) -> dict | None:
    try:
        with open(path, "rb") as fh:
            value = json.load(fh)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def tool_failure() -> int:
    """PostToolUseFailure: only with an active loop in the project does Python go further."""
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if not has_active_loops(state_dir()):
        return 0
    try:
        from . import hook
    except ImportError:
        return 0  # the Stop hook reports missing packages; this side channel stays quiet
    return hook.tool_failure_main(raw)
