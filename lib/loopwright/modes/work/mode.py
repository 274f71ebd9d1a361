"""Work mode behind the mode interface: grind a backlog one item per iteration (sdd
SPEC-0020 ``/sdd:work --loop``). At every Stop the mode reads the backlog, and its pure
``step`` decides: the backlog-empty and dependency-cycle stops, the in-progress skip,
the backlog-drift and ambiguous-criteria gates, and the next item. The completion
sentinel plays no part: the loop ends when nothing workable is left, or on a budget
(PRs touched included)."""

from __future__ import annotations

from loopwright.core import gates, schema
from loopwright.core.errors import LoopError
from loopwright.core.modeapi import Mode, PromptParts, Step, Tick
from loopwright.modes.work import backlog, fleet, prompts, source

BACKLOG_EMPTY = "BACKLOG_EMPTY"
DEPENDENCY_CYCLE = "DEPENDENCY_CYCLE"
EXTERNAL_UNREACHABLE = "EXTERNAL_UNREACHABLE"
READ_FAILURES_LIMIT = 2  # backlog reads failing in a row before the loop stops (sdd's outage rule)
FLEET_WAITS_LIMIT = 10  # turns in a row a fleet loop waits for its worker to reserve its next item
SURVEY, WORK, GATE = "survey", "work", "gate"
IDS = schema.List(schema.Str(64), 10_000, null=True)


class WorkMode(Mode):
    name = "work"
    summary = "grind a backlog (tasks or GitHub issues) one item per iteration"
    defaults = {"max_iterations": 5, "max_minutes": 60, "max_prs": 20}
    project_tasks = True  # the backlog is the project's task registry, not a list of the loop's own
    shares_backlog = True  # `submit work --parallel N`: modes/work/fleet.py
    config_fields = {
        "work": schema.Obj(
            {
                "source": schema.Str(16, choices=source.SOURCES),
                "repo": schema.Obj({"host": schema.Str(300), "slug": schema.Str(300)}, null=True),
                "labels": schema.List(schema.Str(200), 50),
                "milestone": schema.Int(1, 10**9, null=True),
                "assignee": schema.Str(100, null=True),
                "login": schema.Str(100, null=True),
                "in_progress_label": schema.Str(200, null=True),
                "fleet_items": schema.Str(4096, null=True),  # set by `run --fleet-items` only
            },
            required=("source",),
        )
    }
    state_spec = schema.Obj(
        {
            "turn": schema.Str(16, choices=(SURVEY, WORK, GATE)),
            "current": schema.Str(64, null=True),
            "snapshot": IDS,
            "order": IDS,
            "handled": IDS,
            "skipped": IDS,
            "approved": IDS,
            "escalate": IDS,
            "failures": schema.Int(0, 10**6),
            "fleet_waits": schema.Int(0, 10**6),
        },
        null=True,
    )

    def begin(self, config: dict, project: str, stamp: str) -> dict | None:
        if not isinstance(config.get("work"), dict):
            raise LoopError("a work loop starts from /loopwright:work --loop, which names its backlog")
        return {"turn": SURVEY, "handled": [], "skipped": [], "approved": [], "escalate": [], "failures": 0}

    def first_prompt(self, loop: dict, state: dict | None) -> str:
        return prompts.survey(loop)

    def observe(self, loop: dict) -> source.View:
        return source.read(loop)

    def step(self, state: dict | None, observation, tick: Tick) -> Step:
        st = dict(state or {})
        counted = st.get("turn") == WORK
        if observation is None:
            return Step(state=st, completion=False, counted=counted)
        notes = _apply_answers(st, tick)
        report = _observed(observation, st)
        if observation.problem:
            return _unreadable(st, observation.problem, counted, report)
        st["failures"] = 0
        if st.get("awaiting"):  # a gate of ours still waits for its answer
            return _step(st, counted, report, notes, handover={"turn": GATE})
        return _decide(st, observation, tick, counted, report, notes)

    def prompt(self, loop: dict, state: dict | None, parts: PromptParts, tick: Tick) -> str:
        return prompts.next_prompt(loop, state or {}, parts, tick)

    def status_parts(self, loop: dict, budget: dict) -> list:
        st = budget.get("mode_state") or {}
        where = prompts.source_name(loop)
        return [f"{st['current']} of {where}" if st.get("current") else where]

    def wrap_up_hint(self, loop: dict, state: dict | None) -> str:
        return (
            "Open no new pull request and claim no new item. Commit what is finished in the current "
            "item's worktree, push its branch if it already has a pull request, and keep the worktree: "
            "name it, its branch and the item in the handoff."
        )

    def outcome_text(self, loop: dict, outcome: str) -> str | None:
        if outcome == BACKLOG_EMPTY:
            return f"the backlog ({prompts.source_name(loop)}) has no workable item left"
        return None

    def fleet_share(self, loop: dict, state: dict | None) -> tuple[list[str], list[str]]:
        view = source.read(fleet.unshared(loop))
        if view.problem:
            raise LoopError(view.problem)
        st = state or {}
        skipped = list(st.get("skipped") or [])
        workable, _ = backlog.split(view.items, skipped)
        return [i["id"] for i in workable], list(dict.fromkeys([*(st.get("handled") or []), *skipped]))

    def with_fleet_items(self, loop: dict, path: str) -> dict:
        return dict(loop, work=dict(loop.get("work") or {}, fleet_items=path))


def _step(st: dict, counted: bool, report: dict, notes: list[str], **kw) -> Step:
    return Step(state=st, completion=False, counted=counted, report=report, notes=notes, **kw)


def _apply_answers(st: dict, tick: Tick) -> list[str]:
    """The user's answers to the gates this mode asked (a stop is the engine's)."""
    notes: list[str] = []
    waiting = st.get("awaiting") or {}
    for ans in tick.answers:
        if ans.get("name") == waiting.get("gate"):
            notes += _answered(st, waiting, ans.get("answer"))
            st["awaiting"] = None
        elif ans.get("name") == gates.REPEATED_FAILURE and ans.get("answer") == "skip" and ans.get("item"):
            item = str(ans["item"]).strip()
            st["skipped"] = _add(st.get("skipped"), f"#{item}" if item.isdigit() else item)
    return notes


def _answered(st: dict, waiting: dict, answer: str | None) -> list[str]:
    item = waiting.get("item")
    if waiting["gate"] == gates.BACKLOG_DRIFT:
        if answer == "re-propose":
            st["order"] = None  # the next pick follows the backlog as it is now
            return ["the user chose re-propose: the next item is chosen from the backlog as it is now."]
        return ["the user chose continue: the loop keeps the order it had proposed."]
    if answer == "proceed":
        st["approved"] = _add(st.get("approved"), item)
        return [f"the user chose proceed: work on {item} with your best reading of its criteria."]
    if answer in ("skip", "escalate"):
        st["skipped"] = _add(st.get("skipped"), item)
        if answer == "escalate":
            st["escalate"] = _add(st.get("escalate"), item)
        return [f"the user chose {answer} for {item}; it is left out of this loop."]
    return []


def _add(ids: list | None, item: str | None) -> list:
    ids = list(ids or [])
    if item and item not in ids:
        ids.append(item)
    return ids


def _unreadable(st: dict, problem: str, counted: bool, report: dict) -> Step:
    st["failures"] = int(st.get("failures") or 0) + 1
    if st["failures"] >= READ_FAILURES_LIMIT:
        reason = f"the backlog could not be read {st['failures']} times in a row: {problem}"
        return _step(
            st, counted, report, [], outcome=EXTERNAL_UNREACHABLE, reason=reason, fired=["backlog_unreadable"]
        )
    note = f"the backlog could not be read ({problem}); loopwright tries again when this turn ends."
    return _step(st, counted, report, [note], handover={"turn": SURVEY})


def _decide(st: dict, view: source.View, tick: Tick, counted: bool, report: dict, notes: list[str]) -> Step:
    """Stops first (cycle, empty), then drift, then the pick and its criteria."""
    loop_cycle = backlog.cycle(view.items)
    if loop_cycle:
        edges = backlog.describe_cycle(loop_cycle)
        reason = f"Dependency cycle detected: {edges} — please resolve manually"
        return _step(
            st, counted, report, notes, outcome=DEPENDENCY_CYCLE, reason=reason, fired=["dependency_cycle"]
        )
    workable, passed = backlog.split(view.items, st.get("skipped") or [])
    notes += [f"not picked: {item_id}, {why}." for item_id, why in passed[:20]]
    waiting = fleet.unreserved_workable(view.items, st.get("skipped") or []) if view.fleet else []
    if not workable and waiting:
        return _fleet_wait(st, waiting, counted, report, notes)
    if not workable:
        used = tick.iteration if counted else tick.iteration - 1
        reason = f"Backlog empty — {used} iteration{'s' if used != 1 else ''} used"
        return _step(
            st, counted, report, notes, outcome=BACKLOG_EMPTY, reason=reason, fired=["backlog_empty"]
        )
    # Drift is judged on every open item in scope, so an item the loop's own work unblocked
    # is not news; items others added, closed or took are.
    ids = [i["id"] for i in view.items if not i.get("in_progress") or i["id"] in (st.get("handled") or [])]
    added, removed = backlog.drift(st.get("snapshot"), ids, st.get("handled") or [])
    if view.fleet:
        added = []  # the fleet hands this loop its items as it goes: a new one is no news
    st["snapshot"] = ids
    if added or removed:
        gate = _drift_gate(added, removed)
        if tick.gate_policy != "continue":
            st["awaiting"] = {"gate": gate["name"]}
            return _step(st, counted, report, notes + [gate["detail"]], gates=[gate], handover={"turn": GATE})
        notes.append(gate["detail"] + " (the gate policy continues with the order proposed before)")
        return _pick(st, workable, tick, counted, report, notes, [gate])
    return _pick(st, workable, tick, counted, report, notes, [])


def _pick(st, workable, tick, counted, report, notes, decided: list[dict]) -> Step:
    """The item to hand over, unless its criteria need the user first. ``decided`` holds
    gates the policy already answered this tick (recorded by the engine)."""
    item = backlog.pick(workable, st.get("current"), st.get("order"))
    vague = backlog.ambiguous(item, needs_section=item["id"].startswith("#"))
    if vague and item["id"] not in (st.get("approved") or []):
        gate = _criteria_gate(item, vague)
        if tick.gate_policy != "continue":
            st["awaiting"] = {"gate": gate["name"], "item": item["id"]}
            return _step(st, counted, report, notes, gates=[gate], handover={"turn": GATE})
        notes.append(f"{item['id']} has ambiguous criteria ({vague}); the gate policy proceeds.")
        decided = decided + [gate]
    st["order"] = [i["id"] for i in workable]
    st["current"] = item["id"]
    st.pop("fleet_waits", None)
    st["handled"] = _add(st.get("handled"), item["id"])
    handover = {"turn": WORK, "item": {k: item.get(k) for k in ("id", "title", "body", "url")}}
    escalate, st["escalate"] = list(st.get("escalate") or []), []
    handover["escalate_now"] = escalate
    reason = f"next item: {item['id']}"
    return _step(st, counted, report, notes, handover=handover, reason=reason, gates=decided)


def _fleet_wait(st: dict, waiting: list[str], counted: bool, report: dict, notes: list[str]) -> Step:
    """Nothing of this loop's is workable, but items nobody holds are: its worker has not
    reserved the next one yet. A turn's wait, not the end of the backlog."""
    st["fleet_waits"] = int(st.get("fleet_waits") or 0) + 1
    free = ", ".join(waiting[:5])
    if st["fleet_waits"] > FLEET_WAITS_LIMIT:
        reason = (
            f"the fleet's worker reserved no item for this loop in {FLEET_WAITS_LIMIT} turns while {free} "
            "waited unclaimed: is the fleet's database reachable from the worker?"
        )
        return _step(
            st,
            counted,
            report,
            notes,
            outcome=EXTERNAL_UNREACHABLE,
            reason=reason,
            fired=["fleet_unreserved"],
        )
    note = (
        f"the fleet has not reserved this loop's next item yet ({free} not claimed by any loop); "
        "loopwright reads the backlog again when this turn ends."
    )
    return _step(st, counted, report, notes + [note], handover={"turn": SURVEY})


def _drift_gate(added: list[str], removed: list[str]) -> dict:
    parts = []
    if added:
        parts.append("added " + ", ".join(added))
    if removed:
        parts.append("gone " + ", ".join(removed))
    return {
        "name": gates.BACKLOG_DRIFT,
        "question": "Backlog changed since last iteration. Re-propose the next batch?",
        "options": gates.OPTIONS[gates.BACKLOG_DRIFT],
        "detail": "the backlog changed since the last iteration: " + "; ".join(parts) + ".",
    }


def _criteria_gate(item: dict, why: str) -> dict:
    item_id = item["id"]
    subject = f"Issue {item_id}" if item_id.startswith("#") else f"Task {item_id}"
    return {
        "name": gates.AMBIGUOUS_CRITERIA,
        "question": f"{subject} has ambiguous criteria. "
        "Skip, escalate, or proceed with my best interpretation?",
        "options": gates.OPTIONS[gates.AMBIGUOUS_CRITERIA],
        "item": item_id,
        "detail": why,
    }


def _observed(view: source.View, st: dict) -> dict:
    """The loop's own PRs (by branch) and worktrees, as the turn left them."""
    seen = dict(st.get("pr_heads") or {})
    tracked = []
    for pr in view.prs:
        start = seen.get(str(pr["number"])) or pr["head_sha"]
        tracked.append(
            {
                "number": pr["number"],
                "branch": pr["branch"],
                "head_sha_at_iteration_start": start,
                "head_sha_at_iteration_end": pr["head_sha"],
                "state_at_end": pr["state"],
            }
        )
        seen[str(pr["number"])] = pr["head_sha"]
    st["pr_heads"] = seen
    return {
        "prs": [f"#{pr['number']}" for pr in view.prs],
        "tracked_prs": tracked,
        "worktrees": view.worktrees,
    }


MODE = WorkMode()
