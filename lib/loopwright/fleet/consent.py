"""What a fleet loop asks of the worker that runs it beyond its repository, and which live
workers would give it.

A row's ``verify`` is a shell command its worker runs at a completion claim, as the worker's
user and outside the permission mode the worker's operator gave Claude Code. Whoever can write
a row would otherwise run a command on every worker, so a verify is the worker's choice: it
claims a loop with a verify only when one of its ``--allow-verify`` patterns (a shell glob over
the whole command, case-sensitive) accepts it; with none, it runs no verify at all. Other loops
with a verify stay queued for a worker that accepts them.

Workers publish what they accept (their patterns, account and lease) in their row at every
heartbeat, so that `submit`, the API and `fleet ls` can say which loop no live worker would
take, and why. That is advice: a worker's row is as writable as a loop's, and what a worker
runs is decided by its own options alone.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from fnmatch import fnmatchcase

from loopwright.core.termsafe import one_line
from loopwright.fleet import allow
from loopwright.registry.workers import STOPPED, worker_state

MAX_PATTERN = 4000  # as long as the longest verify a row may hold (fleet/spec.py)
LIVE_LEASES = 3  # a worker whose last beat is within this many of its leases is live
DEFAULT_LEASE = 30.0  # a worker that does not publish its lease: `loopwright worker`'s default


def verify_of(spec) -> object:
    """The verify a row's spec asks its worker to run (None for none)."""
    return spec.get("verify") if isinstance(spec, dict) else None


def check_patterns(patterns) -> list[str]:
    """``--allow-verify`` patterns, checked; ValueError (one line) for one that is empty, too
    long or holds a line break or a NUL (a verify never does)."""
    for pattern in patterns:
        if not pattern or len(pattern) > MAX_PATTERN or any(c in pattern for c in "\0\r\n"):
            raise ValueError(f"bad pattern {pattern[:80]!r}: one line of up to {MAX_PATTERN} characters")
    return list(patterns)


class Verifies:
    """A worker's ``--allow-verify`` patterns: ``Verifies(["make test*"]).why_not(spec)``."""

    def __init__(self, patterns) -> None:
        self.patterns = check_patterns(patterns)

    def why_not(self, spec) -> str | None:
        """None when this worker may run the loop's verify (or it has none), else why not."""
        verify = verify_of(spec)
        if verify is None:
            return None
        if not self.patterns:
            return "this worker runs no verify command: start it with --allow-verify PATTERN"
        if isinstance(verify, str) and any(fnmatchcase(verify, p) for p in self.patterns):
            return None
        shown = verify[:200] if isinstance(verify, str) else verify
        return f"no --allow-verify pattern accepts the verify {one_line(repr(shown))[:210]}"


@dataclass
class Unserved:
    """Why no live worker takes a loop now: ``what`` is none (no live worker), repository or
    verify (none accepts it: refused at submit) or account (none runs it: queued with a
    warning); ``line`` says so with the option that would change it, ``short`` for a list."""

    what: str
    line: str
    short: str

    @property
    def refuses(self) -> bool:
        return self.what in ("repository", "verify")


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def live(workers: list[dict]) -> list[dict]:
    """The workers whose last beat is within LIVE_LEASES of their lease, but for those that
    said they stopped."""
    found = []
    for w in workers:
        if worker_state(w) == STOPPED:  # it said it left: no grace for it
            continue
        lease = w.get("lease") if isinstance(w.get("lease"), (int, float)) else DEFAULT_LEASE
        if float(w.get("age") or 0) < LIVE_LEASES * max(float(lease), 1.0):
            found.append(w)
    return found


def _allows(patterns) -> allow.Allow | None:
    """A published --allow-repo list as an Allow; None for a worker that published none (it is
    taken to accept any repository: older workers do not say)."""
    if patterns is None:
        return None
    try:
        return allow.Allow([p for p in patterns if isinstance(p, str)])
    except ValueError:
        return allow.Allow([])  # a list no worker could have started with accepts nothing


def _verifies(patterns) -> Verifies | None:
    if patterns is None:
        return None
    try:
        return Verifies([p for p in patterns if isinstance(p, str)])
    except ValueError:
        return Verifies([])


class Takers:
    """The fleet's live workers and what each accepts, to judge loops against."""

    def __init__(self, workers: list[dict]) -> None:
        self.live = live(workers)
        self._accepts = [
            (w, _allows(w.get("allow_repo")), _verifies(w.get("allow_verify"))) for w in self.live
        ]

    def unserved(self, repo: str, spec, account: str) -> Unserved | None:
        """Why no live worker would take a loop of ``repo``, ``spec`` and ``account`` now; None
        when one would."""
        n = len(self.live)
        if not n:
            return Unserved(
                "none",
                f"no live worker (no worker's heartbeat within {LIVE_LEASES} of its leases): "
                "the loop waits in the queue until one starts",
                "no live worker",
            )
        repo_ok = [(w, v) for w, a, v in self._accepts if a is None or a(repo)]
        if not repo_ok:
            shown = _canonical(repo)
            return Unserved(
                "repository",
                f"no live worker accepts the repository {one_line(shown)[:200]} "
                f"({_plural(n, 'live worker')}): start a worker with --allow-repo {shlex.quote(shown)}",
                "no live worker accepts its repository",
            )
        verify = verify_of(spec)
        both = [w for w, v in repo_ok if v is None or v.why_not(spec) is None]
        if not both:
            return Unserved(
                "verify",
                f"no live worker accepts this verify ({_plural(n, 'live worker')}, "
                f"{len(repo_ok)} accepting the repository): start a worker with "
                f"--allow-verify {_suggested(verify)}",
                "no live worker accepts its verify",
            )
        if any(w.get("account") in (None, account) for w in both):
            return None
        served = ", ".join(sorted({one_line(w["account"]) for w in both}))
        return Unserved(
            "account",
            f"no live worker runs account {account}'s loops (they take: {served}): the loop waits "
            f"until a worker starts with --account {account} or without --account",
            f"no live worker runs account {account}",
        )


class Acceptance:
    """What each worker accepts, as the monitor's page asks it (core/attention.Queue's
    ``accepts``): ``Acceptance(workers)(worker, row)`` is None when ``worker`` would take the
    queued ``row`` (its repository and verify), else why not, with the option that would let
    a worker take it. A worker's patterns are compiled once per snapshot, not once per loop."""

    def __init__(self, workers: list[dict]) -> None:
        self._of = {
            str(w.get("worker")): (_allows(w.get("allow_repo")), _verifies(w.get("allow_verify")))
            for w in workers
        }

    def __call__(self, worker: dict, row: dict) -> str | None:
        allows, verifies = self._of.get(str(worker.get("worker")), (None, None))
        repo = row.get("repo")
        if allows is not None and not (isinstance(repo, str) and allows(repo)):
            shown = _canonical(repo) if isinstance(repo, str) else "(none)"
            return f"its repository (start a worker with --allow-repo {shlex.quote(one_line(shown)[:200])})"
        if verifies is not None and verifies.why_not(row.get("spec")) is not None:
            return f"its verify (start a worker with --allow-verify {_suggested(verify_of(row.get('spec')))})"
        return None


def _canonical(repo: str) -> str:
    """The repository as --allow-repo patterns are matched against it (as given when refused)."""
    try:
        return allow.normalised(repo)
    except allow.Refused:
        return str(repo)


def _suggested(verify) -> str:
    """A pattern that accepts ``verify``, for the shell: the command itself (a long one cut, with
    ``*`` for the rest)."""
    text = one_line(verify)
    return shlex.quote(text if len(text) <= 200 else text[:200] + "*")
