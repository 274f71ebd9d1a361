"""A fleet loop's timeline as lines a person reads (`loopwright fleet events`): when, on which
host, which claim (its generation), what happened, and the fields that matter in words.

Every value comes from the fleet's database, which whoever can write to it can fill with
anything: each is shown on one line with control characters escaped, cut to a bounded length,
and a field of the wrong type is left out, never an error. Pure: the command reads, this words.
"""

from __future__ import annotations

import time

from loopwright.core.termsafe import one_line

FIELD = 300  # characters of one value shown
CLAIMS = ("claimed", "failover")


def _text(value, limit: int = FIELD) -> str:
    """A value shown on one line, bounded ("" for a container: nothing to word)."""
    if value is None or isinstance(value, (dict, list)):
        return ""
    out = one_line(value)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _number(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def when(at) -> str:
    """The event's time (the database's clock), in UTC to the second."""
    at = _number(at)
    if at is None or not 0 <= at < 1e11:
        return "????-??-?? ??:??:??"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def hosts_by_claim(events: list[dict]) -> dict:
    """The host of each claim (generation), from the claims' own events: the host an event
    happened on when it does not name one itself."""
    out = {}
    for e in events:
        data = e.get("data") if isinstance(e.get("data"), dict) else {}
        if e.get("kind") in CLAIMS and _text(data.get("host")):
            out[e.get("generation")] = _text(data["host"], 64)
    return out


def _iteration(d: dict) -> str:
    parts = [f"iteration {_text(d.get('iteration'), 12) or '?'}: {_text(d.get('outcome'), 64) or '?'}"]
    tokens = sum(int(_number(d.get(k)) or 0) for k in ("tokens_in_this_iter", "tokens_out_this_iter"))
    if tokens:
        parts.append(f"{tokens:,} tokens")
    dollars = _number(d.get("dollars_this_iter"))
    if dollars is not None:
        parts.append(f"${dollars:,.4f}")
    gates = (
        [g for g in d.get("gates") or [] if isinstance(g, dict)] if isinstance(d.get("gates"), list) else []
    )
    if gates:
        answered = ", ".join(
            f"{_text(g.get('name'), 64)}={_text(g.get('answer'), 64) or 'waiting'}" for g in gates
        )
        parts.append(f"gates {answered}")
    if _text(d.get("commit")):
        parts.append(f"commit {_text(d['commit'], 40)}")
    return " · ".join(parts)


def _claim(kind: str, d: dict) -> str:
    said = f"claimed by {_text(d.get('worker'), 128) or '?'}"
    if kind == "failover":
        gone = _text(d.get("from_worker"), 128) or "?"
        host = _text(d.get("from_host"), 64)
        said += f" after the lease of {gone}" + (f" on {host}" if host else "") + " ran out"
        failovers = _number(d.get("failovers"))
        if failovers is not None:
            said += f" (failover {failovers:g})"
    return f"{kind}: {said}" if kind == "failover" else said


def _with(head: str, reason) -> str:
    reason = _text(reason)
    return f"{head}: {reason}" if reason else head


# Each kind worded from its data (the rest: its name, then its plain fields as "key value").
def _worded(kind: str, d: dict) -> str | None:
    if kind == "iteration":
        return _iteration(d)
    if kind in CLAIMS:
        return _claim(kind, d)
    if kind == "released":
        return _with(f"released by {_text(d.get('worker'), 128) or '?'}", d.get("reason"))
    if kind == "ended":
        return _with(f"ended {_text(d.get('outcome'), 64) or '?'}", d.get("reason"))
    if kind == "prepare_failed":
        wait = _number(d.get("wait"))
        then = "it ends" if wait is None else f"tried again in {wait:g} s"
        tries = f"try {_text(d.get('tries'), 8) or '?'} of {_text(d.get('of'), 8) or '?'}"
        return _with(f"could not prepare it ({tries}; {then})", d.get("error"))
    if kind in ("client_error", "worker_error"):
        code = _number(d.get("code"))
        head = ("client error" if kind == "client_error" else "worker error") + (
            f" (exit code {code:g})" if code is not None else ""
        )
        return _with(head, d.get("error"))
    if kind in ("stop_requested", "cancel_requested"):
        head = kind.replace("_", " ")
        return _with(head, f"ended at once ({_text(d['ended'])})" if _text(d.get("ended")) else "")
    if kind == "gate" and "answer" in d:
        return _answered(d)
    return None


CHANNELS = {"page": "on the page", "api": "through the API", "cli": "from the command line"}


def _answered(d: dict) -> str:
    """A gate's answer: who gave it, where from, and the ceilings a raise changed."""
    channel = CHANNELS.get(d.get("by")) if isinstance(d.get("by"), str) else None
    who = _text(d.get("user"), 64) or ("" if channel else _text(d.get("by"), 64)) or "?"
    gate = _text(d.get("gate") or d.get("name"), 64) or "?"
    line = f"gate {gate} answered {_text(d['answer'], 64)} by {who}" + (f" {channel}" if channel else "")
    raised = d.get("raised") if isinstance(d.get("raised"), dict) else {}
    changes = []
    for key, pair in list(raised.items())[:5]:
        if isinstance(pair, list) and len(pair) == 2:
            old, new = (_number(v) for v in pair)
            shown = [("none" if v is None else f"{v:g}") for v in (old, new)]
            changes.append(f"{_text(key, 32).replace('_', '-')} {shown[0]} -> {shown[1]}")
    return line + (f"; raised {', '.join(changes)}" if changes else "")


def line(event: dict, hosts: dict) -> str:
    """One event as one line: time, host, claim, what happened."""
    data = event.get("data") if isinstance(event.get("data"), dict) else {}
    kind = _text(event.get("kind"), 64) or "?"
    host = _text(data.get("host"), 64) or hosts.get(event.get("generation")) or "-"
    generation = _number(event.get("generation"))
    claim = f"g{generation:g}" if generation is not None else "g?"
    what = _worded(kind, data)
    if what is None:
        plain = [f"{k} {_text(v)}" for k, v in data.items() if k != "host" and _text(v)]
        what = kind + (": " + ", ".join(plain) if plain else "")
    return f"{when(event.get('at'))}  {host:<16} {claim:<4} {what}"


def lines(events: list[dict]) -> list[str]:
    hosts = hosts_by_claim(events)
    return [line(e, hosts) for e in events if isinstance(e, dict)]
