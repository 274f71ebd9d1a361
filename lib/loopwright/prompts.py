"""Text the loop shows: the one-line status, the status block, the next prompt."""

from __future__ import annotations

from .budget import tokens_total
from .completion import sentinel


def fmt_tokens(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def fmt_minutes(m: float) -> str:
    return f"{m:.0f}" if m >= 10 else f"{m:.1f}"


def fmt_dollars(budget: dict) -> str:
    spent = f"${float(budget.get('dollars_estimate') or 0.0):,.2f}"
    cap = budget.get("max_dollars")
    return f"{spent}/${float(cap):,.2f}" if cap else f"{spent} (no limit)"


def _tokens(budget: dict) -> str:
    cap = budget.get("max_tokens")
    return fmt_tokens(tokens_total(budget)) + (f"/{fmt_tokens(int(cap))}" if cap else "")


def status_line(loop: dict, budget: dict, iteration: int) -> str:
    """The ``systemMessage`` shown to the user on every block."""
    parts = [
        f"loopwright · {loop['name']}",
        f"iteration {iteration}/{budget.get('max_iterations', loop['max_iterations'])}",
        f"{fmt_minutes(budget.get('minutes_elapsed', 0.0))}/{budget.get('max_minutes', loop['max_minutes']):g} min",
        f"{_tokens(budget)} tokens",
        fmt_dollars(budget),
    ]
    if budget.get("max_prs") and loop.get("mode") == "work":
        parts.append(f"PRs {len(budget.get('prs_touched') or [])}/{budget['max_prs']}")
    return " · ".join(parts)


def status_block(loop: dict, budget: dict, iteration: int) -> str:
    parts = [
        f"[loopwright] loop \"{loop['name']}\" ({loop['mode']} mode)",
        f"iteration {iteration} of {budget.get('max_iterations', loop['max_iterations'])}",
        f"{fmt_minutes(budget.get('minutes_elapsed', 0.0))} of {budget.get('max_minutes', loop['max_minutes']):g} minutes",
        f"tokens {_tokens(budget)}",
        f"spend {fmt_dollars(budget)}",
    ]
    if loop.get("mode") == "task":
        parts.insert(1, f"TASK/{loop.get('task_module')}")
    if loop.get("mode") in ("work", "review"):
        parts.append(f"PRs {len(budget.get('prs_touched') or [])}" + (f"/{budget['max_prs']}" if budget.get("max_prs") and loop["mode"] == "work" else ""))
    return " · ".join(parts)


def next_prompt(loop: dict, budget: dict, iteration: int, notes: list[str], gate_section: str | None = None,
                tasks_section: str = "", pressure: str | None = None) -> str:
    """What the agent reads at the start of iteration ``iteration``."""
    lines = [status_block(loop, budget, iteration)]
    if pressure:
        lines.append(pressure)
    lines.append("")
    lines += [f"Note: {n}" for n in notes]
    if notes:
        lines.append("")
    if gate_section:
        lines += [gate_section, ""]
    lines += [
        "Continue working on this goal. Your earlier work is in the files and the git history; "
        "check it rather than starting over.",
        "",
        "<goal>",
        loop["prompt"],
        "</goal>",
        "",
    ]
    if tasks_section:
        lines += [tasks_section, ""]
    if loop.get("verify"):
        lines += [f"Completion is accepted only when `{loop['verify']}` passes in the project; loopwright runs it.", ""]
    lines += [
        "When the goal is fully achieved and you have checked that it is, end your final message "
        "with this line, alone on its line:",
        sentinel(loop["completion_promise"]),
        "Never write that line to leave the loop early: a false completion claim is worse than "
        "another iteration. If you are stuck, say what blocks you and keep going.",
    ]
    if loop.get("mode") in ("work", "review"):
        lines.append("Report what this iteration did with `loopwright report` (PRs touched, comments, merges, "
                     "agents dispatched, failures with their root cause, outages).")
    return "\n".join(lines)
