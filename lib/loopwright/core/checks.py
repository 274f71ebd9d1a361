"""What a completion check's result means, and how a pending failure opens the next prompt."""

from __future__ import annotations


def passed(result: dict) -> bool:
    return not result.get("timed_out") and result.get("exit_code") == 0


def directive(pending: dict) -> str:
    """The text that opens the next prompt while a failure is pending."""
    source = pending.get("source") or "verify"
    what = {
        "verify": "The completion check failed, so the loop did not end.",
        "post-tool": "A test run failed during the last iteration.",
    }.get(source, "A check failed.")
    status = "timed out" if pending.get("timed_out") else f"exit {pending.get('exit_code')}"
    lines = [
        f"BACKPROP: {what} Fix this before anything else.",
        f"Command: {pending.get('command')} ({status}"
        + (f", {pending['seconds']} s" if pending.get("seconds") is not None else "")
        + ")",
        "Output (tail):",
        "```",
        (pending.get("output_tail") or "").rstrip() or "(no output)",
        "```",
        "Find the root cause, fix it, and run the command again yourself before claiming completion.",
    ]
    return "\n".join(lines)
