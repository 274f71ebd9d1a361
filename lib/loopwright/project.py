"""Where a project's loop state lives. Standard library only: the Stop hook's
fast path imports this before deciding whether anything else is needed."""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIRNAME = ".loopwright"


def project_dir(cwd: str | os.PathLike | None = None) -> Path:
    """``$CLAUDE_PROJECT_DIR`` (set for hooks), else ``$LOOPWRIGHT_PROJECT_DIR``, else the nearest directory above
    ``cwd`` that already holds loop state (so a command run in a subdirectory
    finds the loop its session started), else the git top level, else ``cwd``."""
    env = os.environ.get("CLAUDE_PROJECT_DIR") or os.environ.get("LOOPWRIGHT_PROJECT_DIR")
    if env:
        return Path(env)
    start = Path(cwd) if cwd else Path.cwd()
    start = start.absolute()
    git_top = None
    for candidate in (start, *start.parents):
        if (candidate / STATE_DIRNAME / "loops").is_dir():
            return candidate
        # .git is a directory, or a file in worktrees: no subprocess needed.
        if (candidate / ".git").exists():
            git_top = candidate
            break
    return git_top or start


CONFIG_FILENAME = ".loopwright.json"


def project_config(project: Path) -> tuple[dict, str | None]:
    """The project's ``.loopwright.json`` (committed settings such as ``tasks_file``
    and ``tasks.prompt_budget_chars``), and a problem line if it is unreadable."""
    import json

    path = Path(project) / CONFIG_FILENAME
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError) as exc:
        return {}, f"{CONFIG_FILENAME} is not valid JSON ({exc}); its settings are ignored until it is fixed"
    if not isinstance(value, dict):
        return {}, f"{CONFIG_FILENAME} must hold a JSON object; its settings are ignored"
    return value, None


def state_dir(cwd: str | os.PathLike | None = None) -> Path:
    override = os.environ.get("LOOPWRIGHT_STATE_DIR")
    if override:
        return Path(override)
    return project_dir(cwd) / STATE_DIRNAME


def has_active_loops(state: Path) -> bool:
    """True when any loop is marked active. Markers live in ``active/``."""
    try:
        with os.scandir(state / "active") as it:
            return any(True for _ in it)
    except (FileNotFoundError, NotADirectoryError):
        return False
