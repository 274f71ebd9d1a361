"""Timestamps: the fast form loopwright writes agrees with datetime everywhere."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright.core import clock

MOMENTS = st.integers(min_value=-30610224000, max_value=253402300799)  # years 1000 to 9999


@given(MOMENTS)
def test_written_timestamps_round_trip(ts):
    text = clock.now_iso(ts)
    assert text == datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")
    assert clock.parse_iso(text) == ts


@given(st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31)))
def test_the_fast_parser_agrees_with_datetime(dt):
    dt = dt.replace(microsecond=0, tzinfo=timezone.utc)
    assert clock.parse_iso(dt.strftime("%Y-%m-%dT%H:%M:%SZ")) == dt.timestamp()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-11-22T10:00:05+01:00", datetime(2026, 11, 22, 9, 0, 5, tzinfo=timezone.utc).timestamp()),
        ("2026-11-22T10:00:05.5Z", datetime(2026, 11, 22, 10, 0, 5, 500000, tzinfo=timezone.utc).timestamp()),
        ("2026-11-22T10:00:05", datetime(2026, 11, 22, 10, 0, 5, tzinfo=timezone.utc).timestamp()),
        ("2024-02-29T00:00:00Z", datetime(2024, 2, 29, tzinfo=timezone.utc).timestamp()),
        ("2026-02-29T00:00:00Z", None),
        ("2026-13-01T00:00:00Z", None),
        ("2026-11-22T24:00:00Z", None),
        ("２０２６-11-22T10:00:05Z", None),
        ("yesterday", None),
        ("", None),
        (None, None),
        (17, None),
    ],
)
def test_other_forms(text, expected):
    assert clock.parse_iso(text) == expected
