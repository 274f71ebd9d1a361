"""A worker's log line for a person: `2026-11-28 04:30:01 claimed f-12ab (repo …) gen 3`.

`loopwright worker` prints one line per event; by default in this form (a service log a person
reads in journalctl), with --log-format json as one JSON object each (for machines). Every
value that came from the database or a runner (names, URLs, reasons) is one line, its control
characters shown as escapes, so that a row cannot forge log lines."""

from __future__ import annotations

import time

from loopwright.core.termsafe import one_line
from loopwright.registry.faults import PREPARE_TRIES

MAX_VALUE = 300  # characters of any one value on a line


def repo(url) -> str:
    """A repository as a log shows it: as the allow-list reads it, without http credentials."""
    from loopwright.fleet import allow

    try:
        return allow.normalised(url)
    except (allow.Refused, TypeError):
        return "(a URL no worker reads)"


def _v(value) -> str:
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value) or "none"
    return one_line(value)[:MAX_VALUE]


def _runner(event: str, loop: str, detail: dict) -> str:
    """A runner's event the worker passes on (ended, waiting, quota_wait, stall)."""
    if event == "ended":
        why = f" ({_v(detail['reason'])})" if detail.get("reason") else ""
        return f"ended {loop}: {_v(detail.get('outcome'))}{why}"
    if event == "waiting":  # the runner's advice is a local run's: a fleet loop is answered so
        why = _v(detail.get("reason")).split("; answer with ", 1)[0]
        return f"waiting {loop}: {why}; answer with `loopwright fleet answer {loop} <option>`"
    if event == "quota_wait":
        return f"usage limit {loop}: waits until {_v(detail.get('until'))} ({_v(detail.get('message'))})"
    return f"stalled {loop}: {_v(detail.get('polls'))} quiet polls"


def _said(event: str, f: dict) -> str:
    loop = _v(f.get("loop", ""))
    if event == "started":
        verify = f"; verify {_v(f.get('allow_verify'))}" if f.get("allow_verify") else ""
        slots = f"{_v(f.get('slots'))} slot{'' if f.get('slots') == 1 else 's'}"
        return (
            f"started worker {_v(f.get('worker'))} on {_v(f.get('host'))}: {slots}, "
            f"repositories {_v(f.get('allow'))}{verify}"
        )
    if event == "claimed":
        again = f", failover {f['failovers']}" if f.get("failovers") else ""
        repo = f" (repo {_v(f['repo'])})" if f.get("repo") else ""
        return f"claimed {loop}{repo} gen {_v(f.get('generation'))}{again}"
    if event in ("pushed", "recorded"):
        return f"{event} {loop} iteration {_v(f.get('iteration'))} (commit {_v(f.get('head'))})"
    if event == "ended" and "detail" not in f:
        why = f" ({_v(f['reason'])})" if f.get("reason") else ""
        return f"ended {loop}: {_v(f.get('outcome'))}{why}"
    if isinstance(f.get("detail"), dict):
        return _runner(event, loop, f["detail"])
    if event in ("released", "lost"):
        return f"{event} {loop}: {_v(f.get('reason'))}"
    if event == "refused":
        what = _v(f.get("repo") or f.get("loop"))
        return f"refused {what}: {_v(f.get('reason'))}"
    if event == "stopped":
        return f"stopped worker {_v(f.get('worker'))}"
    if event in ("draining", "stopping"):
        return f"{event}: {_v(f.get('loops'))}"
    if event == "control":
        return f"asked to {_v(f.get('what'))} {loop}"
    if event == "prepare_failed":
        then = "it ends" if f.get("ended") else f"tried again in {_v(f.get('wait'))} s"
        tries = f"try {_v(f.get('tries'))} of {PREPARE_TRIES}"
        return f"could not prepare {loop} ({tries}; {then}): {_v(f.get('reason'))}"
    if event in ("database", "error", "items") and f.get("error"):
        return f"{event} error{' ' + loop if loop else ''}: {_v(f['error'])}"
    rest = " ".join(
        f"{k} {_v(v)}" for k, v in f.items() if k not in ("worker", "loop") and v not in (None, "")
    )
    return " ".join(p for p in (event.replace("_", " "), loop, rest) if p)


def text(event: str, fields: dict, at: float | None = None) -> str:
    """The line a person reads for ``event`` with ``fields`` (as the JSON line holds them)."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() if at is None else at))
    return f"{when} {_said(event, fields)}"
