"""Timestamps as loopwright writes them: ISO 8601, UTC, whole seconds, a trailing Z.
The engine is handed ``now``; these only format and parse.

The form loopwright writes is handled with ``time`` and integer arithmetic: the Stop
hook reads and writes several timestamps per event, and importing ``datetime`` would
cost it about 1 ms. Any other ISO 8601 form (an offset, fractions of a second, as a
person or an agent may write one) goes to ``datetime``."""

from __future__ import annotations

import time

_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def now_iso(ts: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def _parse_zulu(v: str) -> float | None:
    """``YYYY-MM-DDTHH:MM:SSZ`` exactly; None for any other form."""
    if len(v) != 20 or v[4] != "-" or v[7] != "-" or v[10] != "T" or v[13] != ":" or v[16] != ":":
        return None
    if v[19] != "Z":
        return None
    digits = v[0:4] + v[5:7] + v[8:10] + v[11:13] + v[14:16] + v[17:19]
    if not (digits.isascii() and digits.isdigit()):
        return None
    y, mo, d = int(v[0:4]), int(v[5:7]), int(v[8:10])
    h, mi, s = int(v[11:13]), int(v[14:16]), int(v[17:19])
    if not (y >= 1 and 1 <= mo <= 12 and h < 24 and mi < 60 and s < 60):
        return None
    if not 1 <= d <= (29 if mo == 2 and _leap(y) else _DAYS[mo - 1]):
        return None
    return float(_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s)


def parse_iso(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    fast = _parse_zulu(value)
    if fast is not None:
        return fast
    from datetime import datetime, timezone

    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:  # a time without an offset is taken as UTC, never as local time
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()
