"""Task mode behind the mode interface: one ai-cli-task step per turn, chosen by the
module's own lifecycle (its status, its .auto-signal, its .auto-stop), never by the
completion sentinel."""

from __future__ import annotations

from pathlib import Path

from loopwright.core import jsoncodec, schema
from loopwright.core.errors import LoopError
from loopwright.core.modeapi import Mode, PromptParts, Step, Tick
from loopwright.modes.task import automode

SIGNAL_LIMIT = 64 * 1024  # an .auto-signal or .auto-stop is a few hundred bytes


class TaskMode(Mode):
    name = "task"
    summary = "drive one TASK/<module> through plan, check, exec, merge and report"
    defaults = {"max_iterations": 20, "max_minutes": 30}
    config_fields = {"task_module": schema.Str(255, null=True)}
    state_spec = schema.Obj(
        {
            "module": schema.Str(255, null=True),
            "step": schema.Str(32, null=True),
            "checkpoint": schema.Str(32, null=True),
        },
        null=True,
    )

    def begin(self, config: dict, project: str, stamp: str) -> dict | None:
        state = config.get("mode_state")
        if not config.get("task_module") or not isinstance(state, dict) or not state.get("step"):
            raise LoopError(
                "a task loop starts from /loopwright:task auto <module>, which picks its first step"
            )
        return dict(state, asked_at=stamp)

    def first_prompt(self, loop: dict, state: dict | None) -> str:
        st = state or {}
        return automode.step_prompt(
            st.get("module") or loop.get("task_module") or "",
            st.get("step") or "plan",
            st.get("checkpoint") or "",
            1,
        )

    def observe(self, loop: dict) -> automode.TaskView:
        return read_view(loop)

    def step(self, state: dict | None, observation, tick: Tick) -> Step:
        st = dict(state or {})
        if observation is None:
            return Step(state=st, completion=False)
        d = automode.next_step(st, observation, tick.iteration)
        st.update(d.state)
        journal = [{"event": "task.step", "decision": d.outcome or d.step, "reason": d.reason}]
        handover = (
            None
            if d.outcome
            else {
                "step": d.step,
                "checkpoint": d.checkpoint,
                "asked_at": tick.stamp,
                "correction": d.correction,
            }
        )
        return Step(
            outcome=d.outcome,
            reason=d.reason,
            state=st,
            handover=handover,
            completion=False,
            notes=d.notes,
            journal=journal,
        )

    def prompt(self, loop: dict, state: dict | None, parts: PromptParts, tick: Tick) -> str:
        st = state or {}
        lines = [parts.status, ""] + [f"Note: {n}" for n in parts.notes]
        if parts.gates:
            lines += [parts.gates, ""]
        body = automode.step_prompt(
            st.get("module") or loop.get("task_module") or "",
            st.get("step") or "",
            st.get("checkpoint") or "",
            tick.iteration + 1,
            st.get("correction"),
            tick.compacted,
        )
        return "\n".join(lines + [body])

    def status_parts(self, loop: dict, budget: dict) -> list:
        return [f"TASK/{loop.get('task_module')}"]

    def wrap_up_hint(self, loop: dict, state: dict | None) -> str:
        return (
            "Commit what is finished on the task module's branch, name anything left uncommitted in the "
            "handoff, and say which phase of the module (plan, check, exec, merge, report) comes next."
        )

    def outcome_text(self, loop: dict, outcome: str) -> str | None:
        return f"TASK/{loop.get('task_module')} is complete" if outcome == "LOOP_DONE" else None

    def end(self, loop: dict, outcome: str) -> None:
        """The transient .auto-signal and .auto-stop go with the loop."""
        from loopwright.modes.task.ops.taskmodule import TaskError, locate

        try:
            mod = locate(Path(loop["project_dir"]), loop.get("task_module") or "", must_exist=False)
        except TaskError:
            return
        for name in (".auto-signal", ".auto-stop"):
            try:
                (mod.main_dir / name).unlink()
            except OSError:
                pass


def read_view(loop: dict) -> automode.TaskView:
    """The module's status and phase, its signal and its stop request, as found on disk."""
    from loopwright.modes.task import taskdir
    from loopwright.modes.task.ops.taskmodule import TaskError, locate

    module = loop.get("task_module") or ""
    try:
        mod = locate(Path(loop["project_dir"]), module)
        index = taskdir.read_index(mod.state_dir)
    except (TaskError, taskdir.TaskDirError) as exc:
        return automode.TaskView(status="", problem=f"TASK/{module} cannot be read: {exc}")
    view = automode.TaskView(status=index.meta["status"], phase=index.meta.get("phase") or "")
    view.signal, view.signal_problem = _read_signal(mod.main_dir / ".auto-signal")
    view.stop_request = _read_stop(mod.main_dir / ".auto-stop")
    return view


def _read_signal(path: Path) -> tuple[dict | None, str | None]:

    from loopwright.core.errors import UnsafePath
    from loopwright.modes.task import signals
    from loopwright.state import store

    try:
        raw = store.read_regular(path, SIGNAL_LIMIT)
        return (signals.validate(jsoncodec.loads(raw)) if raw is not None else None), None
    except signals.SignalError as exc:  # before ValueError, which it also is
        return None, f".auto-signal is invalid: {exc}"
    except (jsoncodec.DecodeError, ValueError):
        return None, ".auto-signal is not valid JSON (or too large)"
    except UnsafePath:
        return None, ".auto-signal is a symlink or a special file; loopwright does not read those"


def _read_stop(path: Path) -> dict | None:

    from loopwright.core.errors import UnsafePath
    from loopwright.state import store

    try:
        raw = store.read_regular(path, SIGNAL_LIMIT)
    except (UnsafePath, ValueError):
        raw = b"{}"  # something is there: a stop request, whatever its form
    if raw is None:
        return None
    try:
        stop = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        stop = None
    return stop if isinstance(stop, dict) else {"reason": "user_stop"}


MODE = TaskMode()
