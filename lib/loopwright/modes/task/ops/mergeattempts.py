"""The merge attempt bound (the seed: "up to 3 conflict resolution retries with build/test
verification"). Every merge `lifecycle merge` starts counts as an attempt the moment it
starts, before git runs, so an attempt that ends in any way but success stays counted:
a conflict left unresolved, an --abort, a failed --verify, a git error, a crash. A merge
somebody started by hand counts when --continue or --abort first touches it. The count
belongs to the post-exec ACCEPT that allowed the merge: only a successful merge or a new
post-exec ACCEPT resets it. After MAX_MERGE_ATTEMPTS, merge refuses to start another.
The count lives in the git directory (``loopwright-merge-<module>.json``), outside the tree."""

from __future__ import annotations

import json
from pathlib import Path

from loopwright.modes.task import gitops
from loopwright.modes.task.ops.taskmodule import Module, TaskError
from loopwright.state import store

MAX_MERGE_ATTEMPTS = 3


def merge_state_path(mod: Module) -> Path:
    git_dir = gitops.run(mod.project, "rev-parse", "--absolute-git-dir").stdout.strip()
    return Path(git_dir) / f"loopwright-merge-{mod.name}.json"


def _accept_key(log: dict) -> str:
    last = log.get("last_check") or {}
    return f"{last.get('seq')}@{last.get('at')}"


def attempts(mod: Module, log: dict) -> dict:
    """The merge attempts counted against the current post-exec ACCEPT ("open": one is under way)."""
    try:
        state = json.loads(merge_state_path(mod).read_text())
    except (OSError, ValueError):
        state = None
    key = _accept_key(log)
    if (
        not isinstance(state, dict)
        or state.get("accept") != key
        or not isinstance(state.get("attempts"), int)
    ):
        return {"accept": key, "attempts": 0, "open": False}
    return state


def _save_attempts(mod: Module, state: dict) -> None:
    store.write_json(merge_state_path(mod), state)


def _exhausted(mod: Module) -> TaskError:
    return TaskError(
        f"TASK/{mod.name}: {MAX_MERGE_ATTEMPTS} merge attempts since the last post-exec ACCEPT failed; "
        f"the task stays executing. Resolve the cause by hand on task/{mod.name}, then record a new "
        f"`loopwright lifecycle check {mod.name} --checkpoint post-exec --result ACCEPT` to allow "
        f"{MAX_MERGE_ATTEMPTS} more"
    )


def open_attempt(mod: Module, log: dict) -> int:
    """Count a new attempt (refused when none is left); its number."""
    state = attempts(mod, log)
    if state["attempts"] >= MAX_MERGE_ATTEMPTS:
        raise _exhausted(mod)
    state["attempts"] += 1
    state["open"] = True
    _save_attempts(mod, state)
    return state["attempts"]


def close_attempt(mod: Module, log: dict) -> int:
    """The attempt under way failed (it stays counted); the number of attempts used."""
    state = attempts(mod, log)
    if not state.get("open"):  # a merge started by hand: it counts now
        state["attempts"] += 1
    state["open"] = False
    _save_attempts(mod, state)
    return state["attempts"]
