"""The end of a loop: the final report, and the terminal step that writes it.

Order matters (SPEC §4.11, sdd "report before lock release"): report.md and the
last history line first, then loop.json says ended, then the lock is released
and the active marker removed.
"""

from __future__ import annotations

import contextlib

from loopwright.core.budget import tokens_total
from loopwright.core.prompts import fmt_dollars, fmt_minutes, fmt_tokens
from loopwright.state import loops, store
from loopwright.state.lock import now_iso, parse_iso

OUTCOME_WORDS = {
    "LOOP_DONE": "the goal was reported complete",
    "MAX_ITERATIONS": "the iteration limit was reached",
    "CANCELLED": "the loop was cancelled",
    "EXTERNAL_UNREACHABLE": "an external service was unreachable for two iterations in a row",
    "STOPPED:state_missing": "the loop's budget or history file was gone",
    "STOPPED:stall_limit": "the runner gave up bringing its Claude Code client back",
    "STOPPED:quota_limit": "the usage limit held through every wait",
}


def describe_outcome(outcome: str) -> str:
    if outcome in OUTCOME_WORDS:
        return OUTCOME_WORDS[outcome]
    kind, _, detail = outcome.partition(":")
    if kind == "BUDGET_EXHAUSTED":
        return f"the {detail} budget ran out"
    if kind == "STOPPED":
        return f"a stop was requested ({detail})"
    if kind == "GATE_STOP":
        return f"the user answered stop at gate {detail}"
    return outcome.lower().replace("_", " ")


def _shown(paths: loops.LoopPaths, p):
    """A path relative to the project when it is inside it."""
    base = paths.state.parent
    return p.relative_to(base) if p.is_relative_to(base) else p


def render(paths: loops.LoopPaths, loop: dict, budget: dict, outcome: str, reason: str, ended_at: str) -> str:
    started = budget.get("started_at") or loop.get("started_at")
    t0, t1 = parse_iso(started), parse_iso(ended_at)
    minutes = (t1 - t0) / 60.0 if t0 is not None and t1 is not None else budget.get("minutes_elapsed", 0.0)
    lines = [
        f'# loopwright report: loop "{loop["name"]}"',
        "",
        f"- Outcome: **{outcome}**: {_why(loop, outcome)}",
        f"- Why: {reason}",
        f"- Mode: {loop['mode']}",
        f"- Iterations: {budget.get('iterations_used', 0)} of "
        f"{budget.get('max_iterations', loop['max_iterations'])}",
        f"- Time: {fmt_minutes(minutes)} of {budget.get('max_minutes', loop['max_minutes']):g} minutes "
        f"(started {started}, ended {ended_at})",
        f"- Tokens: {fmt_tokens(tokens_total(budget))} "
        f"(in {budget.get('tokens_in', 0)}, out {budget.get('tokens_out', 0)}, "
        f"cache write {budget.get('cache_creation_input_tokens', 0)}, cache read "
        f"{budget.get('cache_read_input_tokens', 0)})",
        f"- Spend: {fmt_dollars(budget)} (rates: {budget.get('rate_table_source') or 'built-in default'})",
        f"- PRs touched: {', '.join(budget.get('prs_touched') or []) or 'none'} · comments pushed "
        f"{budget.get('comments_pushed', 0)} · merges attempted {budget.get('merges_attempted', 0)} · "
        f"agents dispatched {budget.get('agents_dispatched', 0)}",
        f"- Owner session: {loop.get('owner_session') or 'none'}",
    ]
    if budget.get("unknown_models"):
        lines.append(
            "- Models without a known price (charged at the highest rate): "
            f"{', '.join(budget['unknown_models'])}"
        )
    pauses = (budget.get("router") or {}).get("pauses") or []
    if pauses:
        lines.append(
            "- Pauses: " + "; ".join(f"after iteration {p['after_iteration']} ({p['why']})" for p in pauses)
        )
    gates_log = budget.get("gates_log") or []
    lines.append("- Gates: " + ("none" if not gates_log else ""))
    for g in gates_log:
        asked = f'{g["name"]}: "{g["question"]}"'
        lines.append(
            f"    - iteration {g.get('iteration')}: {asked} → {g['answer']} ({g.get('by')}, {g.get('at')})"
        )
    lines += _wrap_up_lines(paths, budget)
    lines += _judge_lines(loop, budget)
    lines += [
        "",
        "Goal:",
        "",
        *("    " + ln for ln in loop["prompt"].splitlines()),
        "",
        "Files:",
        f"- budget: {_shown(paths, paths.budget)}",
        f"- history: {_shown(paths, paths.history)}",
        f"- journal: {_shown(paths, paths.journal)}",
        "",
    ]
    return "\n".join(lines)


def _wrap_up_lines(paths: loops.LoopPaths, budget: dict) -> list[str]:
    """The wrap-up turn (core/wrapup.py), what it cost, and the handoff it left."""
    from loopwright.state import handoff

    record = (budget.get("router") or {}).get("wrap_up")
    lines = []
    if isinstance(record, dict):
        if record.get("dollars") is None:
            lines.append(f"- Wrap-up turn: handed over after iteration {record.get('after_iteration')}")
        else:
            lines.append(
                f"- Wrap-up turn: after iteration {record.get('after_iteration')}, "
                f"${float(record.get('dollars') or 0):,.2f}, "
                f"{fmt_tokens(int(record.get('tokens') or 0))} tokens"
            )
        lines += [f"    - {note}" for note in record.get("over") or []]
    if handoff.present(paths):
        lines.append(f"- Handoff: [{_shown(paths, paths.handoff)}]({paths.handoff})")
    elif isinstance(record, dict):
        lines.append("- Handoff: none was written in the wrap-up turn")
    return lines


def _judge_lines(loop: dict, budget: dict) -> list[str]:
    """The completion judge (core/judge.py): its calls, verdicts and dollars, and its last word."""
    from loopwright.core import judge

    s = judge.summary(loop, budget)
    if s is None:
        return []
    lines = [f"- Judge: {judge.line(s)}"]
    if s["last"]:
        lines.append(f"    - last word (iteration {s['last'].get('iteration')}): {judge.last_word(s)}")
    return lines


def _why(loop: dict, outcome: str) -> str:
    from loopwright import modes

    try:
        own = modes.get(loop.get("mode")).outcome_text(loop, outcome)
    except modes.UnknownMode:
        own = None
    return own or describe_outcome(outcome)


def summary_line(loop: dict, budget: dict, outcome: str, paths: loops.LoopPaths) -> str:
    return (
        f"loopwright · {loop['name']} ended: {outcome} ({_why(loop, outcome)}) after "
        f"{budget.get('iterations_used', 0)} iteration(s), "
        f"{fmt_minutes(budget.get('minutes_elapsed', 0.0))} min, {fmt_tokens(tokens_total(budget))} tokens, "
        f"{fmt_dollars(budget)} · report: {paths.report}" + _handoff_note(paths)
    )


def _handoff_note(paths: loops.LoopPaths) -> str:
    from loopwright.state import handoff

    return f" · handoff: {paths.handoff}" if handoff.present(paths) else ""


def end_loop(
    paths: loops.LoopPaths,
    loop: dict,
    budget: dict,
    outcome: str,
    reason: str,
    now: float,
    redactions: list | None = None,
) -> str:
    """Write the report, mark the loop ended, release its lock. Returns the summary line.

    Call with the loop mutex held.
    """
    from loopwright.state.claudemd import redact

    ended_at = now_iso(now)
    store.write_text(
        paths.report, redact(render(paths, loop, budget, outcome, reason, ended_at), redactions or [])
    )
    ended = dict(loop, status=loops.ENDED, outcome=outcome, ended_at=ended_at, end_reason=reason)
    loops.save_config(paths, ended)
    with contextlib.suppress(FileNotFoundError):
        paths.lock.unlink()
    loops.clear_active(paths)
    from loopwright.tick import notices  # after loop.json says ended: a tick redone never tells twice

    notices.loop_ended(paths, loop, outcome, redact(reason, redactions or []), now)
    return summary_line(loop, budget, outcome, paths)
