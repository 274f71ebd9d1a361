"""Hook entry points. Standard library only until a loop is known to be active:
this runs after every turn of every session with the plugin enabled."""

from __future__ import annotations

import os
import sys

from loopwright.core import jsoncodec
from loopwright.events.hookinput import MAX_STDIN_BYTES  # larger stdin is refused with a note
from loopwright.state.project import has_active_loops, state_dir


def stop() -> int:
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    try:
        data = jsoncodec.loads(raw) if len(raw) <= MAX_STDIN_BYTES else None
    except Exception:
        data = None
    if not isinstance(data, dict):
        data = None
    try:
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
    except (OSError, ValueError):
        return 0  # a cwd that cannot be a project (a NUL byte, too long, gone): nothing of ours is there
    try:
        from loopwright.events import stop as hook
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        print(
            jsoncodec.dumps(
                {
                    "systemMessage": (
                        f"loopwright: a loop is active but its Python packages are missing ({missing}); "
                        "the session stops here. Start a new session so the SessionStart hook installs them, "
                        "or run `loopwright doctor`."
                    )
                }
            ).decode()
        )
        return 0
    return hook.main_with(raw)


def _may_concern(state, session) -> bool:
    """Whether some active loop names this session as its owner. Loops nobody owns
    wait to be attached, and only the full hook checks that a loop is really this
    user's: this pre-filter only has to be cheap and never wrong in the other direction."""
    if not isinstance(session, str):
        return True  # let the full hook explain what is wrong with the input
    owned = _owned_active(state, session)
    # None: a symlink where a directory belongs, which the full hook reports.
    return owned is None or next(owned, None) is not None


def _owned_active(state, session: str):
    """The active loops whose loop.json names ``session`` as owner, as (name, folder,
    loop.json), read with the standard library only: a pre-filter, so it may say too
    much but never too little (the full hook checks names, signatures and schemas).
    None when ``state`` is not laid out as loopwright lays it out."""
    if not (_real_dir(state) and _real_dir(state / "active") and _real_dir(state / "loops")):
        return None
    return _scan_owned(state, session)


def _scan_owned(state, session: str):
    for entry in sorted(os.listdir(state / "active")):
        loop_dir = state / "loops" / entry
        if not _real_dir(loop_dir):
            continue
        cfg = _read_json(loop_dir / "loop.json")
        if cfg is not None and cfg.get("status") == "active" and cfg.get("owner_session") == session:
            yield entry, loop_dir, cfg


def _real_dir(path) -> bool:
    import stat

    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def prompt() -> int:
    """UserPromptSubmit: only prompts that are loopwright commands go further."""
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    try:
        text = jsoncodec.loads(raw).get("prompt")
    except Exception:
        return 0
    if not isinstance(text, str) or not text.lstrip().startswith("/loopwright:"):
        return 0
    try:
        from loopwright.events import slash
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        print(
            jsoncodec.dumps(
                {
                    "decision": "block",
                    "reason": (
                        f"loopwright: error: its Python packages are missing ({missing}). Start a new "
                        "session so the "
                        "SessionStart hook installs them, or run `loopwright doctor`."
                    ),
                }
            ).decode()
        )
        return 0
    return slash.main_with(raw)


def statusline() -> int:
    """`loopwright statusline`: one line for Claude Code's status line, or nothing.

    Claude Code runs this often, so it stays in the standard library and reads
    only the small progress.json of the session's loop.
    """
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    try:
        data = jsoncodec.loads(raw)
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
        from loopwright.state.fspath import Path

        state = Path(project) / ".loopwright"
    else:
        state = state_dir()
    if not session or not has_active_loops(state):
        return 0
    from loopwright.core.schema import PROGRESS, valid
    from loopwright.core.termsafe import one_line
    from loopwright.state.project import is_loop_name

    for entry, loop_dir, cfg in _owned_active(state, session) or ():
        if not is_loop_name(entry):
            continue
        p = _read_json(loop_dir / "progress.json")
        if p is None or not valid(PROGRESS, p):  # no Stop has run yet (or nothing usable)
            its = cfg.get("max_iterations")
            print(f"loopwright · {entry} · iteration 1/{its if type(its) is int else '?'} · starting")
            return 0
        print(one_line(_status_text(entry, p)))
        return 0
    return 0


def _status_text(name: str, p: dict) -> str:
    parts = [
        f"loopwright · {name}",
        f"iteration {int(p.get('iteration') or 0) + 1}/{p.get('max_iterations')}",
        f"{float(p.get('minutes_elapsed') or 0):.0f}/{float(p.get('max_minutes') or 0):g} min",
    ]
    spent = float(p.get("dollars_estimate") or 0.0)
    parts.append(f"${spent:,.2f}" + (f"/${float(p['max_dollars']):,.2f}" if p.get("max_dollars") else ""))
    if p.get("paused"):
        parts.append("PAUSED")
    if p.get("pending_gates"):
        parts.append("waiting for: " + ", ".join(p["pending_gates"]))
    return " · ".join(parts)


def _read_json(path, limit: int = 1024 * 1024) -> dict | None:
    """A small JSON object from a regular file: never through a symlink, never from a
    FIFO or device, never more than ``limit`` bytes. None for anything else."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, limit + 1)
        value = jsoncodec.loads(data) if len(data) <= limit else None
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return value if isinstance(value, dict) else None


def tool_failure() -> int:
    """PostToolUseFailure: only with an active loop in the project does Python go further."""
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if not has_active_loops(state_dir()):
        return 0
    try:
        from loopwright.events import toolfailure
    except ImportError:
        return 0  # the Stop hook reports missing packages; this side channel stays quiet
    return toolfailure.tool_failure_main(raw)
