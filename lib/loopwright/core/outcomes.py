"""The router's actions and the loop's terminal outcomes (SPEC §4.12)."""

from __future__ import annotations

CONTINUE, STOP, HOLD, PAUSE = "continue", "stop", "hold", "pause"

# Terminal outcomes (SPEC §4.11).
LOOP_DONE = "LOOP_DONE"


MAX_ITERATIONS = "MAX_ITERATIONS"


CANCELLED = "CANCELLED"


EXTERNAL_UNREACHABLE = "EXTERNAL_UNREACHABLE"


DEPENDENCY_CYCLE = "DEPENDENCY_CYCLE"


OUTAGE_LIMIT = 2  # consecutive iterations with the external service unreachable


def budget_exhausted(what: str) -> str:
    return f"BUDGET_EXHAUSTED:{what}"


def stopped(reason: str) -> str:
    return f"STOPPED:{reason}"


def gate_stop(gate: str) -> str:
    return f"GATE_STOP:{gate}"
