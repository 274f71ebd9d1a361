"""Git mechanics for task modules: branches, worktrees, convention commits, merges.

Every commit the code makes follows ``-- ai-cli-task(<module>):<type> <description>``.
Git runs as a subprocess with a fixed, non-interactive environment; a failure
becomes a GitError carrying git's own message.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from loopwright.core.errors import UserError

COMMIT_TYPES = ("init", "plan", "check", "exec", "feat", "fix", "refactor", "merge", "report", "cancel")


class GitError(UserError):
    """A git command that failed; ``detail`` keeps all of git's own output."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


# What git prints when it cannot tell who is committing (no user.name/user.email,
# auto-detection failed or disabled by user.useConfigOnly).
_IDENTITY_SIGNS = (
    "Please tell me who you are",
    "auto-detect",
    "auto-detection is disabled",
    "empty ident name",
    "Author identity unknown",
    "Committer identity unknown",
)


def identity_missing(exc: GitError) -> bool:
    """Whether ``exc`` failed because git has no identity to commit with."""
    text = f"{exc}\n{exc.detail}"
    return any(sign in text for sign in _IDENTITY_SIGNS)


def message(module: str, kind: str, description: str) -> str:
    if kind not in COMMIT_TYPES:
        raise GitError(f"commit type {kind!r} is not one of {', '.join(COMMIT_TYPES)}")
    return f"-- ai-cli-task({module}):{kind} {description}"


def run(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_EDITOR="true", LC_ALL="C")
    proc = subprocess.run(["git", *args], cwd=str(cwd), capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        last = detail[-1] if detail else f"exit {proc.returncode}"
        raise GitError(f"git {' '.join(args[:3])} failed: {last}", "\n".join(detail))
    return proc


def is_repo(path: Path) -> bool:
    return run(path, "rev-parse", "--is-inside-work-tree", check=False).returncode == 0


def current_branch(path: Path) -> str:
    out = run(path, "rev-parse", "--abbrev-ref", "HEAD", check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def has_commits(path: Path) -> bool:
    return run(path, "rev-parse", "--verify", "HEAD", check=False).returncode == 0


def branch_exists(path: Path, branch: str) -> bool:
    return run(path, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False).returncode == 0


def commit_paths(
    cwd: Path, module: str, kind: str, description: str, paths: list[str] | None = None
) -> str | None:
    """Stage ``paths`` (everything when None) and commit with the convention.
    Returns the new commit's SHA, or None when there was nothing to commit."""
    if paths is None:
        run(cwd, "add", "-A")
    else:
        run(cwd, "add", "-A", "--", *paths)
    if run(cwd, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return None
    run(cwd, "commit", "-q", "--no-verify", "-m", message(module, kind, description))
    return run(cwd, "rev-parse", "HEAD").stdout.strip()


def conflicted_files(cwd: Path) -> list[str]:
    out = run(cwd, "diff", "--name-only", "--diff-filter=U", check=False)
    return [f for f in out.stdout.splitlines() if f.strip()]


def stage_text(cwd: Path, stage: int, path: str) -> str | None:
    """The content of ``path`` at index stage ``stage`` of a conflicted merge (1 the
    common ancestor, 2 ours, 3 theirs), or None when that side has no such file."""
    proc = run(cwd, "show", f":{stage}:{path}", check=False)
    return proc.stdout if proc.returncode == 0 else None


def merge_in_progress(cwd: Path) -> bool:
    git_dir = run(cwd, "rev-parse", "--git-dir").stdout.strip()
    return (Path(cwd) / git_dir / "MERGE_HEAD").exists()


def history(cwd: Path, module: str) -> list[dict]:
    """Every convention commit of ``module`` on any branch, oldest first.

    Reading all branches means the history survives a branch's deletion once it was merged."""
    prefix = f"-- ai-cli-task({module}):"
    out = run(
        cwd,
        "log",
        "--all",
        "--reverse",
        "--fixed-strings",
        f"--grep={prefix}",
        "--format=%H%x1f%h%x1f%aI%x1f%s",
        check=False,
    )
    rows = []
    for line in out.stdout.splitlines():
        parts = line.split("\x1f")
        if len(parts) == 4 and parts[3].startswith(prefix):
            kind, _, desc = parts[3][len(prefix) :].partition(" ")
            rows.append(
                {"sha": parts[0], "short": parts[1], "date": parts[2], "type": kind, "description": desc}
            )
    return rows
