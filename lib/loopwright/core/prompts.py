"""Text the loop shows: the one-line status, the status block, the next prompt."""

from __future__ import annotations

from loopwright.core.budget import tokens_total


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


def status_line(loop: dict, budget: dict, iteration: int, extra: list | tuple = ()) -> str:
    """The ``systemMessage`` shown to the user on every block; ``extra`` comes from the mode."""
    return " · ".join([f"loopwright · {loop['name']}", *extra, *_measures(loop, budget, iteration)])


def status_block(loop: dict, budget: dict, iteration: int, extra: list | tuple = ()) -> str:
    """The first line of every prompt; ``extra`` comes from the mode."""
    head = f'[loopwright] loop "{loop["name"]}" ({loop["mode"]} mode)'
    max_minutes = budget.get("max_minutes", loop["max_minutes"])
    parts = [
        head,
        *extra,
        f"iteration {iteration} of {budget.get('max_iterations', loop['max_iterations'])}",
        f"{fmt_minutes(budget.get('minutes_elapsed', 0.0))} of {max_minutes:g} minutes",
        f"tokens {_tokens(budget)}",
        f"spend {fmt_dollars(budget)}",
    ]
    if budget.get("max_prs"):
        parts.append(f"PRs {len(budget.get('prs_touched') or [])}/{budget['max_prs']}")
    return " · ".join(parts)


def _measures(loop: dict, budget: dict, iteration: int) -> list:
    minutes = fmt_minutes(budget.get("minutes_elapsed", 0.0))
    parts = [
        f"iteration {iteration}/{budget.get('max_iterations', loop['max_iterations'])}",
        f"{minutes}/{budget.get('max_minutes', loop['max_minutes']):g} min",
        f"{_tokens(budget)} tokens",
        fmt_dollars(budget),
    ]
    if budget.get("max_prs"):
        parts.append(f"PRs {len(budget.get('prs_touched') or [])}/{budget['max_prs']}")
    return parts
