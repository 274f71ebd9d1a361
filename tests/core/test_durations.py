"""An iteration's duration from its history line, and the histogram the metrics publish: what
a line whose writer could put anything in it counts as."""

from __future__ import annotations

from loopwright.core.durations import BUCKETS, Histogram, seconds_of


def line(start="2026-01-01T00:00:00Z", end="2026-01-01T00:01:30Z", **extra) -> dict:
    return {"iteration": 1, "outcome": "continued", "started_at": start, "ended_at": end, **extra}


def test_a_duration_is_the_time_between_its_stamps():
    assert seconds_of(line()) == 90.0
    assert seconds_of(line(start="2026-01-01T00:00:00+00:00", end="2026-01-01T01:00:00.5+00:00")) == 3600.5


def test_what_is_no_iteration_or_no_duration_counts_as_none():
    assert seconds_of(line(counted=False)) is None  # a wait or a gate turn
    for bad in (None, 7, "noon", "2026-13-01T00:00:00Z", ["2026-01-01T00:00:00Z"]):
        assert seconds_of(line(start=bad)) is None
    assert seconds_of(line(end="2025-12-31T23:59:59Z")) is None  # ended before it started
    assert seconds_of(line(end="2027-01-01T00:00:00Z")) is None  # a clock that was wrong
    for not_a_line in (None, [], "line", 3):
        assert seconds_of(not_a_line) is None


def test_the_histogram_counts_durations_cumulatively_and_every_iteration():
    h = Histogram()
    for took in ("00:00:04", "00:00:05", "00:00:06", "02:00:00"):
        h.add_line(line(end=f"2026-01-01T{took}Z"))
    h.add_line(line(start="garbage"))  # an iteration with no duration
    h.add_line(line(counted=False))  # no iteration
    h.add_line("not a line")
    assert h.iterations == 5 and h.count == 4 and h.sum == 4 + 5 + 6 + 7200
    shown = dict(h.cumulative())
    assert list(shown) == [f"{b:g}" for b in BUCKETS] + ["+Inf"]
    assert (shown["5"], shown["15"], shown["3600"], shown["+Inf"]) == (2, 3, 3, 4)
    both = h.plus(h)
    assert both.iterations == 10 and dict(both.cumulative())["+Inf"] == 8 and both.sum == 2 * h.sum
    assert h.count == 4  # plus() made a new one
