"""What a user (or the agent) does to loops: pick, cancel, resume, answer a gate,
report an iteration. Shared by the CLI and the slash commands; each operation
raises LoopError with a one-line message."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from loopwright import modes
from loopwright.actions import start as starting
from loopwright.core import budget as budgets
from loopwright.core import gates, router
from loopwright.core.modeapi import DIMENSIONS
from loopwright.state import journal, loops, store
from loopwright.state import lock as locks
from loopwright.tick import commit, ending

LOCK_MODES = ("skip", "wait", "force")
WAIT_POLL_SECONDS = 2.0
# Outcomes a loop can be resumed from (with higher ceilings where one ran out).
RESUMABLE_PREFIXES = ("MAX_ITERATIONS", "BUDGET_EXHAUSTED", "STOPPED", "EXTERNAL_UNREACHABLE")


def config(paths: loops.LoopPaths) -> dict:
    cfg = loops.load_config(paths)
    if cfg is None:
        raise loops.LoopError(
            f"loop {paths.name} has no loop.json; remove it with `loopwright teardown {paths.name} --force`"
        )
    return cfg


def pick_loop(
    state: Path,
    name: str | None,
    session: str | None,
    *,
    active_only: bool = True,
    own_only: bool = False,
    trusted: bool = True,
) -> loops.LoopPaths:
    """The loop named, else the active loop owned by ``session``, else (unless
    ``own_only``) the only active loop, else (unless ``active_only``) the only loop.
    A loop this user's loopwright did not create is refused (UntrustedLoop) unless
    ``trusted`` is false (status, adopt and teardown look at such loops)."""
    loops.check_dirs(state)
    if name:
        loops.validate_name(name)
        paths = loops.LoopPaths(state, name)
        if not os.path.isdir(paths.dir):
            known = ", ".join(loops.loop_names(state)) or "none"
            raise loops.LoopError(f"no loop named {name} in {state} (loops: {known})")
        if trusted:
            loops.load_config(paths)  # raises UntrustedLoop for a loop that is not ours
        return paths
    active = []
    for found in loops.scan_active(state):
        if found.config is None:
            continue  # untrusted or damaged: only acted on when named (and then refused)
        if session and found.config.get("owner_session") == session:
            return found.paths
        active.append(found.paths)
    if own_only and session:
        raise loops.LoopError("this session runs no loop; name the loop to act on another session's loop")
    if len(active) == 1:
        return active[0]
    if not active:
        if not active_only:
            names = loops.loop_names(state)
            if len(names) == 1:
                return pick_loop(state, names[0], session, trusted=trusted)
            if names:
                raise loops.LoopError(f"no active loop; name one of: {', '.join(names)}")
        raise loops.LoopError(
            f"no active loop in {state.parent}; start one with /loopwright:loop or `loopwright start`"
        )
    raise loops.LoopError(f"several loops are active ({', '.join(p.name for p in active)}); name one")


def _budget(paths: loops.LoopPaths, loop: dict, *, ending: bool = False, restoring: bool = False) -> dict:
    """The loop's budget.json. A missing one is never made again from zero, which would reset
    the loop's spend (StateMissing). Only the report of a loop that is ending starts from zero,
    and a resume (``restoring``) from the counters of the last history line."""
    budget = loops.read_state(paths.configured(loop), "budget")
    if budget is None:
        if not (ending or (restoring and loops.last_snapshot(paths) is not None)):
            raise loops.StateMissing(paths.name, paths.budget.name)
        budget = router.initial_budget(loop)
    return budgets.upgrade(budget, loop)


def cancel(state: Path, name: str | None, session: str | None, reason: str = "cancelled by the user") -> str:
    """Cancel for good: the tombstone goes down first, so no later Stop can
    continue or revive the loop, then the loop is ended with a report."""
    paths = pick_loop(state, name, session, own_only=bool(session) and not name)
    now = time.time()
    try:
        with open(paths.tombstone, "x", encoding="utf-8") as fh:
            fh.write(f"{locks.now_iso(now)} {reason}\n")
    except FileExistsError:
        pass
    return _end(paths, router.CANCELLED, reason, dict(event="cancel", reason=reason), session, now)


def pause_clock(state: Path, name: str, seconds: float, why: str, session: str | None = None) -> None:
    """Take ``seconds`` off the loop's wall-clock budget (time spent waiting out a usage
    limit, in which nothing could run)."""
    paths = pick_loop(state, name, None, active_only=False)
    with loops.loop_mutex(paths):
        loop = config(paths)
        budget = _budget(paths.configured(loop), loop)
        budget["clock_paused_seconds"] = float(budget.get("clock_paused_seconds") or 0.0) + max(0.0, seconds)
        store.write_json(paths.budget, budget)
    journal.write(paths, dict(event="clock", paused_seconds=round(seconds, 3), why=why), session=session)


def end_now(state: Path, name: str, outcome: str, reason: str, session: str | None = None) -> str:
    """End an active loop with ``outcome`` between turns (the headless runner giving up);
    returns the end summary. An ended loop stays as it is."""
    paths = pick_loop(state, name, None, active_only=False)
    event = dict(event="end", outcome=outcome, reason=reason)
    return _end(paths, outcome, reason, event, session, time.time())


def _end(
    paths: loops.LoopPaths, outcome: str, reason: str, event: dict, session: str | None, now: float
) -> str:
    with loops.loop_mutex(paths):
        loop = config(paths)
        if loop.get("status") == loops.ACTIVE:
            commit.recover(paths.configured(loop), loop)  # a tick cut short is finished first
            loop = config(paths)
        if loop.get("status") != loops.ACTIVE:
            loops.clear_active(paths)
            return f"loopwright: loop {paths.name} had already ended ({loop.get('outcome')}); it stays ended."
        summary = ending.end_loop(paths, loop, _budget(paths, loop, ending=True), outcome, reason, now)
    journal.write(paths, event, session=session, now=now)
    return summary


# --- resume ---------------------------------------------------------------------------------


@dataclass
class Resumed:
    paths: loops.LoopPaths
    loop: dict
    notes: list[str] = field(default_factory=list)
    waiting_gate: dict | None = None  # a force-unlock gate the user must answer first


def _restore_from_history(paths: loops.LoopPaths, budget: dict) -> list[str]:
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


def _reconcile(project: Path, budget: dict, gate_policy: str) -> list[str]:
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


def _check_resumable(paths: loops.LoopPaths, loop: dict, budget: dict, raise_to: dict) -> None:
    outcome = loop.get("outcome") or ""
    if loops.is_cancelled(paths) or outcome == router.CANCELLED:
        raise loops.LoopError(
            f"loop {paths.name} was cancelled; a cancelled loop stays ended. Start a new loop with "
            "/loopwright:loop"
        )
    if outcome == router.LOOP_DONE:
        raise loops.LoopError(
            f"loop {paths.name} already finished (LOOP_DONE); start a new loop for more work"
        )
    if outcome.startswith("GATE_STOP"):
        gate = outcome.partition(":")[2]
        it = next(
            (
                g.get("iteration")
                for g in reversed(budget.get("gates_log") or [])
                if g.get("name") == gate and g.get("answer") == "stop"
            ),
            "?",
        )
        raise loops.LoopError(
            f"Loop already stopped at gate {gate} in iteration {it}; start a new loop to go on"
        )
    if not outcome.startswith(RESUMABLE_PREFIXES):
        raise loops.LoopError(f"loop {paths.name} ended {outcome}; it cannot be resumed")
    trial = dict(budget, **{k: v for k, v in raise_to.items() if v is not None})
    counted = modes.get(loop.get("mode")).counted
    hit = budgets.exhausted(trial, tuple(d for d in DIMENSIONS if d not in counted))
    if hit:
        dim = hit[0]
        raise loops.LoopError(
            f"loop {paths.name} ended {outcome} with {budgets.describe(trial, dim)}; resume with a higher "
            f"--max-{dim} (ceilings never change silently)"
        )


def _wait_for_lock(paths: loops.LoopPaths, budget: dict, session: str | None, max_wait: float) -> dict | None:
    """Poll until the lock is free or stale, at most ``max_wait`` seconds. Returns the lock if still held."""
    deadline = time.monotonic() + max_wait
    while True:
        lk = loops.read_state(paths, "lock")
        if not lk or lk.get("owner") == locks.owner_tag(session) or locks.is_stale(lk, time.time()):
            return None
        if time.monotonic() >= deadline:
            return lk
        time.sleep(WAIT_POLL_SECONDS)


def resume(
    state: Path,
    name: str | None,
    session: str | None,
    *,
    lock_mode: str | None = None,
    raise_to: dict | None = None,
    max_wait: float | None = None,
    transcript_path: str | None = None,
) -> Resumed:
    """Continue a loop in ``session``: after an interrupt or the block cap, taking
    over a loop whose session died, or reopening a loop whose budget ran out (with
    explicitly higher ceilings). A live owner is displaced only with lock mode
    ``force``, after the force-unlock gate."""
    raise_to = {k: v for k, v in (raise_to or {}).items() if v is not None}
    paths = pick_loop(state, name, session, active_only=False)
    now = time.time()
    notes: list[str] = []
    loop, budget, mode, lk, held = _inspect_for_resume(paths, session, lock_mode, raise_to, now, notes)
    if held and mode == "skip":
        it = int(budget.get("iterations_used", 0)) + 1
        raise loops.LoopError(
            f"Previous iteration {it} still active (pid {lk.get('pid')}, {lk.get('owner')}); "
            "use --lock wait to wait for it, or --lock force to take over"
        )
    if held and mode == "wait":
        _wait_out(paths, loop, budget, session, max_wait)
    elif held and mode == "force":
        waiting = _force_unlock(paths, loop, session, raise_to, now, notes)
        if waiting is not None:
            return waiting
    return _take_over(paths, session, raise_to, notes, now, state, transcript_path)


def _inspect_for_resume(
    paths: loops.LoopPaths,
    session: str | None,
    lock_mode: str | None,
    raise_to: dict,
    now: float,
    notes: list[str],
) -> tuple[dict, dict, str, dict | None, bool]:
    """Under the loop's mutex: the loop, its budget, the lock mode, the lock and whether a
    live owner other than ``session`` holds it. Refuses an ended loop that cannot resume."""
    with loops.loop_mutex(paths):
        loop = config(paths)
        paths.configured(loop)
        budget = _budget(paths, loop, restoring=True)
        mode = lock_mode or loop.get("lock_mode") or "skip"
        if mode not in LOCK_MODES:
            raise loops.LoopError(f"--lock must be one of {', '.join(LOCK_MODES)}")
        if loop.get("status") != loops.ACTIVE:
            _check_resumable(paths, loop, budget, raise_to)
        lk = loops.read_state(paths, "lock")
        mine = bool(lk) and lk.get("owner") == locks.owner_tag(session)
        unowned = bool(lk) and lk.get("owner") == locks.owner_tag(None)  # written by an older version
        held = bool(lk) and not unowned and not mine and not locks.is_stale(lk, now)
        if lk and not held and not mine:
            notes.append(f"Reaped stale lock for pid {lk.get('pid')}")
    return loop, budget, mode, lk, held


def _wait_out(
    paths: loops.LoopPaths, loop: dict, budget: dict, session: str | None, max_wait: float | None
) -> None:
    """``--lock wait``: wait for the live owner to let go, within the minutes left."""
    limit = float(budget.get("max_minutes") or loop["max_minutes"]) * 60
    remaining = max(0.0, limit - budget.get("minutes_elapsed", 0.0) * 60)
    still = _wait_for_lock(
        paths, budget, session, remaining if max_wait is None else min(remaining, max_wait)
    )
    if still:
        raise loops.LoopError(
            f"the lock of loop {paths.name} is still held by {locks.describe(still)} after waiting; "
            "try again later"
        )


def _force_unlock(
    paths: loops.LoopPaths,
    loop: dict,
    session: str | None,
    raise_to: dict,
    now: float,
    notes: list[str],
) -> Resumed | None:
    """``--lock force``: the force-unlock gate decides. Returns the waiting result when the
    gate asks the user; None when the policy lets the take-over go ahead."""
    policy = loop.get("gate_policy") or "ask"
    gate = gates.force_unlock()
    if policy == "stop":
        raise loops.LoopError(
            "the force-unlock gate fired and the gate policy is stop; the live lock was left alone"
        )
    if policy == "ask":
        with loops.loop_mutex(paths):
            budget = _budget(paths, loop)
            pending = [g for g in budget.get("pending_gates") or [] if g["name"] != gates.FORCE_UNLOCK]
            asked = dict(gate, asked_at=locks.now_iso(now), asks=1, answer=None)
            pending.append(dict(asked, requested_by=session, raise_to=raise_to))
            budget["pending_gates"] = pending
            store.write_json(paths.budget, budget)
        journal.write(
            paths,
            dict(event="gate", gate=gates.FORCE_UNLOCK, answer=None, by="asked", question=gate["question"]),
            session=session,
            now=now,
        )
        return Resumed(paths, loop, notes, waiting_gate=gate)
    notes.append("force-unlock: the gate policy is continue, so the live lock was taken over")
    _record_policy_gate(paths, loop, gate, "yes", now)
    return None


def _record_policy_gate(paths: loops.LoopPaths, loop: dict, gate: dict, answer: str, now: float) -> None:
    with loops.loop_mutex(paths):
        budget = _budget(paths, loop)
        _log_gate(budget, gate, answer, now, "policy")
        store.write_json(paths.budget, budget)


def _log_gate(budget: dict, gate: dict, answer: str, now: float, by: str) -> None:
    """A gate answered between ticks: into this iteration's record and the loop's log."""
    entry = gates.record(gate, answer, locks.now_iso(now), by)
    budget.setdefault("gates_this_iter", []).append(entry)
    gates.log(budget, entry, int(budget.get("iterations_used", 0)) + 1)


def _take_over(
    paths: loops.LoopPaths,
    session: str | None,
    raise_to: dict,
    notes: list[str],
    now: float,
    state: Path,
    transcript_path: str | None = None,
) -> Resumed:
    with loops.loop_mutex(paths):
        loop = config(paths)
        paths.configured(loop)
        commit.recover(paths, loop)
        loop = config(paths)
        if loops.missing_state(paths, loop) == paths.history.name:  # a gone budget comes back from it
            raise loops.StateMissing(paths.name, paths.history.name)
        gone = not os.path.lexists(paths.budget)
        budget = _budget(paths, loop, restoring=True)
        budget.pop("tick", None)  # applied (recover saw to it): a reopened loop must not replay its end
        previous = loop.get("owner_session")
        if session and previous != session and starting.owned_active_loop(state, session):
            raise loops.LoopError("this session already runs another loop; finish or cancel it first")
        if gone or previous != session or loop.get("status") != loops.ACTIVE:
            # Crash recovery or a new run: the counters come from the history line, and
            # the PRs and worktrees it names are reconciled once.
            notes += _restore_from_history(paths, budget)
            notes += _reconcile(
                Path(loop.get("project_dir") or state.parent), budget, loop.get("gate_policy") or "ask"
            )
        for key, value in raise_to.items():
            old = budget.get(key)
            if value != old:
                budget[key] = value
                loop[key] = value
                notes.append(f"{key} {old} → {value}")
        if raise_to:
            journal.write(
                paths, dict(event="ceilings", changed=raise_to, by="resume"), session=session, now=now
            )
        if loop.get("status") != loops.ACTIVE:
            notes.append(f"reopened after {loop.get('outcome')}")
            loops.mark_active(paths)
            loop.update(status=loops.ACTIVE, outcome=None, ended_at=None, end_reason=None)
            try:
                paths.stop.unlink()
            except FileNotFoundError:
                pass
        if previous != session and transcript_path:
            # A new session's transcript: reading starts here, not at its beginning.
            budget["cursor"] = dict(
                starting.start_cursor(transcript_path) or budget.get("cursor") or {},
                last_ts=(budget.get("cursor") or {}).get("last_ts"),
            )
        loop["owner_session"] = session
        store.write_json(paths.lock, locks.new_lock(session, int(budget.get("iterations_used", 0)) + 1, now))
        store.write_json(paths.budget, budget)
        loop = loops.save_config(paths, loop)
    journal.write(paths, dict(event="resume", previous_owner=previous, notes=notes), session=session, now=now)
    return Resumed(paths, loop, notes)


# --- gates --------------------------------------------------------------------------------------


def answer_gate(
    state: Path,
    name: str | None,
    session: str | None,
    gate_name: str,
    answer: str,
    raise_to: dict | None = None,
) -> str:
    """Record the user's answer to a waiting gate; the next Stop acts on it.
    A force-unlock ``yes`` takes the loop over right away."""
    raise_to = {k: v for k, v in (raise_to or {}).items() if v is not None}
    paths = pick_loop(state, name, session, active_only=False)
    now = time.time()
    gate = _record_answer(paths, gate_name, answer, raise_to, now)
    journal.write(
        paths,
        dict(event="gate", gate=gate_name, answer=answer, by="user", question=gate["question"]),
        session=session,
        now=now,
    )
    if gate_name == gates.FORCE_UNLOCK:
        return _act_on_force_unlock(state, paths, session, gate, answer, now)
    return (
        f"loopwright: recorded {answer!r} for gate {gate_name} of loop {paths.name}; "
        "it takes effect when this turn ends."
    )


def _record_answer(paths: loops.LoopPaths, gate_name: str, answer: str, raise_to: dict, now: float) -> dict:
    """Check the answer against the waiting gate and store it; returns the gate. A
    force-unlock answer is logged at once: no Stop of the loop's owner will act on it."""
    with loops.loop_mutex(paths):
        loop = config(paths)
        paths.configured(loop)
        budget = _budget(paths, loop)
        try:
            gate = gates.validate_answer(budget.get("pending_gates") or [], gate_name, answer)
        except ValueError as exc:
            raise loops.LoopError(str(exc)) from None
        if raise_to and (gate_name != gates.BUDGET_ESCALATION or answer != "raise"):
            raise loops.LoopError("--max-* values go only with: gate answer budget-escalation raise")
        gate.update(answer=answer, answered_at=locks.now_iso(now), answered_by="user")
        if raise_to:
            gate["raise_to"] = raise_to
        if gate_name == gates.FORCE_UNLOCK:
            budget["pending_gates"] = [g for g in budget["pending_gates"] if g is not gate]
            _log_gate(budget, gate, answer, now, "user")
        store.write_json(paths.budget, budget)
    return gate


def _act_on_force_unlock(
    state: Path, paths: loops.LoopPaths, session: str | None, gate: dict, answer: str, now: float
) -> str:
    if answer == "yes":
        requester = gate.get("requested_by") or session
        taken = ["force-unlocked by the user"]
        res = _take_over(paths, requester, gate.get("raise_to") or {}, taken, now, state)
        owner = res.loop.get("owner_session")
        return f"loopwright: force-unlock confirmed; loop {res.paths.name} now belongs to session {owner}."
    if answer != "stop":
        return f"loopwright: the live lock of loop {paths.name} was left alone."
    with loops.loop_mutex(paths):
        loop = config(paths)
        if loop.get("status") == loops.ACTIVE:
            why = "the user answered stop at gate force-unlock"
            outcome = router.gate_stop(gates.FORCE_UNLOCK)
            return ending.end_loop(paths, loop, _budget(paths, loop, ending=True), outcome, why, now)
    return f"loopwright: loop {paths.name} stays ended."


# --- iteration reports ------------------------------------------------------------------------

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
        budget = _budget(paths, loop)
    record = {
        "at": locks.now_iso(),
        "iteration": int(budget.get("iterations_used", 0)) + 1,
        "session": session,
        **{k: v for k, v in entry.items() if v not in (None, [], "")},
    }
    store.append_jsonl(paths.reports, record)
    return paths, record
