"""Telling the user what happened while they were away: a loop ended, a gate waits, a
stall was recovered, a usage-limit wait began.

A notifier is ``desktop`` (notify-send where there is one), ``webhook:URL`` (a JSON POST),
``slack:URL`` (a Slack-compatible ``{"text": ...}`` POST) or ``command:CMD`` (CMD run by
the shell with the event as JSON on stdin). A notifier that fails never affects the loop:
its first failure is reported, later ones are not.

``main`` is the detached notifier every loop's hooks and commands start (tick/notices.py,
hooks/notify.py): it sends one event within BOUND seconds and records failures in the
loop's journal.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from loopwright.core.errors import UserError
from loopwright.tick.notices import OWN_NOTIFIER

KINDS = ("desktop", "webhook", "slack", "command")
TIMEOUT = 10.0
BOUND = 120.0  # the detached notifier's whole life, all notifiers together
BOUND_ENV = "LOOPWRIGHT_NOTIFY_SECONDS"


class NotifyError(UserError):
    pass


def parse(spec: str) -> tuple[str, str]:
    """``kind`` and its target from ``desktop``, ``webhook:URL``, ``slack:URL``, ``command:CMD``."""
    kind, _, target = spec.partition(":")
    if kind == "desktop" and not target:
        return kind, ""
    if kind in ("webhook", "slack") and target.startswith(("http://", "https://")):
        return kind, target
    if kind == "command" and target.strip():
        return kind, target
    raise NotifyError(
        f"--notify {spec!r}: use desktop, webhook:https://..., slack:https://... or command:CMD"
    )


def summary(event: dict) -> str:
    """One line for a person."""
    what = {
        "loop_ended": f"ended {event.get('outcome')}",
        "gate_waiting": "waits for your answer to a gate",
        "stall_recovered": "stalled and was resumed",
        "quota_wait": "waits for a usage limit to reset",
    }.get(event.get("event"), event.get("event"))
    reason = f": {event['reason']}" if event.get("reason") else ""
    error = event.get("last_error")  # the client's error, when the reason does not hold it already
    if isinstance(error, str) and error and error not in reason:
        reason += f" (last client error: {error})"
    return f"loopwright: loop {event.get('loop')} {what}{reason}"


class Notifiers:
    def __init__(self, specs: list[str], report, *, own_loop: bool = True):
        self.targets = [parse(s) for s in specs]
        self.report = report
        self.failed: set[int] = set()
        if self.targets and own_loop:
            # This runner tells of its loop: the hooks of its client and its own end of the
            # loop leave that to it (tick/notices.py), so no event is told twice.
            os.environ[OWN_NOTIFIER] = str(os.getpid())

    def send(self, event: dict) -> None:
        for i, (kind, target) in enumerate(self.targets):
            try:
                _SEND[kind](target, event)
            except Exception as exc:  # any failure: reported once, the loop goes on
                if i not in self.failed:
                    self.failed.add(i)
                    self.report("notify_failed", notifier=kind, target=target, error=str(exc)[:300])


def _post(url: str, body: dict) -> None:
    import urllib.request

    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:  # noqa: S310 - the user's own URL
        if resp.status >= 300:
            raise OSError(f"HTTP {resp.status}")


def _desktop(_target: str, event: dict) -> None:
    tool = shutil.which("notify-send")
    if tool is None:
        raise OSError("no desktop notifier (notify-send) on this machine")
    subprocess.run([tool, "loopwright", summary(event)], check=True, timeout=TIMEOUT, capture_output=True)


def _command(cmd: str, event: dict) -> None:
    subprocess.run(
        cmd, shell=True, input=json.dumps(event).encode(), check=True, timeout=60, capture_output=True
    )


_SEND = {
    "desktop": _desktop,
    "webhook": lambda url, event: _post(url, event),
    "slack": lambda url, event: _post(url, {"text": summary(event)}),
    "command": _command,
}


class TimedOut(BaseException):
    """The detached notifier's bound ran out (not an Exception: send() must not swallow it)."""


def main(raw: bytes) -> int:
    """The detached notifier: ``raw`` is ``{"event", "specs", "state", "loop"}`` from
    tick/notices.py. Every notifier is tried within the bound; what fails is written to the
    loop's journal (the kind of notifier, never its target: a URL can hold a secret)."""
    import signal

    job = json.loads(raw)
    failures: list[dict] = []

    def report(_what: str, notifier: str = "", error: str = "", **_fields) -> None:
        failures.append({"notifier": notifier, "error": error})

    specs = []
    for spec in job.get("specs") or []:
        try:
            parse(str(spec))
            specs.append(str(spec))
        except NotifyError:
            report("notify_failed", notifier=str(spec).partition(":")[0], error="not a notifier")
    bound = _bound()

    def expire(_signum, _frame):
        raise TimedOut

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, bound)
    try:
        Notifiers(specs, report, own_loop=False).send(job["event"])
    except TimedOut:
        report("notify_failed", notifier="all", error=f"not done within {bound:g} s; given up")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    _journal(job, failures)
    return 0


def _bound() -> float:
    try:
        value = float(os.environ.get(BOUND_ENV) or BOUND)
    except ValueError:
        return BOUND
    return value if 0 < value <= 3600 else BOUND


def _journal(job: dict, failures: list[dict]) -> None:
    if not failures:
        return
    from loopwright.state import journal, loops
    from loopwright.state.fspath import Path

    paths = loops.LoopPaths(Path(job["state"]), loops.validate_name(job["loop"]))
    what = (job.get("event") or {}).get("event")
    entries = [dict(event="notify_failed", what=what, **f) for f in failures]
    journal.write(paths, *entries, session=None)
