"""Whether the loop ends this tick: the mode's own end, a completion that passes
its gates (before any budget), then the 100% stop conditions."""

from __future__ import annotations

from loopwright.core import budget as budgets
from loopwright.core import checks
from loopwright.core.completion import completion_claimed
from loopwright.core.modeapi import DIMENSIONS
from loopwright.core.outcomes import (
    CANCELLED,
    DEPENDENCY_CYCLE,
    EXTERNAL_UNREACHABLE,
    LOOP_DONE,
    MAX_ITERATIONS,
    OUTAGE_LIMIT,
    budget_exhausted,
    stopped,
)


def ending(t, mstep) -> tuple[str | None, str, list[str]]:
    """The mode's own end, else completion (before any budget), else the 100% stops."""
    snap = t.snap
    if mstep.outcome and not snap.cancelled:
        return mstep.outcome, mstep.reason, mstep.fired or [f"{snap.mode.name}_lifecycle"]
    claimed, where = completion_claimed(snap) if mstep.completion else (False, "")
    return stop_conditions(t, claimed, where, t.folded, mstep.completion)


def uncounted(snap) -> tuple[str, ...]:
    """Budget dimensions whose ceilings do not stop loops of this mode."""
    return tuple(d for d in DIMENSIONS if d not in snap.mode.counted)


def stop_conditions(
    t, claimed: bool, where: str, folded: budgets.Folded, sentinel_applies: bool = True
) -> tuple[str | None, str, list[str]]:
    snap, b = t.snap, t.budget
    if snap.cancelled:
        return CANCELLED, "the loop was cancelled", ["cancel"]
    if claimed:
        rejected = completion_gates(t)
        if rejected is None:
            how = " and the check passed" if snap.verify_result else ""
            how += " and the completion judge agreed" if t.judged else ""
            return (
                LOOP_DONE,
                f"the agent ended its final message with the completion sentinel ({where}){how}",
                ["completion"],
            )
    if snap.stop_request is not None:
        why = str(snap.stop_request.get("reason") or "requested")
        return stopped(why), f"a stop was requested ({why})", ["stop_request"]
    hit = budgets.exhausted(b, uncounted(snap))
    if hit:
        fired = [budgets.STOP_CONDITION[d] for d in hit]
        first = hit[0]
        if first == "iterations":
            unfinished = "without the completion sentinel" if sentinel_applies else "with the work unfinished"
            return (
                MAX_ITERATIONS,
                f"iteration {t.iteration} of {b['max_iterations']} ended {unfinished}",
                fired,
            )
        if first == "dollars":
            reason = f"Cost budget reached: ${b['dollars_estimate']:,.2f} / ${float(b['max_dollars']):,.2f}"
        else:
            reason = f"{budgets.describe(b, first)} reached its ceiling"
        return budget_exhausted(first), reason, fired
    cycle = snap.tasks.cycle if snap.tasks is not None else None
    if cycle:
        edges = " → ".join(cycle)
        return (
            DEPENDENCY_CYCLE,
            f"Dependency cycle detected: {edges} — please resolve manually",
            ["dependency_cycle"],
        )
    if b.get("qmd_failures_consecutive", 0) >= OUTAGE_LIMIT:
        return (
            EXTERNAL_UNREACHABLE,
            f"qmd unreachable for {OUTAGE_LIMIT} iterations ({folded.outage}) — fix per ADR-0024 (e.g., "
            "restart qmd daemon) and resume",
            ["qmd_unreachable"],
        )
    return None, "", []


def completion_gates(t) -> str | None:
    """None when a claimed completion stands; otherwise why it was rejected."""
    snap = t.snap
    if snap.tasks is not None and snap.tasks.open_count:
        count, ids = snap.tasks.open_count, snap.tasks.open_ids_head
        more = f" and {count - len(ids)} more" if count > len(ids) else ""
        t.journal.append({"event": "task.gate", "open": ids, "open_count": count})
        t.notes.append(
            f"you claimed completion, but {count} task(s) are still open: {', '.join(ids)}{more}. Finish "
            "them "
            "(`loopwright task complete <id>`) or remove the ones that no longer apply "
            "(`loopwright task remove <id> <reason>`), then claim completion again."
        )
        t.rejected = "tasks"
        return "tasks"
    if snap.loop.get("verify"):
        result = snap.verify_result
        if result is None:
            t.notes.append("you claimed completion, but the completion check could not run; claim it again.")
            t.rejected = "verify"
            return "verify"
        if not checks.passed(result):
            t.journal.append(
                {
                    "event": "verify",
                    "passed": False,
                    "exit_code": result.get("exit_code"),
                    "timed_out": result.get("timed_out"),
                    "command": result.get("command"),
                }
            )
            t.backprop_new = dict(result, source="verify", iteration=t.iteration)
            t.rejected = "verify"
            return "verify"
        t.journal.append(
            {
                "event": "verify",
                "passed": True,
                "command": result.get("command"),
                "seconds": result.get("seconds"),
            }
        )
    if snap.loop.get("judge"):  # last: the judge is asked only about claims the checks let through
        from loopwright.core import judge

        return judge.review(t) if judge.enabled(snap.loop) else None
    return None
