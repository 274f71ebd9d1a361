"""The Stop hook's shell around the router: read, decide, persist, answer.

Everything that touches files, locks, processes or Claude Code's JSON is here;
the decision itself is ``router.decide``. Any failure ends in "let the session
stop" plus one line for the user: the hook never crashes a session and never
blocks on input it does not understand.
"""

from __future__ import annotations

import os
import sys
import time

from loopwright import modes
from loopwright.core import jsoncodec, router, schema
from loopwright.core.errors import UnsafePath
from loopwright.events.debuglog import debug
from loopwright.events.hookinput import HookInput, parse_stdin
from loopwright.events.observe import LATE_ENV, observe, project_rules
from loopwright.state import claudemd, journal, loops, store
from loopwright.state.fspath import Path
from loopwright.state.project import state_dir
from loopwright.tick import commit, notices

# Whether this process ticked a loop its session owns: hooks/stop_local.py then starts the
# resident Stop server (events/resident.py) for the loop's next Stops.
OWNER_SEEN = False
# Set by the resident Stop server: lets the launcher go (its process ends, and Claude Code with
# it goes on). A continuing tick is answered as soon as it is committed (budget.json); its
# effects (commit.finish: safe to redo, and redone by the next Stop should this process die)
# are written after, under the same mutex. In the hook's own process the answer waits for them.
RELEASE = None
ANSWERED = False  # whether RELEASE has had this Stop's answer

# --- finding the session's loop -------------------------------------------------


def find_loop(state: Path, hook: HookInput, now: float, notes: list[str]) -> loops.LoopPaths | None:
    """The active loop owned by this session. A loop that is not this user's own, or
    that no session owns yet, is never taken: unowned loops wait for the user to
    attach them (`/loopwright:resume NAME`)."""
    try:
        found = loops.scan_active(state)
    except UnsafePath as exc:
        notes.append(f"loopwright: {exc}; loops in this project are ignored until it is fixed.")
        return None
    for f in found:
        if f.config is not None:
            if f.config.get("owner_session") == hook.session_id:
                return f.paths
            continue
        if isinstance(f.problem, store.CorruptFile):
            notes.append(
                f"loopwright: loop {f.paths.name}: {f.problem}; the loop is stopped. "
                "Start a new one if needed."
            )
            loops.clear_active(f.paths)
        elif _claims(f.paths, hook.session_id):
            notes.append(f"loopwright: {f.problem}")
    return None


def _claims(paths: loops.LoopPaths, session: str) -> bool:
    """Whether an untrusted loop names this session as its owner (then, and only then,
    the session is told why nothing happens: a planted loop stays silent elsewhere)."""
    try:
        cfg = loops.read_unverified(paths)
    except UnsafePath:
        return False
    return bool(cfg) and cfg.get("owner_session") == session


# --- persisting and answering ---------------------------------------------------


def apply(
    paths: loops.LoopPaths,
    loop: dict,
    snap: router.Snapshot,
    decision: router.Decision,
    ledger: dict | None = None,
    notes: tuple = (),
) -> dict:
    """Persist a decision and return the hook's JSON answer. Holds the loop mutex.

    Nothing is counted for a HOLD. Otherwise the tick is committed by one atomic
    write of budget.json (see commit.py), then its effects are applied."""
    global ANSWERED
    now, sid = snap.now, snap.session_id
    redactions = project_rules(loop).redactions
    entries = [
        claudemd.redact(
            journal.stamped(paths, sid, now, {**e, "iteration": decision.iteration or None}), redactions
        )
        for e in decision.journal
    ]
    if decision.action == router.HOLD:
        journal.append(paths, entries)
        return {"systemMessage": decision.system_message}
    if decision.action == router.CONTINUE and snap.lock_state != router.LOCK_OURS:
        taken = {
            "event": "lock",
            "result": "acquired",
            "previous": snap.lock_state,
            "iteration": decision.iteration,
        }
        entries.append(journal.stamped(paths, sid, now, taken))
    record = commit.tick_record(loop, decision, snap, entries, redactions)
    budget = dict(decision.budget, tick=record)
    store.write_json(paths.budget, budget)  # the commit point of this tick
    # Early only with the lock already ours: a lock taken now names the Claude Code process above
    # the launcher, which must still be there to be found.
    if decision.action == router.CONTINUE and RELEASE is not None and snap.lock_state == router.LOCK_OURS:
        emit(noted(_continuing(decision), notes))
        ANSWERED = True
        RELEASE()
    summary = commit.finish(paths, loop, budget, ledger, redactions)
    notices.gates_waiting(paths, loop, snap.budget, decision.budget, redactions)  # gates asked first now
    if decision.action == router.STOP:
        return {"systemMessage": summary}
    if decision.action == router.PAUSE:
        return {"systemMessage": decision.system_message}
    return _continuing(decision)


def _continuing(decision: router.Decision) -> dict:
    return {"decision": "block", "reason": decision.prompt, "systemMessage": decision.system_message}


def noted(answer: dict | None, notes) -> dict | None:
    """The answer with the tick's notes for the user before its own message."""
    if notes and answer is not None:
        answer = dict(answer, systemMessage=" ".join([*notes, answer.get("systemMessage") or ""]).strip())
    return answer


def handle(raw: bytes) -> dict | None:
    """One Stop event. Returns the JSON answer, or None to let the session stop quietly."""
    try:
        hook = parse_stdin(raw)
    except ValueError as exc:
        debug(state_dir(), f"bad stdin: {exc}")
        note = f"loopwright: ignored a Stop event it could not read ({exc}); the session may stop."
        return {"systemMessage": note}
    state = state_dir(hook.cwd)
    now = time.time()
    notes: list[str] = []
    paths = find_loop(state, hook, now, notes)
    if paths is None:
        debug(state, f"session {hook.session_id}: no loop; pass through")
        return {"systemMessage": " ".join(notes)} if notes else None
    global OWNER_SEEN
    OWNER_SEEN = True
    try:
        with loops.loop_mutex(paths):
            answer, decision = _tick(paths, hook, now, notes)
    except UnsafePath as exc:
        return {"systemMessage": f"loopwright: loop {paths.name}: {exc}"}
    if decision is not None:
        debug(
            state,
            f"session {hook.session_id}: loop {paths.name}: {decision.action} {decision.outcome or ''} "
            f"({decision.reason})",
        )
    return noted(answer, notes)


def _tick(paths: loops.LoopPaths, hook: HookInput, now: float, notes: list[str]):
    """Observe, decide, apply: one tick under the loop mutex. Returns (answer, decision)."""
    try:
        loop = loops.load_config(paths)
        if not loop or loop.get("status") != loops.ACTIVE or loop.get("owner_session") != hook.session_id:
            return None, None  # ended or taken over while we waited for the mutex
        paths.configured(loop)
        store.remove_stale_temps(paths.dir)
        summary = commit.recover(paths, loop, project_rules(loop).redactions)
        if summary is not None:  # the previous tick ended the loop but was cut short
            return {"systemMessage": summary}, None
        missing = loops.missing_state(paths, loop)  # after recover: a tick cut short writes history
        if missing:
            raise loops.StateMissing(paths.name, missing)
        ledger = loops.read_state(paths, "ledger")
        snap = observe(paths, loop, hook, now, notes)
    except store.CorruptFile as exc:
        return _stop_on_corrupt(paths, hook, now, exc), None
    except loops.StateMissing as exc:
        return _stop_on_missing(paths, loop, hook, now, exc), None
    except (loops.UntrustedLoop, UnsafePath) as exc:
        return {"systemMessage": f"loopwright: {exc}"}, None
    except (schema.SchemaError, modes.UnknownMode) as exc:  # signed by us, but by another version
        note = f"loopwright: loop {paths.name}: {exc}; it is left as it is (`loopwright doctor`)"
        return {"systemMessage": note}, None
    decision = router.decide(snap)
    if decision.action == router.STOP and snap.turn.lagging and os.environ.get(LATE_ENV) != "1":
        return _defer_final_tick(paths, hook, decision, now), decision
    return apply(paths, loop, snap, decision, ledger, tuple(notes)), decision


def _defer_final_tick(paths: loops.LoopPaths, hook: HookInput, decision: router.Decision, now: float) -> dict:
    """The loop ends at this Stop, but the transcript has not caught up with the final
    turn: committing now would leave that turn's spend out of budget.json, the history
    and the report for good. A detached process (holding no pipe of Claude Code's, so
    the session stops at once) redoes this tick once the transcript has the turn."""
    import subprocess
    import sys

    from loopwright.state import plugindir

    script = plugindir.root() / "hooks" / "stop.py"
    env = dict(os.environ, **{LATE_ENV: "1"})
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(script)],  # as hooks/stop starts it: nothing from the cwd
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        close_fds=True,
    )
    proc.stdin.write(hook.raw)
    proc.stdin.close()
    journal.write(
        paths,
        {
            "event": "deferred",
            "outcome": decision.outcome,
            "pid": proc.pid,
            "reason": "the transcript had not caught up with the final turn; the last tick waits for it",
        },
        session=hook.session_id,
        now=now,
    )
    return {
        "systemMessage": f"loopwright · {paths.name} is ending ({decision.outcome}): {decision.reason}. "
        "The final turn's spend is still being written by Claude Code; the report follows when it lands "
        "(`loopwright status`)."
    }


def _stop_on_corrupt(paths: loops.LoopPaths, hook: HookInput, now: float, exc: store.CorruptFile) -> dict:
    """A state file did not parse or had the wrong shape: it has been moved aside; stop the loop safely."""
    journal.write(
        paths,
        {"event": "corrupt", "file": exc.path.name, "moved_to": str(exc.moved_to), "detail": exc.detail},
        session=hook.session_id,
        now=now,
    )
    loop = None
    try:
        loop = loops.load_config(paths)
    except (store.CorruptFile, loops.UntrustedLoop, UnsafePath):
        pass
    if loop and loop.get("status") == loops.ACTIVE:
        from loopwright.tick import ending

        budget = router.initial_budget(loop)
        try:
            budget = loops.read_state(paths, "budget") or budget
        except (store.CorruptFile, UnsafePath):
            pass
        ending.end_loop(paths, loop, budget, router.stopped("corrupt-state"), str(exc), now)
    else:
        loops.clear_active(paths)
    return {
        "systemMessage": f"loopwright: loop {paths.name} stopped: {exc}. Inspect it with `loopwright status`."
    }


def _stop_on_missing(
    paths: loops.LoopPaths, loop: dict, hook: HookInput, now: float, exc: loops.StateMissing
) -> dict:
    """budget.json or history.jsonl of a signed active loop is gone: the loop ends
    ``STOPPED:state_missing``, its report naming the file; its counters come from what is left
    (the budget, else the last history line), never from zero."""
    from loopwright.tick import ending

    journal.write(paths, {"event": "state_missing", "file": exc.what}, session=hook.session_id, now=now)
    budget = None
    try:
        budget = loops.read_state(paths, "budget", move_corrupt=False)
    except (store.CorruptFile, UnsafePath):
        pass
    if budget is None:
        budget = router.initial_budget(loop)
        try:
            last = loops.last_snapshot(paths)
        except UnsafePath:
            last = None
        budget.update(last["budget_snapshot"] if last else {})
    reason = f"{exc.what} was missing: the loop stops rather than count again from zero"
    summary = ending.end_loop(paths, loop, budget, router.stopped("state_missing"), reason, now)
    return {"systemMessage": f"loopwright: {exc}. {summary}"}


def main_with(raw: bytes) -> int:
    """Answer one Stop event: never raises, always exits 0."""
    try:
        answer = handle(raw)
    except ImportError as exc:  # a dependency the common path does without (psutil for a foreign lock)
        answer = {
            "systemMessage": (
                "loopwright: this Stop needs a Python package that is missing "
                f"({getattr(exc, 'name', None) or exc}); "
                "the session stops here. Start a new session so the SessionStart hook installs it, "
                "or run `loopwright doctor`."
            )
        }
    except Exception as exc:  # the hook must never crash a session
        try:
            debug(state_dir(), f"internal error: {exc!r}")
        except Exception:
            pass
        answer = {
            "systemMessage": f"loopwright: internal error in the Stop hook ({type(exc).__name__}: {exc}); "
            "the session may stop. Run `loopwright doctor`."
        }
    if answer and not ANSWERED:
        emit(answer)
    return 0


def emit(answer: dict) -> None:
    """Write the hook's answer for Claude Code."""
    sys.stdout.buffer.write(jsoncodec.dumps(safe_answer(answer)))
    sys.stdout.flush()


def safe_answer(answer: dict) -> dict:
    """Claude Code shows these strings on the user's terminal: no escape sequences in them."""
    from loopwright.core.termsafe import clean

    return {k: clean(v) if isinstance(v, str) else v for k, v in answer.items()}


# --- auto-backprop: a failing test run noticed as it happens -------------------------------------
