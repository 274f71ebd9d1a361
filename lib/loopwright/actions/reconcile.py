"""What a resume checks once against the last history line (the sdd resume contract): the
counters it restores, and the worktrees and open PRs it names compared with what is there now."""

from __future__ import annotations

from pathlib import Path

from loopwright.core import gates
from loopwright.state import lock as locks
from loopwright.state import loops


def restore_from_history(paths: loops.LoopPaths, budget: dict) -> list[str]:
    """Counters from the last history line (sdd resume contract); started_at and
    the ceilings stay as recorded. Gate answers are kept as audit only."""
    from loopwright.core.schema import SNAPSHOT_COUNTERS

    last = loops.last_snapshot(paths)
    if last is None:
        return []
    snap = last["budget_snapshot"]
    restored = []
    for key in SNAPSHOT_COUNTERS:  # the counters a history line records
        if key in snap and budget.get(key) != snap[key]:
            budget[key] = snap[key]
            restored.append(key)
    for key in ("tracked_prs", "active_worktrees"):
        if isinstance(last.get(key), list):
            budget[key] = last[key]
    budget["pending_gates"] = []  # never replay a question or an answer
    return [
        f"counters restored from history line {last.get('iteration')}"
        + (f" ({', '.join(restored)})" if restored else "")
    ]


def reconcile(project: Path, budget: dict, gate_policy: str) -> list[str]:
    """The sdd resume reconciliation, exactly once at resume: worktrees and open PRs
    recorded in the last history line are checked against what is there now.
    Mismatched worktrees are reported, never cleaned; a PR whose branch moved fires
    the resume-divergence gate."""
    import subprocess

    def git(*args: str) -> str | None:
        proc = subprocess.run(["git", *args], cwd=str(project), capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else None

    notes = [_worktree_note(project, wt, git) for wt in budget.get("active_worktrees") or []]
    for pr in budget.get("tracked_prs") or []:
        notes.append(_pr_note(budget, pr, gate_policy, git))
    return [n for n in notes if n]


def _worktree_note(project: Path, wt: dict, git) -> str | None:
    path = Path(wt.get("path", ""))
    path = path if path.is_absolute() else project / path
    if not path.is_dir():
        return f"worktree {wt.get('path')} is missing; not re-attached (left for you to inspect)"
    head = git("-C", str(path), "rev-parse", "HEAD") or ""
    branch = git("-C", str(path), "rev-parse", "--abbrev-ref", "HEAD") or ""
    if branch == wt.get("branch") and head.startswith(str(wt.get("head_sha", "")) or "-"):
        return None
    return (
        f"worktree {wt.get('path')} is now at {branch}@{head[:7]}, not "
        f"{wt.get('branch')}@{wt.get('head_sha')}; reported, not cleaned"
    )


def _pr_note(budget: dict, pr: dict, gate_policy: str, git) -> str | None:
    """Check one tracked PR; a PR whose branch moved queues the resume-divergence gate."""
    number = pr.get("number")
    if pr.get("state_at_end") in ("merged", "closed"):
        return f"PR #{number} was already {pr['state_at_end']} at prior iteration end — not re-attaching"
    remote = git("ls-remote", "origin", f"refs/heads/{pr.get('branch')}")
    if not remote:
        return f"PR #{number}: the remote head of {pr.get('branch')} could not be read; kept as recorded"
    sha = remote.split()[0]
    recorded = str(pr.get("head_sha_at_iteration_end") or "")
    if recorded and sha.startswith(recorded):
        return None  # re-attached silently
    gate = {
        "name": gates.RESUME_DIVERGENCE,
        "question": f"PR #{number} has diverged since the prior iteration crashed — re-attach, skip, "
        "or stop the loop?",
        "options": gates.OPTIONS[gates.RESUME_DIVERGENCE],
    }
    asked = dict(gate, asked_at=locks.now_iso(), asks=0, answer=None)
    if gate_policy != "ask":
        answer = "stop" if gate_policy == "stop" else gates.POLICY_CONTINUE[gates.RESUME_DIVERGENCE]
        asked.update(answer=answer, answered_by="policy")
    budget.setdefault("pending_gates", []).append(asked)
    return f"PR #{number} moved to {sha[:7]} (recorded {recorded[:7]}): the resume-divergence gate decides"
