"""Telling the user that a loop ended or that a gate waits for them, for every loop: one
in an interactive session as well as `loopwright run`'s.

The notifiers are the user's own (``notify`` in config.json beside the key, see
state/userconfig.py), else the webhooks and desktop ones the project's .loopwright.json
names (``run.notify``; a committed file never runs a command), as `loopwright run`
takes them. A detached process (hooks/notify.py, runner/notify.py ``main``) sends them
within a time bound: a hook never waits on the network. A process whose `loopwright run`
has notifiers of its own (runner/notify.py sets OWN_NOTIFIER) leaves its loop's events
to them, so nothing is told twice.
"""

from __future__ import annotations

import os

from loopwright.state import journal, loops

OWN_NOTIFIER = "LOOPWRIGHT_RUN_NOTIFIES"  # set by a runner whose --notify (or run.notify) tells
PROJECT_KINDS = ("webhook:", "slack:", "desktop")  # what a committed file may name, as run takes it


def loop_ended(paths: loops.LoopPaths, loop: dict, outcome: str, reason: str, now: float) -> None:
    """The loop ended (called once, when loop.json says so)."""
    _tell(paths, loop, now, event="loop_ended", outcome=outcome, reason=reason, report=str(paths.report))


def gates_waiting(paths: loops.LoopPaths, loop: dict, before: dict, after: dict | None, redactions) -> None:
    """After a tick: the gates it asked for the first time (in ``after``'s pending gates,
    not in ``before``'s) wait for the user's answer. Never raises: the tick is committed."""
    try:
        seen = {(g.get("name"), g.get("asked_at")) for g in before.get("pending_gates") or []}
        fresh = [
            g
            for g in (after or {}).get("pending_gates") or []
            if not g.get("answer") and (g.get("name"), g.get("asked_at")) not in seen
        ]
        if not fresh:
            return
        from loopwright.state.claudemd import redact

        gates = [
            dict(name=g.get("name"), question=redact(g.get("question"), redactions), options=g.get("options"))
            for g in fresh
        ]
    except Exception:
        return
    reason = "; ".join(f"gate {g['name']}: {g['question']}" for g in gates)
    _tell(paths, loop, None, event="gate_waiting", reason=reason, gates=gates)


def notifiers(project) -> list[str]:
    """The user's notifiers, else the webhooks and desktop ones the project names."""
    from loopwright.state import userconfig

    own = userconfig.notifiers()
    if own is not None:
        return own
    from loopwright.state.project import project_config

    config, _ = project_config(project)
    named = (config.get("run") or {}).get("notify") or []
    return [s for s in named if isinstance(s, str) and s.startswith(PROJECT_KINDS)]


def _tell(paths: loops.LoopPaths, loop: dict, now: float | None, **event) -> None:
    """Start the detached notifier for ``event``; never raises (a notifier never affects the loop)."""
    if os.environ.get(OWN_NOTIFIER):
        return
    from loopwright.core.clock import now_iso

    session = loop.get("owner_session")
    try:
        event["reason"] = str(event.get("reason") or "")[:2000]
        specs = notifiers(paths.state.parent)
        if not specs:
            return
        event = {"loop": paths.name, "project": str(paths.state.parent), "at": now_iso(now), **event}
        pid = _spawn({"event": event, "specs": specs, "state": str(paths.state), "loop": paths.name})
        note = {"event": "notify", "what": event["event"], "pid": pid, "notifiers": _kinds(specs)}
    except Exception as exc:  # an unreadable config.json, no process to start: one journal line
        note = {"event": "notify_failed", "what": event.get("event"), "error": str(exc)[:300]}
    try:
        journal.write(paths, note, session=session, now=now)
    except Exception:
        pass


def _kinds(specs: list[str]) -> list[str]:
    """What the journal keeps of the notifiers: their kinds (a URL can hold a secret)."""
    return [s.partition(":")[0] for s in specs]


def _spawn(job: dict) -> int:
    """hooks/notify.py with ``job`` on stdin, detached: its own session, no pipe of ours
    kept open, so the hook's caller is not kept waiting for it."""
    import subprocess
    import sys

    from loopwright.core import jsoncodec
    from loopwright.state import plugindir

    script = plugindir.root() / "hooks" / "notify.py"
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(script)],  # nothing from the cwd, as the hooks
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    proc.stdin.write(jsoncodec.dumps(job))
    proc.stdin.close()
    return proc.pid
