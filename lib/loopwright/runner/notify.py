"""Telling the user what happened while they were away: a loop ended, a gate waits, a
stall was recovered, a usage-limit wait began.

A notifier is ``desktop`` (notify-send where there is one), ``webhook:URL`` (a JSON POST),
``slack:URL`` (a Slack-compatible ``{"text": ...}`` POST) or ``command:CMD`` (CMD run by
the shell with the event as JSON on stdin). A notifier that fails never affects the loop:
its first failure is reported, later ones are not.
"""

from __future__ import annotations

import json
import shutil
import subprocess

from loopwright.core.errors import UserError

KINDS = ("desktop", "webhook", "slack", "command")
TIMEOUT = 10.0


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
    return f"loopwright: loop {event.get('loop')} {what}{reason}"


class Notifiers:
    def __init__(self, specs: list[str], report):
        self.targets = [parse(s) for s in specs]
        self.report = report
        self.failed: set[int] = set()

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
