"""Gate answers recorded since the last Stop, folded into the tick."""

from __future__ import annotations

from loopwright.core import budget as budgets
from loopwright.core import gates
from loopwright.core.outcomes import gate_stop


def note_answer(t, gate: dict, answer: str) -> None:
    if gate["name"] == gates.REPEATED_FAILURE and answer == "skip":
        t.notes.append(
            f"the user chose to skip {gate.get('item') or 'the failing item'}; move on to other work."
        )
    elif gate["name"] == gates.REPEATED_FAILURE and answer == "retry":
        t.notes.append(
            f"retry {gate.get('item') or 'the failing item'} once more, with a different approach."
        )
    elif gate["name"] == gates.JUDGE:
        from loopwright.core import judge

        judge.on_answer(t, answer)


def apply_answers(t) -> tuple[str | None, str, list[str]]:
    """Fold in gate answers recorded since the last tick. Returns a stop, if one was chosen."""
    b = t.budget
    still = []
    for gate in b.get("pending_gates") or []:
        answer = gate.get("answer")
        if not answer:
            still.append(gate)
            continue
        t.record_gate(gate, answer, gate.get("answered_by") or "user")
        t.answers.append(gate)
        if answer == "stop":
            b["pending_gates"] = []
            return (
                gate_stop(gate["name"]),
                f"the user answered stop at gate {gate['name']}",
                ["prior_gate_stop"],
            )
        if gate["name"] == gates.JUDGE and answer == "accept":
            from loopwright.core import judge

            b["pending_gates"] = []
            return judge.accepted()
        if gate["name"] == gates.BUDGET_ESCALATION and answer == "raise":
            raised = gate.get("raise_to") or {}
            changes = []
            for dim in gate.get("dimensions") or []:
                key = budgets.CEILING_KEY[dim]
                cap = budgets.ceiling(b, dim)
                if cap is None:
                    continue
                new = raised.get(key) or budgets.raised(cap, dim)
                b[key] = new
                changes.append(f"{key} {budgets.fmt(dim, cap)} → {budgets.fmt(dim, float(new))}")
            if changes:
                t.journal.append({"event": "ceilings", "raised": changes, "by": "gate budget-escalation"})
                t.notes.append("ceilings raised at the user's request: " + "; ".join(changes) + ".")
        note_answer(t, gate, answer)
    b["pending_gates"] = still
    return None, "", []
