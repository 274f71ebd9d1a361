"""Timestamps as loopwright writes them: ISO 8601, UTC, whole seconds, a trailing Z.
The engine is handed ``now``; these only format and parse."""

from __future__ import annotations

from datetime import datetime, timezone


def now_iso(ts: float | None = None) -> str:
    dt = datetime.fromtimestamp(ts, timezone.utc) if ts is not None else datetime.now(timezone.utc)
    return dt.isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_iso(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
