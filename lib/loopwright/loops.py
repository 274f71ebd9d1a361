"""The on-disk shape of loops: where each file lives, loop.json, active markers.

``.loopwright/active/<name>`` exists exactly while loop ``<name>`` is active, so
the Stop hook's launcher can tell "nothing to do" with one directory listing,
before any Python starts. The marker is created before loop.json says active
and removed after it says ended: a crash in between leaves a marker that points
at nothing active, which costs one Python start and is then cleaned up.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import store
from .errors import UserError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

ACTIVE, ENDED = "active", "ended"

MODE_DEFAULTS = {
    # mode: (max_iterations, max_minutes)
    "prompt": (20, 60),
    "task": (20, 30),
    "work": (5, 60),
    "review": (5, 60),
}
DEFAULT_MAX_DOLLARS = 25.0
DEFAULT_MAX_PRS = 20


class LoopError(UserError):
    """A user-facing problem with a loop; the message is one line naming the fix."""


class LoopPaths:
    """Every file of one loop, under ``<state>/loops/<name>/``."""

    def __init__(self, state: Path, name: str):
        self.state = Path(state)
        self.name = name
        self.dir = d = self.state / "loops" / name
        self.config = d / "loop.json"
        self.lock = d / "loop.lock"
        self.budget = d / "budget.json"
        self.history = d / "history.jsonl"
        self.journal = d / "journal.jsonl"
        self.progress = d / "progress.json"
        self.stop = d / "stop"
        self.tombstone = d / "cancelled"
        self.report = d / "report.md"
        self.mutex = d / ".mutex"
        self.reports = d / "reports.jsonl"
        self.tasks = d / "tasks.jsonl"
        self.backprop_pending = d / "backprop-pending.json"
        self.backprop_log = d / "backprop-log.md"
        self.ledger = d / "token-ledger.json"
        self.marker = self.state / "active" / name

    def configured(self, cfg: dict | None) -> "LoopPaths":
        """These paths with the loop's own overrides applied (``--budget-file``)."""
        if cfg and cfg.get("budget_file"):
            self.budget = Path(cfg["budget_file"])
        return self


def validate_name(name: str) -> str:
    if not NAME_RE.match(name or ""):
        raise LoopError(
            f"invalid loop name {name!r}: use 1-64 letters, digits, '-' or '_', starting with a letter or digit"
        )
    return name


def ensure_state_dir(state: Path) -> None:
    (state / "loops").mkdir(parents=True, exist_ok=True)
    (state / "active").mkdir(exist_ok=True)
    ensure_ignored(state)


def ensure_ignored(state: Path) -> None:
    """History and telemetry are secret-class: the directory keeps itself out of git."""
    state.mkdir(parents=True, exist_ok=True)
    ignore = state / ".gitignore"
    if not ignore.exists():
        store.write_text(ignore, "*\n")


def loop_names(state: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(state / "loops") if e.is_dir() and NAME_RE.match(e.name))
    except FileNotFoundError:
        return []


def active_names(state: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(state / "active") if NAME_RE.match(e.name))
    except FileNotFoundError:
        return []


def mark_active(paths: LoopPaths) -> None:
    paths.marker.parent.mkdir(parents=True, exist_ok=True)
    paths.marker.touch()


def clear_active(paths: LoopPaths) -> None:
    try:
        paths.marker.unlink()
    except FileNotFoundError:
        pass


def load_config(paths: LoopPaths) -> dict | None:
    return store.read_json(paths.config)


def is_cancelled(paths: LoopPaths) -> bool:
    return paths.tombstone.exists()


def allocate_name(state: Path, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``… : never reuse a directory, so an
    ended loop's files stay for inspection. Call under the state mutex."""
    existing = set(loop_names(state))
    if base not in existing:
        return base
    n = 2
    while f"{base}-{n}" in existing:
        n += 1
    return f"{base}-{n}"


def state_mutex(state: Path):
    state.mkdir(parents=True, exist_ok=True)
    return store.file_lock(state / ".mutex")


def loop_mutex(paths: LoopPaths):
    return store.file_lock(paths.mutex)
