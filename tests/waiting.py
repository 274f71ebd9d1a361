"""Waiting for a condition in a test: poll it until it holds, bounded so that a condition
never met fails the test instead of hanging it. The bound measures nothing, so make it
generous (the machine may be busy): only the condition decides. This is where a test
waits; tests/core/test_no_clock_asserts.py allows the clock and the sleep here."""

from __future__ import annotations

import subprocess
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(
    check: Callable[[], T],
    what: str,
    within: float = 120.0,
    every: float = 0.05,
    proc: subprocess.Popen | None = None,
) -> T:
    """``check()``'s first truthy value, asked every ``every`` seconds for up to ``within``
    seconds; with ``proc``, a process that exits meanwhile fails the wait at once. A check that
    takes longer than ``every`` (one that starts a process) waits as long as it took before it
    is asked again: polling never takes more than half of a CPU from what it waits for."""
    deadline = time.monotonic() + within
    while True:
        asked = time.monotonic()
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not so within {within} s (last: {value!r})")
        time.sleep(max(every, time.monotonic() - asked))
