"""``lifecycle status``: a module's status, phase, dependencies, the commands the matrix
allows now, and the auto loop's signal and stop request."""

from __future__ import annotations

import json
from pathlib import Path

from loopwright.modes.task import lifecycle
from loopwright.modes.task.ops.taskmodule import dependency_problems, index_of, locate, read_log


def status(project: Path, name: str) -> dict:
    mod = locate(project, name)
    index = index_of(mod)
    meta = index.meta
    allowed = [c for c in lifecycle.COMMANDS if lifecycle.allowed(meta["status"], c)]
    signal = None
    sig_path = mod.main_dir / ".auto-signal"
    if sig_path.exists():
        try:
            signal = json.loads(sig_path.read_text())
        except ValueError:
            signal = {"invalid": True}
    return {
        "module": name,
        "title": meta.get("title"),
        "status": meta["status"],
        "phase": meta.get("phase") or "",
        "completed_steps": meta.get("completed_steps", 0),
        "branch": meta.get("branch"),
        "worktree": meta.get("worktree"),
        "depends_on": meta.get("depends_on") or [],
        "blocking_dependencies": dependency_problems(mod, index),
        "allowed_commands": allowed,
        "last_check": read_log(mod).get("last_check"),
        "auto_signal": signal,
        "auto_stop": (mod.main_dir / ".auto-stop").exists(),
        "dir": str(mod.state_dir),
    }
