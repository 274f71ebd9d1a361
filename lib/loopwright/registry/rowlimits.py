"""What one fleet loop's row may hold: bounds checked at submit, and the checks a claim makes of
a row before it adds to its counters (a row that fails them is set aside: registry/faults.py).

Whoever can write to the database can write any row; these are the fleet's own limits on it.
"""

from __future__ import annotations

from loopwright.core import jsoncodec
from loopwright.registry.api import RegistryError
from loopwright.state.project import is_loop_name

# A claim count no loop reaches (each claim adds one: failovers, gates, drains, retries): a row
# beyond it, or with a negative counter, is set aside (registry/faults.py) before any + 1 could
# overflow. The claim at once leaves such a row to the look row by row, which sets it aside.
MAX_COUNTER = 1_000_000_000
SANE = f" AND generation BETWEEN 0 AND {MAX_COUNTER} AND failovers BETWEEN 0 AND {MAX_COUNTER}"
SET_ASIDE_PER_CLAIM = 8  # rows one claim sets aside at most (the next claim goes on)

KINDS = ("prompt", "work", "review", "task")  # what a fleet loop runs: a goal, or a mode

# What one row may hold, checked at submit (docs/fleet.md): a row is read by every worker's claim,
# by `fleet ls` and by the page, so no field may grow without bound.
MAX_SPEC = 131_072  # bytes of the spec as JSON (a goal alone may have 100,000: fleet/spec.py)
MAX_TAGS, MAX_TAG = 32, 64
MAX_REPO, MAX_ACCOUNT = 2048, 128


def check_sizes(spec, repo, account, tags) -> None:
    """RegistryError, one line, for a row bigger than the fleet takes."""
    size = len(jsoncodec.dumps(spec))  # bytes: at least as many as characters
    if size > MAX_SPEC:
        raise RegistryError(f"the loop's spec is {size} bytes as JSON; the limit is {MAX_SPEC}")
    if isinstance(repo, str) and len(repo) > MAX_REPO:
        raise RegistryError(f"the repository URL is {len(repo)} characters; the limit is {MAX_REPO}")
    if isinstance(account, str) and len(account) > MAX_ACCOUNT:
        raise RegistryError(f"the account name is {len(account)} characters; the limit is {MAX_ACCOUNT}")
    # Their count and size: a tag that is no name is only never matched by a limit (limits.py).
    if len(tags) > MAX_TAGS or any(len(str(t)) > MAX_TAG for t in tags):
        raise RegistryError(f"give at most {MAX_TAGS} tags of at most {MAX_TAG} characters each")


class BadRow(Exception):
    """A row the claim cannot take for what it holds; the claim sets it aside (faults.py)."""

    def __init__(self, loop_id: str, why: str) -> None:
        super().__init__(why)
        self.loop_id, self.why = loop_id, why


def counters_fault(row: dict) -> str | None:
    """Why a claimable row cannot be claimed as it is (a counter out of range, a value of the
    wrong type where SQLite lets any be written), or None."""
    for key in ("generation", "failovers"):
        value = row.get(key)
        if type(value) is not int or not 0 <= value <= MAX_COUNTER:
            return f"its {key} is {str(value)[:40]!r}; a claim takes a row whose {key} is 0 to {MAX_COUNTER}"
    for key in ("repo", "account"):
        if not isinstance(row.get(key), str):
            return f"its {key} is not text"
    if row.get("worker") is not None and not isinstance(row["worker"], str):
        return "its worker is not text"
    return None


def _plain(text, spaces: bool = False) -> bool:
    """Text a git command line takes as a value, never as an option: no leading '-', no
    control characters (nor spaces, unless ``spaces``: a local path may hold some)."""
    if not isinstance(text, str) or not text or text[0] == "-":
        return False
    return all(c.isprintable() and (spaces or not c.isspace()) for c in text)


def check_submit(kind, spec, repo, branch, account, name) -> None:
    """RegistryError, one line, for what a fleet loop cannot be submitted with. (A worker checks
    a row again: whoever can write to the database can write any row.)"""
    if kind not in KINDS:
        raise RegistryError(f"unknown fleet loop kind {kind!r}: use one of {', '.join(KINDS)}")
    if not isinstance(spec, dict):
        raise RegistryError("a fleet loop's spec is a JSON object")
    if not _plain(repo, spaces=True) or not repo.strip():
        raise RegistryError(f"bad repository {repo!r}: give --repo URL (any URL or path git clone takes)")
    if branch is not None and (not _plain(branch) or ".." in branch or any(c in branch for c in ":~^?*[\\")):
        raise RegistryError(f"bad branch name {branch!r}: give --branch a git branch name")
    if not _plain(account):
        raise RegistryError(f"bad account name {account!r}")
    if name is not None and not is_loop_name(name):
        raise RegistryError(
            f"invalid loop name {name!r}: use 1-64 letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
