"""The interface every loop mode implements, and the values it trades with the engine.

A mode is a folder under ``modes/`` exposing one object that satisfies ``Mode``; the
registry (``loopwright.modes``) finds it by name. The engine, the hooks and the CLI
look a mode up and call it; they never compare a mode's name. Everything here is
pure data: ``observe`` and ``end`` are the only methods that may touch the disk.
"""

from __future__ import annotations

# The budget dimensions a loop can have a ceiling on (core.budget names them the same).
DIMENSIONS = ("iterations", "minutes", "tokens", "dollars", "prs")


class Tick:
    """What the engine tells a mode about the Stop being decided."""

    __slots__ = ("iteration", "stamp", "compacted", "cancelled", "answers", "gate_policy")

    def __init__(
        self,
        iteration: int,
        stamp: str,
        compacted: bool = False,
        cancelled: bool = False,
        answers: tuple = (),
        gate_policy: str = "ask",
    ):
        self.iteration, self.stamp, self.compacted, self.cancelled = iteration, stamp, compacted, cancelled
        # The gate answers folded in at this Stop ({name, answer, item, ...}): how a mode
        # hears the user's answer to a gate it fired. ``gate_policy`` decides gates in
        # unattended runs (ask, continue, stop), so a mode can act on "continue" at once.
        self.answers, self.gate_policy = tuple(answers), gate_policy


class Step:
    """A mode's part of one decision.

    ``outcome`` ends the loop (a terminal outcome, SPEC §4.11) unless something that
    outranks it (a gate answered stop) already did. ``state`` replaces the mode's
    persisted state; ``handover`` is merged into it only when a next prompt is handed
    over (a paused loop has not asked for anything yet). ``completion`` says whether the
    completion sentinel may end the loop at this Stop. ``reason`` explains a continue as
    well as an end. ``notes`` open the next prompt; ``journal`` entries are recorded.

    ``fired`` names the stop condition behind ``outcome`` for the history line.
    ``gates`` are gates the mode fires ({name, question, options, ...}); the engine asks
    them like its own, under the gate policy, and hands the answers back in a later
    ``Tick.answers``. ``counted`` False says the turn that just ended did no work of the
    loop (it waited, or asked a gate): it does not count against --max-iterations, though
    its time and spend do. ``report`` is what the mode itself saw the turn do, folded like
    an agent's ``loopwright report`` (prs, comments, merges, tracked_prs, worktrees)."""

    __slots__ = (
        "outcome",
        "reason",
        "state",
        "handover",
        "completion",
        "notes",
        "journal",
        "fired",
        "gates",
        "counted",
        "report",
    )

    def __init__(
        self,
        *,
        outcome: str | None = None,
        reason: str = "",
        state: dict | None = None,
        handover: dict | None = None,
        completion: bool = True,
        notes: list[str] | None = None,
        journal: list[dict] | None = None,
        fired: list[str] | None = None,
        gates: list[dict] | None = None,
        counted: bool = True,
        report: dict | None = None,
    ):
        self.outcome, self.reason, self.state, self.handover = outcome, reason, state, handover
        self.completion = completion
        self.notes = list(notes or [])
        self.journal = list(journal or [])
        self.fired = list(fired or [])
        self.gates = list(gates or [])
        self.counted, self.report = counted, report


class PromptParts:
    """The pieces of the next prompt the engine builds; the mode arranges them around its own text."""

    __slots__ = ("status", "pressure", "notes", "gates", "tasks")

    def __init__(
        self,
        status: str,
        notes: list[str],
        gates: str | None = None,
        tasks: str = "",
        pressure: str | None = None,
    ):
        self.status, self.notes, self.gates, self.tasks, self.pressure = status, notes, gates, tasks, pressure

    def lead(self) -> list[str]:
        """The opening lines a mode's prompt can start with: status, notes, the gate section."""
        lines = [self.status, ""] + [f"Note: {n}" for n in self.notes]
        if self.notes:
            lines.append("")
        if self.gates:
            lines += [self.gates, ""]
        return lines


class Mode:
    """One kind of loop (SPEC §8). A mode subclasses this and overrides what it needs;
    the defaults describe a mode with no state, files or extra text of its own.
    (A plain class rather than typing.Protocol: importing typing would cost every Stop.)"""

    name = ""
    summary = ""  # one line for help and status
    defaults: dict = {}  # start options a request leaves out: max_iterations, max_minutes, ...
    counted: tuple = DIMENSIONS  # the DIMENSIONS whose ceilings stop this mode's loops
    config_fields: dict = {}  # schema specs of the mode's own keys in loop.json
    state_spec = None  # schema spec of the mode's persisted state (budget.json "mode_state")
    # Report fields the mode counts itself (Step.report): the agent's values are ignored.
    self_counted: tuple = ()
    # True: the loop works on the project's task registry, not on a task list of its own.
    project_tasks = False
    # True: a fleet may run several loops of this mode over one backlog (`submit --parallel`), each
    # item worked by one of them; the mode then gives fleet_share and with_fleet_items.
    shares_backlog = False

    def begin(self, config: dict, project: str, stamp: str) -> dict | None:
        """Check a start request's mode settings (``config`` holds the mode's keys and the
        requested ``mode_state``) at time ``stamp``; the mode's initial state. Raises
        LoopError with a one-line reason."""
        return None

    def first_prompt(self, loop: dict, state: dict | None) -> str:
        """What the agent reads in the turn that starts the loop (pure)."""
        raise NotImplementedError

    def observe(self, loop: dict):
        """What this mode needs to see at a Stop, read from disk (None when nothing)."""
        return None

    def step(self, state: dict | None, observation, tick: Tick) -> Step:
        """This mode's part of the decision (pure)."""
        return Step(state=state)

    def prompt(self, loop: dict, state: dict | None, parts: PromptParts, tick: Tick) -> str:
        """The next prompt, from the engine's parts and the mode's own text (pure)."""
        raise NotImplementedError

    def status_parts(self, loop: dict, budget: dict) -> list:
        """Extra fields for the status block and line, e.g. what the loop works on (pure)."""
        return []

    def wrap_up_hint(self, loop: dict, state: dict | None) -> str:
        """What the wrap-up turn (core/wrapup.py) asks of the working tree, in this mode's words (pure)."""
        return (
            "Leave the working tree as the next person should find it: commit finished work if this "
            "project commits as it goes, and name in the handoff anything left uncommitted."
        )

    def outcome_text(self, loop: dict, outcome: str) -> str | None:
        """Why the loop ended, in this mode's words; None leaves it to the engine (pure)."""
        return None

    def fleet_share(self, loop: dict, state: dict | None) -> tuple[list[str], list[str]]:
        """For a loop whose backlog a fleet shares: the items it could take next, in the order it
        takes them, and the items it has taken already (reads the backlog: I/O, for the loop's
        worker). Raises LoopError when the backlog cannot be read."""
        raise NotImplementedError

    def with_fleet_items(self, loop: dict, path: str) -> dict:
        """``loop`` (loop.json) working only the items that the file at ``path`` (its fleet
        worker's, outside the clone) lists as the loop's own (pure)."""
        raise NotImplementedError

    def end(self, loop: dict, outcome: str) -> None:
        """Clean up the mode's transient files once the loop has ended."""
