"""Text the loop shows: the one-line status, the status block, the next prompt."""

from __future__ import annotations

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


def tokens_total(budget: dict) -> int:
    return int(budget.get("tokens_in", 0)) + int(budget.get("tokens_out", 0))


def status_line(loop: dict, budget: dict, iteration: int) -> str:
    """The ``systemMessage`` shown to the user on every block."""
    parts = [
        f"loopwright · {loop['name']}",
        f"iteration {iteration}/{loop['max_iterations']}",
        f"{fmt_minutes(budget.get('minutes_elapsed', 0.0))}/{loop['max_minutes']} min",
        f"{fmt_tokens(tokens_total(budget))} tokens",
    ]
    return " · ".join(parts)


def status_block(loop: dict, budget: dict, iteration: int) -> str:
    max_tokens = loop.get("max_tokens")
    tokens = fmt_tokens(tokens_total(budget)) + (f"/{fmt_tokens(max_tokens)}" if max_tokens else "")
    return (
        f"[loopwright] loop \"{loop['name']}\" ({loop['mode']} mode) · "
        f"iteration {iteration} of {loop['max_iterations']} · "
        f"{fmt_minutes(budget.get('minutes_elapsed', 0.0))} of {loop['max_minutes']} minutes · "
        f"tokens {tokens}"
    )


def next_prompt(loop: dict, budget: dict, iteration: int, notes: list[str]) -> str:
    """What the agent reads at the start of iteration ``iteration``."""
    lines = [status_block(loop, budget, iteration), ""]
    lines += [f"Note: {n}" for n in notes]
    if notes:
        lines.append("")
    lines += [
        "Continue working on this goal. Your earlier work is in the files and the git history; "
        "check it rather than starting over.",
        "",
        "<goal>",
        loop["prompt"],
        "</goal>",
        "",
        "When the goal is fully achieved and you have checked that it is, end your final message "
        "with this line, alone on its line:",
        sentinel(loop["completion_promise"]),
        "Never write that line to leave the loop early: a false completion claim is worse than "
        "another iteration. If you are stuck, say what blocks you and keep going.",
    ]
    return "\n".join(lines)
