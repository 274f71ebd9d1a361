"""Task mode (ai-cli-task auto) driven by the Stop hook: which step comes next.

Each turn of the session performs exactly one step and ends with a validated
``.auto-signal``. At the Stop, ``next_step`` reads that signal (it must be for
the step that was asked for, and newer than the request), follows the seed's
result-based routing table, and says what the next prompt asks for, or why the
loop ends. A missing, stale or invalid signal earns a bounded number of
corrective prompts, never an endless loop. Pure.
"""

from __future__ import annotations

from loopwright.core.clock import parse_iso
from loopwright.core.record import REQUIRED, Record
from loopwright.modes.task import signals

MAX_CORRECTIONS = 2  # corrective prompts for one step before the loop stops


class TaskView(Record):
    """What the shell read about the module at this Stop."""

    FIELDS = (
        ("status", REQUIRED),
        ("phase", ""),
        ("signal", None),
        ("signal_problem", None),
        ("stop_request", None),
        ("problem", None),
    )

    status: str
    phase: str
    signal: dict | None
    signal_problem: str | None  # why the signal could not be used (missing, invalid JSON, ...)
    stop_request: dict | None
    problem: str | None  # the module itself could not be read


class StepDecision(Record):
    FIELDS = (
        ("outcome", None),
        ("reason", ""),
        ("step", None),
        ("checkpoint", ""),
        ("correction", None),
        ("notes", []),
        ("state", {}),
    )

    outcome: str | None  # terminal outcome, or None to go on
    reason: str
    step: str | None
    checkpoint: str
    correction: str | None  # the problem a corrective prompt must fix
    notes: list[str]
    state: dict  # the new budget["task"]


def first_step(status: str, phase: str, target_ok: bool) -> tuple[str, str] | str:
    """The entry step, or a one-line reason why auto cannot start."""
    if status == "draft" and not target_ok:
        return "fill .target.md first: it holds only the template, so there is nothing to plan"
    step = signals.entry_step(status, phase)
    if step is None:
        return f"the task is {status}; auto has nothing to run"
    return step


def _terminal_for_stop(status: str, last: dict) -> tuple[str, str]:
    if status == "complete":
        return "LOOP_DONE", "the task is complete and its report is written"
    if status == "blocked":
        return "BLOCKED", "the task is blocked"
    if status == "cancelled":
        return "CANCELLED", "the task was cancelled"
    if last.get("step") == "merge" and last.get("result") == "conflict":
        return (
            "STOPPED:merge-conflict",
            "the merge conflict could not be resolved; the task stays executing (retryable)",
        )
    return (
        "STOPPED:signal-stop",
        f"the step {last.get('step')} ended the loop with {last.get('result')} while the task is {status}",
    )


def next_step(state: dict, view: TaskView, iteration: int) -> StepDecision:
    """Decide after the turn that performed ``state['step']`` (iteration ``iteration``)."""
    st = dict(state)
    d = StepDecision(state=st)
    if view.problem:
        d.outcome, d.reason = "STOPPED:task-unreadable", view.problem
        return d
    # Before the stop request: cancelling writes .auto-stop too, and the task's own
    # status says more about why the loop ends.
    if view.status == "cancelled":
        d.outcome, d.reason = "CANCELLED", "the task was cancelled"
        return d
    if view.stop_request is not None:
        reason = str(view.stop_request.get("reason") or "user_stop")
        d.outcome, d.reason = f"STOPPED:{reason}", f".auto-stop asked the loop to stop ({reason})"
        return d
    expected = st.get("step")
    problem = _signal_problem(st, view, iteration, d.notes)
    if problem is not None:
        st["corrections"] = st.get("corrections", 0) + 1
        if st["corrections"] > MAX_CORRECTIONS:
            d.outcome = "STOPPED:no-signal"
            d.reason = (
                f"no usable .auto-signal for step {expected} after {MAX_CORRECTIONS} reminders ({problem})"
            )
            return d
        d.step, d.checkpoint, d.correction = expected, st.get("checkpoint", ""), problem
        d.reason = (
            f"step {expected} has no usable signal ({problem}); "
            f"reminder {st['corrections']} of {MAX_CORRECTIONS}"
        )
        return d
    return _follow_signal(st, view, d)


def _signal_problem(st: dict, view: TaskView, iteration: int, notes: list) -> str | None:
    """Why the turn's .auto-signal cannot be used for the step it was asked to do, or None."""
    if view.signal_problem is not None:
        return view.signal_problem
    sig = view.signal
    if sig is None:
        return "no .auto-signal was written"
    expected, asked_at = st.get("step"), parse_iso(st.get("asked_at"))
    sig_at = parse_iso(sig.get("timestamp"))
    if sig.get("step") != expected:
        return f"the signal is for step {sig.get('step')}, but this turn's step was {expected}"
    if asked_at is not None and sig_at is not None and sig_at + 1 < asked_at:
        return f"the signal ({sig.get('timestamp')}) is older than this step's request ({st.get('asked_at')})"
    if "iteration" in sig and sig["iteration"] != iteration:
        notes.append(f"the signal said iteration {sig['iteration']}; this was iteration {iteration}")
    return None


def _follow_signal(st: dict, view: TaskView, d: StepDecision) -> StepDecision:
    """The next step, from a usable signal and the routing table."""
    sig = view.signal
    checkpoint = sig.get("checkpoint") or st.get("checkpoint", "")
    nxt, nxt_cp = signals.route(sig["step"], sig["result"], checkpoint)
    if sig.get("next") != nxt:
        d.notes.append(
            f"the signal named next {sig.get('next')}, the routing table says {nxt}; following the table"
        )
    st["last"] = {"step": sig["step"], "result": sig["result"], "checkpoint": checkpoint}
    st["corrections"] = 0
    if nxt == "(stop)":
        d.outcome, d.reason = _terminal_for_stop(view.status, st["last"])
        return d
    if view.status == "blocked":
        d.outcome, d.reason = "BLOCKED", "the task is blocked"
        return d
    d.step, d.checkpoint = nxt, nxt_cp
    d.reason = f"{sig['step']} gave {sig['result']}; next: {nxt}" + (
        f" --checkpoint {nxt_cp}" if nxt_cp else ""
    )
    return d


def step_prompt(
    module: str,
    step: str,
    checkpoint: str,
    iteration: int,
    correction: str | None = None,
    compacted: bool = False,
) -> str:
    """The body of the prompt that hands over one step."""
    cp = f" --checkpoint {checkpoint}" if checkpoint and step == "check" else ""
    what = (
        f"{step}{cp}"
        if step != "exec" or not checkpoint
        else f"exec, fixing what check --checkpoint {checkpoint} found"
    )
    record = {
        "plan": f"loopwright lifecycle plan {module}",
        "check": f"loopwright lifecycle check {module}{cp} --result <RESULT>",
        "exec": f"loopwright lifecycle exec {module} --result <(done)|(mid-exec)|(blocked)>",
        "merge": f"loopwright lifecycle merge {module}",
        "report": f"loopwright lifecycle report {module}",
    }[step]
    lines = []
    if compacted:
        lines += [
            "Note: the context was compacted. Recover first: read TASK/"
            + module
            + "/.auto-signal (iteration, step, next), "
            ".index.md (status) and .summary.md, then continue with the step below.",
            "",
        ]
    if correction:
        lines += [
            f"Correction: {correction}. If the step below is done, record it and write the signal now; "
            "otherwise finish the step first.",
            "",
        ]
    lines += [
        f"Step for this turn: {what} on TASK/{module} (auto iteration {iteration}).",
        f"Follow the loopwright task-{step} skill (skills/{step}/SKILL.md) for this step only.",
        f"Record the outcome with `{record}`; every status change goes through that command.",
        f"Then write the signal: `loopwright signal {module} --step {step} --result <RESULT> --next <NEXT>"
        f"{' --checkpoint <CHECKPOINT>' if step in ('check', 'exec', 'plan') else ''}"
        f" --iteration {iteration}`",
        "and end your turn. Do not start the next step: loopwright hands it to you.",
    ]
    return "\n".join(lines)
