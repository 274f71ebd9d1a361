"""Prompt mode (``/loopwright:loop``): the goal is handed back every iteration, with the
status block, notes, gates and tasks, until the agent claims completion with the
sentinel and the completion gates accept it (the ralph loop, SPEC §8)."""

from __future__ import annotations

from loopwright.core.completion import sentinel
from loopwright.core.modeapi import Mode, PromptParts, Tick


class PromptMode(Mode):
    name = "prompt"
    summary = "re-feed one goal until the agent claims completion and the gates accept it"
    defaults = {"max_iterations": 20, "max_minutes": 60}

    def first_prompt(self, loop: dict, state: dict | None) -> str:
        lines = [
            "Goal:",
            "<goal>",
            loop["prompt"],
            "</goal>",
            "",
            "Work on the goal now. After each of your turns loopwright hands you the next iteration.",
            "When the goal is fully achieved and checked, end your final message with this line, alone on "
            "its line:",
            sentinel(loop["completion_promise"]),
            "Never write it to escape the loop: a false completion claim is worse than another iteration.",
        ]
        if loop.get("verify"):
            lines.append(
                f"loopwright accepts completion only when `{loop['verify']}` passes; run it yourself first."
            )
        lines.append(
            "Plan larger work as tasks with `loopwright task add <text>`: the loop does not end while a task "
            "is open."
        )
        return "\n".join(lines)

    def prompt(self, loop: dict, state: dict | None, parts: PromptParts, tick: Tick) -> str:
        lines = [parts.status]
        if parts.pressure:
            lines.append(parts.pressure)
        lines.append("")
        lines += [f"Note: {n}" for n in parts.notes]
        if parts.notes:
            lines.append("")
        if parts.gates:
            lines += [parts.gates, ""]
        lines += [
            "Continue working on this goal. Your earlier work is in the files and the git history; "
            "check it rather than starting over.",
            "",
            goal_text(loop, parts.tasks),
        ]
        return "\n".join(lines)


def goal_text(loop: dict, tasks: str = "") -> str:
    """The goal, the open tasks and how the loop ends."""
    lines = ["<goal>", loop["prompt"], "</goal>", ""]
    if tasks:
        lines += [tasks, ""]
    if loop.get("verify"):
        lines += [
            f"Completion is accepted only when `{loop['verify']}` passes in the project; loopwright runs it.",
            "",
        ]
    lines += [
        "When the goal is fully achieved and you have checked that it is, end your final message "
        "with this line, alone on its line:",
        sentinel(loop["completion_promise"]),
        "Never write that line to leave the loop early: a false completion claim is worse than "
        "another iteration. If you are stuck, say what blocks you and keep going.",
    ]
    return "\n".join(lines)


MODE = PromptMode()
