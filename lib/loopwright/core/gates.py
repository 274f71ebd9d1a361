"""Gates: the decisions a loop asks the user for (sdd SPEC-0020), their wording,
options, and how an answer is recorded. Pure functions.

A gate is asked through the agent (the next prompt tells it to use the
AskUserQuestion tool and record the answer with ``loopwright gate answer``), or
decided by the loop's gate policy for unattended runs: ``continue`` takes the
first, go-ahead option; ``stop`` halts the loop. Gates are never debounced: each
firing is asked afresh, and an old answer is never reused.
"""

from __future__ import annotations

from loopwright.core.budget import describe

BUDGET_ESCALATION = "budget-escalation"
FORCE_UNLOCK = "force-unlock"
REPEATED_FAILURE = "repeated-failure"
BACKLOG_DRIFT = "backlog-drift"
AMBIGUOUS_CRITERIA = "ambiguous-criteria"
POST_FEEDBACK_MERGE = "post-feedback-merge"
RESUME_DIVERGENCE = "resume-divergence"
JUDGE = "judge"  # the completion judge could not, or would not, settle a claim (core/judge.py)

OPTIONS = {
    BUDGET_ESCALATION: ["continue", "raise", "stop"],
    FORCE_UNLOCK: ["yes", "no", "stop"],
    REPEATED_FAILURE: ["skip", "retry", "stop"],
    BACKLOG_DRIFT: ["re-propose", "continue", "stop"],
    AMBIGUOUS_CRITERIA: ["skip", "escalate", "proceed", "stop"],
    POST_FEEDBACK_MERGE: ["merge", "hold", "stop"],
    RESUME_DIVERGENCE: ["re-attach", "skip", "stop"],
    JUDGE: ["accept", "continue", "stop"],
}
# What the "continue" policy answers for each gate: the option that lets the loop go on.
POLICY_CONTINUE = {
    BUDGET_ESCALATION: "continue",
    FORCE_UNLOCK: "yes",
    REPEATED_FAILURE: "retry",
    BACKLOG_DRIFT: "continue",
    AMBIGUOUS_CRITERIA: "proceed",
    POST_FEEDBACK_MERGE: "hold",
    RESUME_DIVERGENCE: "re-attach",
    JUDGE: "continue",  # never "accept": an unattended loop does not take a claim the judge refused
}
POLICIES = ("ask", "continue", "stop")
MAX_ASKS = 3  # unanswered asks before the loop pauses to wait for the user


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + f", and {items[-1]}"


def budget_escalation(budget: dict, dims: list[str]) -> dict:
    parts = [describe(budget, d) for d in dims]
    raise_word = "raise ceiling(s)" if len(dims) > 1 else "raise ceiling"
    question = f"Approaching {_join(parts)}. Continue, {raise_word}, or stop?"
    return {
        "name": BUDGET_ESCALATION,
        "question": question,
        "options": OPTIONS[BUDGET_ESCALATION],
        "dimensions": dims,
    }


def repeated_failure(failure: dict) -> dict:
    item = (failure.get("item") or "").strip()
    if item.isdigit():
        item = f"#{item}"
    subject = f"Issue {item}" if item.startswith("#") else (item or "The same work")
    question = (
        f"{subject} failed twice with: {failure['root_cause']}. Skip, retry once more, or stop the loop?"
    )
    return {
        "name": REPEATED_FAILURE,
        "question": question,
        "options": OPTIONS[REPEATED_FAILURE],
        "item": failure.get("item"),
    }


def force_unlock() -> dict:
    return {
        "name": FORCE_UNLOCK,
        "question": "Force-unlock previous iteration's lock? This may corrupt in-flight work.",
        "options": OPTIONS[FORCE_UNLOCK],
    }


def record(gate: dict, answer: str | None, at: str, by: str) -> dict:
    """The verbatim entry for history ``gates[]``."""
    return {"name": gate["name"], "question": gate["question"], "answer": answer, "at": at, "by": by}


def log(budget: dict, entry: dict, iteration: int) -> None:
    """Keep an answered gate in the loop's whole log (``gates_log``, read by the report)."""
    budget.setdefault("gates_log", []).append(dict(entry, iteration=iteration))


def validate_answer(pending: list[dict], name: str, answer: str) -> dict:
    """The pending gate ``name`` if ``answer`` is one of its options; ValueError otherwise."""
    for gate in pending:
        if gate["name"] == name:
            if answer not in gate["options"]:
                raise ValueError(
                    f"{answer!r} is not an option of gate {name}; options: {', '.join(gate['options'])}"
                )
            if gate.get("answer"):
                raise ValueError(f"gate {name} is already answered ({gate['answer']})")
            return gate
    waiting = ", ".join(g["name"] for g in pending if not g.get("answer")) or "none"
    raise ValueError(f"no gate {name} is waiting for an answer (waiting: {waiting})")


MAX_ANSWER = 200  # the longest answer a fleet loop's gate takes


def fleet_answer_problem(gate, answer) -> str | None:
    """Why ``answer`` cannot answer ``gate`` (as a fleet loop's row holds it), None when it can:
    the one check of `loopwright fleet answer`, the API and the page. The options are the ones
    the row's gate names, else the gate's own (a row is as writable as anything in the database)."""
    if not isinstance(answer, str) or not answer.strip() or len(answer) > MAX_ANSWER:
        return f"give the answer (up to {MAX_ANSWER} characters): one of the gate's options"
    gate = gate if isinstance(gate, dict) else {}
    options = gate.get("options")
    if not (isinstance(options, list) and options):
        options = OPTIONS.get(gate.get("name"))
    if options and answer not in options:
        shown = ", ".join(str(o) for o in options)[:300]
        return f"{answer!r} is not an option of gate {gate.get('name')}: {shown}"
    return None


def prompt_section(pending: list[dict], asks: int) -> str:
    """The part of the next prompt that asks for the gate answers."""
    lines = ["loopwright needs a decision from the user before this loop goes on."]
    if asks > 1:
        lines.append(
            f"(Asked {asks} times without a recorded answer; after {MAX_ASKS} the loop pauses to wait for "
            "the user.)"
        )
    for g in pending:
        if g.get("answer"):
            continue
        lines += [
            "",
            f'Gate "{g["name"]}": {g["question"]}',
            f"Options: {', '.join(g['options'])}",
        ]
    lines += [
        "",
        "Ask the user now with the AskUserQuestion tool (one question per gate, exactly these options), "
        "then record each answer, verbatim, with:",
        "    loopwright gate answer <gate> <option>",
        "If the answer lets the loop go on, continue with the goal in this same turn; if it is stop, stop "
        "working. "
        "Never answer a gate yourself.",
    ]
    return "\n".join(lines)
