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
    if not (os.environ.get("LOOPWRIGHT_STATE_DIR") or os.environ.get("CLAUDE_PROJECT_DIR")):
        # The launcher could not decide without the hook's cwd; decide here, cheaply.
        try:
            cwd = json.loads(raw).get("cwd")
        except Exception:
            cwd = None
        if not has_active_loops(state_dir(cwd if isinstance(cwd, str) else None)):
            return 0
    elif not has_active_loops(state_dir()):
        return 0
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
