"""The agent's iteration report (``loopwright iteration``): its options parsed and checked,
appended to reports.jsonl for the next Stop to fold in."""

from __future__ import annotations

import re
from pathlib import Path

from loopwright.actions.pick import config, pick_loop, read_budget
from loopwright.state import lock as locks
from loopwright.state import loops, store

OUTCOMES = ("success", "failure", "partial", "skipped")
_PR = re.compile(r"^#?(\d+)$")
_SHA = re.compile(r"^[0-9a-fA-F]{4,40}$")
PR_STATES = ("open", "merged", "closed")


def parse_pr(value: str) -> str:
    m = _PR.match(value.strip())
    if not m:
        raise loops.LoopError(f"--pr takes a PR number like 142 or #142, got {value!r}")
    return f"#{m.group(1)}"


def parse_tracked_pr(value: str) -> dict:
    parts = value.split(":")
    if len(parts) != 5:
        raise loops.LoopError(
            f"--tracked-pr takes NUMBER:BRANCH:HEAD_AT_START:HEAD_AT_END:STATE, got {value!r}"
        )
    number, branch, start_sha, end_sha, state = parts
    if (
        not number.lstrip("#").isdigit()
        or not branch
        or not _SHA.match(start_sha)
        or not _SHA.match(end_sha)
        or state not in PR_STATES
    ):
        raise loops.LoopError(
            f"--tracked-pr {value!r}: need a PR number, a branch, two hex SHAs and a state "
            f"({'/'.join(PR_STATES)})"
        )
    return {
        "number": int(number.lstrip("#")),
        "branch": branch,
        "head_sha_at_iteration_start": start_sha,
        "head_sha_at_iteration_end": end_sha,
        "state_at_end": state,
    }


def parse_worktree(value: str) -> dict:
    path, sep, rest = value.rpartition(":")
    wpath, sep2, branch = path.rpartition(":")
    if not sep or not sep2 or not wpath or not branch or not _SHA.match(rest):
        raise loops.LoopError(f"--worktree takes PATH:BRANCH:HEAD_SHA, got {value!r}")
    return {"path": wpath, "branch": branch, "head_sha": rest}


def record_report(
    state: Path, name: str | None, session: str | None, entry: dict
) -> tuple[loops.LoopPaths, dict]:
    """Append the agent's iteration report; the next Stop folds it in."""
    if entry.get("outcome") not in OUTCOMES:
        raise loops.LoopError(f"--outcome must be one of {', '.join(OUTCOMES)}")
    if entry["outcome"] == "failure" and not entry.get("root_cause"):
        raise loops.LoopError(
            "a failure needs --root-cause TEXT (it is how repeated failures are recognised)"
        )
    for key in ("comments", "merges", "agents"):
        if entry.get(key) is not None and entry[key] < 0:
            raise loops.LoopError(f"--{key} must not be negative")
    paths = pick_loop(state, name, session)
    with loops.loop_mutex(paths):
        loop = config(paths)
        if loop.get("status") != loops.ACTIVE:
            raise loops.LoopError(f"loop {paths.name} has ended; there is no iteration to report on")
        budget = read_budget(paths, loop)
    record = {
        "at": locks.now_iso(),
        "iteration": int(budget.get("iterations_used", 0)) + 1,
        "session": session,
        **{k: v for k, v in entry.items() if v not in (None, [], "")},
    }
    store.append_jsonl(paths.reports, record)
    return paths, record
