"""The ceilings of a fleet loop after its budget-escalation gate is answered ``raise``. Pure.

A fleet loop's ceilings are its row's ``spec.limits``: every worker that claims the loop starts
its runner with them (fleet/spec.py), so the raised ceiling is written there, and the loop goes
on under it with the next claim. The new ceiling must be above the one the loop had and above
what it used already; with none given, each ceiling the gate asks about is raised as a local
loop's ``gate answer budget-escalation raise`` raises it (half as much again).
"""

from __future__ import annotations

from loopwright.core import budget as budgets
from loopwright.core.gates import BUDGET_ESCALATION

# What a fleet row counts of each dimension (no row counts pull requests).
USED = {"iterations": "iteration", "minutes": "minutes", "tokens": "tokens", "dollars": "dollars"}
KEYS = {budgets.CEILING_KEY[d]: d for d in budgets.DIMENSIONS}


class RaiseError(ValueError):
    """The raise asked for cannot be made: one line saying why and what to give."""


def _number(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def asked(gate: dict, limits: dict) -> list[str]:
    """The ceilings (``max_*`` keys) a raise may change: those of the dimensions the gate
    names, or, for a gate that names none, those the loop has."""
    dims = gate.get("dimensions") if isinstance(gate.get("dimensions"), list) else []
    keys = [budgets.CEILING_KEY[d] for d in dims if d in budgets.CEILING_KEY]
    return keys or [k for k in KEYS if _number(limits.get(k)) is not None]


def _check(key: str, value, old: float | None, used: float | None) -> None:
    what = key.replace("_", "-")
    if _number(value) is None:
        raise RaiseError(f"the new --{what} must be a number, not {str(value)[:40]!r}")
    if old is not None and value <= old:
        shown = budgets.fmt(KEYS[key], old)
        raise RaiseError(f"the new --{what} ({value}) must be above the ceiling it has ({shown})")
    if used is not None and value <= used:
        shown = budgets.fmt(KEYS[key], used)
        raise RaiseError(f"the new --{what} ({value}) must be above what the loop used already ({shown})")


def raised(row: dict, gate: dict, raise_to: dict | None) -> tuple[dict, dict]:
    """The loop's new limits and what changed (``{key: [old, new]}``, old None when it had no
    such ceiling), for the answer ``raise`` to ``gate``. RaiseError when it cannot be made."""
    if gate.get("name") != BUDGET_ESCALATION:
        raise RaiseError(f"only gate {BUDGET_ESCALATION} raises ceilings, not {str(gate.get('name'))[:60]}")
    spec = row.get("spec") if isinstance(row.get("spec"), dict) else {}
    limits = dict(spec.get("limits")) if isinstance(spec.get("limits"), dict) else {}
    keys = asked(gate, limits)
    raise_to = {k: v for k, v in (raise_to or {}).items() if v is not None}
    for key in raise_to:
        if key not in keys:
            raise RaiseError(f"{str(key)[:40]} is not a ceiling this gate asks about: give {', '.join(keys)}")
    if not raise_to:
        raise_to = {k: budgets.raised(limits[k], KEYS[k]) for k in keys if _number(limits.get(k)) is not None}
        if not raise_to:
            raise RaiseError(
                f"give the new ceiling ({', '.join(keys) or 'max_dollars'}): the loop has none to raise"
            )
    changes = {}
    for key, value in raise_to.items():
        old = limits.get(key) if _number(limits.get(key)) is not None else None
        _check(key, value, _number(old), _number(row.get(USED.get(KEYS[key], ""))))
        limits[key] = value
        changes[key] = [old, value]
    return limits, changes
