"""How long iterations took, for the monitor's metrics: an iteration's duration from the history
line it left (its ``started_at`` and ``ended_at``), and a histogram of durations that adds up.
Pure: the monitor reads the lines (a fleet loop's timeline, a local loop's history.jsonl).

A line is whatever its writer put there (a teammate who can write the fleet's database, a file
in a project): a field of the wrong type, a negative or absurd duration counts as no duration,
never as an error."""

from __future__ import annotations

from loopwright.core.clock import parse_iso

# Upper bounds in seconds: an iteration is a model turn or a few, with tools; a long one runs an
# hour. A histogram's buckets never change once published (a query compares them over time).
BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
MAX_SECONDS = 7 * 86400.0  # longer is a clock that was wrong, not an iteration


def counted(line) -> bool:
    """Whether a history line is an iteration (a wait or a gate turn says ``counted: false``)."""
    return isinstance(line, dict) and line.get("counted") is not False


def seconds_of(line) -> float | None:
    """The iteration's duration in seconds; None when the line is no iteration or its times
    are missing, unreadable or absurd."""
    if not counted(line):
        return None
    start, end = parse_iso(line.get("started_at")), parse_iso(line.get("ended_at"))
    if start is None or end is None:
        return None
    took = end - start
    return took if 0.0 <= took <= MAX_SECONDS else None


NO_ITERATION = False  # iteration_of a line that is none


def iteration_of(line):
    """What a line adds to a histogram: NO_ITERATION, or an iteration with its duration in
    seconds (None when it has none): small enough to keep for many lines."""
    return seconds_of(line) if counted(line) else NO_ITERATION


class Histogram:
    """Counts of durations per bucket (not cumulative), their sum, and ``iterations``: every
    counted line, with a duration or not."""

    def __init__(self, buckets: tuple = BUCKETS) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # the last: above every bound
        self.sum = 0.0
        self.iterations = 0

    def add_line(self, line) -> None:
        self.add_iteration(iteration_of(line))

    def add_iteration(self, seen) -> None:
        """One line as :func:`iteration_of` read it."""
        if seen is NO_ITERATION:
            return
        self.iterations += 1
        if seen is not None:
            self.add(seen)

    def add(self, seconds: float) -> None:
        at = next((i for i, bound in enumerate(self.buckets) if seconds <= bound), len(self.buckets))
        self.counts[at] += 1
        self.sum += seconds

    def plus(self, other: Histogram) -> Histogram:
        """A new histogram holding both (same buckets)."""
        out = Histogram(self.buckets)
        out.counts = [a + b for a, b in zip(self.counts, other.counts)]
        out.sum, out.iterations = self.sum + other.sum, self.iterations + other.iterations
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound as text, durations at or under it), ending with ``+Inf``: the form a
        Prometheus histogram's buckets take."""
        out, running = [], 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts):
            running += n
            out.append(("+Inf" if bound == float("inf") else f"{bound:g}", running))
        return out
