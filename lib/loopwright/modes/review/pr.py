"""One pull request as review mode sees it, and the pure rules over it: terminal
states, CI in flight, and whether the loop addressed a human's feedback since the
previous iteration (which the post-feedback-merge gate guards)."""

from __future__ import annotations

OPEN, MERGED, CLOSED = "open", "merged", "closed"
DEFAULT_HOLD_LABEL = "do-not-merge"


class PrView:
    """What one reading of the PR found (``problem`` set when it could not be read)."""

    __slots__ = (
        "number",
        "state",
        "head",
        "branch",
        "labels",
        "checks",
        "feedback",
        "commits",
        "mine",
        "problem",
    )

    def __init__(self, number: int = 0, problem: str | None = None):
        self.number, self.problem = number, problem
        self.state, self.head, self.branch = OPEN, "", ""
        self.labels: list[str] = []
        self.checks: list[dict] = []  # {name, status, conclusion}
        self.feedback: list[dict] = []  # {author, at, kind, approve}: reviews and comments by others
        self.commits: list[dict] = []  # {sha, at}, oldest first
        self.mine = 0  # top-level comments, review comments and replies by the loop's login

    def activity(self) -> int:
        """What the wait watches besides the head: how much others have said."""
        return len(self.feedback)


def terminal(view: PrView, hold_label: str) -> str | None:
    """merged, closed or labelled do-not-merge: the watch is over."""
    if view.state in (MERGED, CLOSED):
        return view.state
    if hold_label and hold_label in view.labels:
        return f"labelled {hold_label}"
    return None


def ci_running(view: PrView) -> list[str]:
    """Checks on the head that have not finished."""
    return [c["name"] for c in view.checks if c.get("status") != "completed"]


def ci_green(view: PrView) -> bool:
    ok = ("success", "neutral", "skipped")
    return not ci_running(view) and all(c.get("conclusion") in ok for c in view.checks)


def commits_after(view: PrView, sha: str | None) -> list[dict]:
    """The PR's commits after ``sha`` (all of them when it is unknown or gone)."""
    shas = [c["sha"] for c in view.commits]
    if sha and sha in shas:
        return view.commits[shas.index(sha) + 1 :]
    return list(view.commits)


def human_feedback_addressed(view: PrView, since_sha: str | None) -> list[str]:
    """The humans whose comments the loop answered with commits since ``since_sha``: a
    non-approving review or comment by someone other than the loop, older than a commit
    pushed after ``since_sha``, with no approval from a human after the newest commit."""
    new = commits_after(view, since_sha)
    if not new:
        return []
    newest = max(c["at"] for c in new)
    if any(f["approve"] and f["at"] >= newest for f in view.feedback):
        return []
    answered = [f for f in view.feedback if not f["approve"] and any(f["at"] <= c["at"] for c in new)]
    return sorted({f["author"] for f in answered})
