"""Review mode behind the mode interface: watch one pull request (sdd SPEC-0020
``/sdd:review --loop --pr N``). At every Stop the mode reads the PR and its pure
``step`` chooses the next turn:

* ``round``: one review-response round (review, respond, re-evaluate, merge if ready);
* ``wait``: nothing to do until the PR moves (same head SHA as the previous iteration
  ended with, CI in flight, a merge held for human re-review): the agent runs the
  bounded ``loopwright review wait`` and ends its turn. A wait turn is not an iteration;
  one in which the agent did not actually wait is, so a loop cannot spin for free;
* ``gate``: the post-feedback-merge gate, asked before merging;
* ``merge``: the user approved the merge: ``loopwright review merge``.

It ends with ``PR_TERMINAL`` when the PR is merged, closed or labelled do-not-merge.
``prs_touched`` stays ``["#N"]`` and the PR budget does not apply; the comments the
loop's login pushed (top-level and replies) are counted from GitHub itself."""

from __future__ import annotations

from loopwright.core import gates, schema
from loopwright.core.errors import LoopError
from loopwright.core.modeapi import DIMENSIONS, Mode, PromptParts, Step, Tick
from loopwright.modes.review import pr as prs
from loopwright.modes.review import prompts

PR_TERMINAL = "PR_TERMINAL"
EXTERNAL_UNREACHABLE = "EXTERNAL_UNREACHABLE"
READ_FAILURES_LIMIT = 2
SURVEY, ROUND, WAIT, GATE, MERGE = "survey", "round", "wait", "gate", "merge"
SHA = schema.Str(64, null=True)


class ReviewMode(Mode):
    name = "review"
    summary = (
        "watch one pull request: a review-response round each time it moves, until it is merged or closed"
    )
    defaults = {"max_iterations": 5, "max_minutes": 60}
    counted = tuple(d for d in DIMENSIONS if d != "prs")  # one PR, always: the PR budget is inactive
    self_counted = ("prs", "comments")  # counted from GitHub, not from the agent's reports
    config_fields = {
        "review": schema.Obj(
            {
                "pr": schema.Int(1, 10**9),
                "repo": schema.Obj({"host": schema.Str(300), "slug": schema.Str(300)}),
                "login": schema.Str(100),
                "agents": schema.List(schema.Str(100), 50),
                "hold_label": schema.Str(200),
                "merge_method": schema.Str(16, choices=("merge", "squash", "rebase")),
            },
            required=("pr", "repo", "login"),
        )
    }
    state_spec = schema.Obj(
        {
            "turn": schema.Str(16, choices=(SURVEY, ROUND, WAIT, GATE, MERGE)),
            "last_end_sha": SHA,
            "round_start_sha": SHA,
            "merge_ok_sha": SHA,
            "mine_seen": schema.Int(0, 10**9, null=True),
            "failures": schema.Int(0, 10**6),
        },
        null=True,
    )

    def begin(self, config: dict, project: str, stamp: str) -> dict | None:
        if not isinstance(config.get("review"), dict):
            raise LoopError("a review loop starts from /loopwright:review --loop --pr N")
        return {"turn": SURVEY, "failures": 0, "mine_seen": (config.get("mode_state") or {}).get("mine_seen")}

    def first_prompt(self, loop: dict, state: dict | None) -> str:
        return prompts.survey(loop)

    def observe(self, loop: dict):
        from loopwright.modes.review import watch
        from loopwright.state.loops import LoopPaths
        from loopwright.state.project import state_dir

        return watch.observe(loop, LoopPaths(state_dir(loop["project_dir"]), loop["name"]).dir)

    def step(self, state: dict | None, observation, tick: Tick) -> Step:
        st = dict(state or {})
        if observation is None:
            return Step(state=st, completion=False)
        view = observation.view
        counted = _counted(st, observation)
        notes = _apply_answers(st, tick, view)
        if view.problem:
            return _unreadable(st, view, counted)
        st["failures"] = 0
        report = _observed(st, view)
        end = prs.terminal(view, observation.hold_label)
        if end:
            reason = f"PR #{view.number} reached terminal state: {end}"
            return _step(
                st, counted, report, notes, outcome=PR_TERMINAL, reason=reason, fired=["pr_terminal"]
            )
        if st.get("turn") in (ROUND, MERGE):
            st["last_end_sha"], st["last_round"] = view.head, tick.iteration
            st["activity_seen"] = view.activity()
        return _next(st, view, observation, tick, counted, report, notes)

    def prompt(self, loop: dict, state: dict | None, parts: PromptParts, tick: Tick) -> str:
        return prompts.next_prompt(loop, state or {}, parts, tick)

    def status_parts(self, loop: dict, budget: dict) -> list:
        cfg = loop.get("review") or {}
        return [
            f"PR #{cfg.get('pr')}",
            f"comments {budget.get('comments_pushed', 0)}",
            f"merges {budget.get('merges_attempted', 0)}",
        ]

    def wrap_up_hint(self, loop: dict, state: dict | None) -> str:
        return (
            "Push no new review comments and merge nothing. Name in the handoff the review threads that are "
            "still open and what each one waits for."
        )

    def outcome_text(self, loop: dict, outcome: str) -> str | None:
        if outcome == PR_TERMINAL:
            return f"PR #{(loop.get('review') or {}).get('pr')} reached a terminal state"
        return None


def _step(st: dict, counted: bool, report: dict | None, notes: list[str], **kw) -> Step:
    return Step(state=st, completion=False, counted=counted, report=report, notes=notes, **kw)


def _counted(st: dict, obs) -> bool:
    """Rounds and merges are iterations; a wait turn is not, if the agent really waited."""
    turn = st.get("turn")
    if turn in (ROUND, MERGE):
        return True
    if turn == WAIT:
        waited = obs.waited or {}
        return not (waited.get("at") and str(waited["at"]) >= str(st.get("asked_at") or ""))
    return False


def _apply_answers(st: dict, tick: Tick, view: prs.PrView) -> list[str]:
    waiting = st.get("awaiting") or {}
    for ans in tick.answers:
        if ans.get("name") != waiting.get("gate"):
            continue
        st["awaiting"] = None
        if ans.get("answer") == "merge":
            st["merge_ok_sha"] = waiting.get("sha")
            return [f"the user approved merging PR #{view.number} at {str(waiting.get('sha'))[:12]}."]
        if ans.get("answer") == "hold":
            st["hold"] = {"sha": waiting.get("sha"), "activity": view.activity()}
            return [f"the user chose hold: PR #{view.number} waits for a human to review it again."]
    return []


def _unreadable(st: dict, view: prs.PrView, counted: bool) -> Step:
    st["failures"] = int(st.get("failures") or 0) + 1
    if st["failures"] >= READ_FAILURES_LIMIT:
        reason = f"PR #{view.number} could not be read {st['failures']} times in a row: {view.problem}"
        return _step(
            st, counted, None, [], outcome=EXTERNAL_UNREACHABLE, reason=reason, fired=["pr_unreadable"]
        )
    note = (
        f"PR #{view.number} could not be read ({view.problem}); loopwright tries again when this turn ends."
    )
    return _step(st, counted, None, [note], handover=_wait_handover(st, view, "", tick_stamp=None))


def _observed(st: dict, view: prs.PrView) -> dict:
    """PR #N is the only PR touched; comments are what the loop's login added on GitHub."""
    seen = st.get("mine_seen")
    st["mine_seen"] = view.mine
    tracked = {
        "number": view.number,
        "branch": view.branch,
        "head_sha_at_iteration_start": st.get("round_start_sha") or view.head,
        "head_sha_at_iteration_end": view.head,
        "state_at_end": view.state,
    }
    return {
        "prs": [f"#{view.number}"],
        "comments": max(0, view.mine - seen) if isinstance(seen, int) else 0,
        "tracked_prs": [tracked],
    }


def _next(st: dict, view: prs.PrView, obs, tick: Tick, counted: bool, report: dict, notes: list[str]) -> Step:
    """The next turn: a gate still waiting, a merge to ask about or to do, a wait, a round."""
    if st.get("awaiting"):
        return _step(st, counted, report, notes, handover={"turn": GATE})
    request = obs.merge_request or {}
    fresh = str(request.get("at") or "") >= str(st.get("asked_at") or "~")
    if fresh and request.get("sha") == view.head and st.get("merge_ok_sha") != view.head:
        return _merge_gate(st, view, request, tick, counted, report, notes)
    if st.get("merge_ok_sha") == view.head:
        return _step(st, counted, report, notes, handover={"turn": MERGE, "asked_at": tick.stamp})
    why = _why_wait(st, view)
    if why:
        return _step(st, counted, report, notes + [why], handover=_wait_handover(st, view, why, tick.stamp))
    st["hold"] = None
    st["round_start_sha"] = view.head
    respond_only = view.head == st.get("last_end_sha")
    handover = {"turn": ROUND, "asked_at": tick.stamp, "head": view.head, "respond_only": respond_only}
    handover["branch"], handover["since"] = view.branch, st.get("last_end_sha")
    return _step(st, counted, report, notes, handover=handover, reason=f"PR #{view.number} moved: a round")


def _why_wait(st: dict, view: prs.PrView) -> str:
    running = prs.ci_running(view)
    if running:
        names = ", ".join(running[:5])
        return f"PR #{view.number}: CI is running on {view.head[:12]} ({names}); waiting until it finishes"
    hold = st.get("hold") or {}
    if hold and hold.get("sha") == view.head and hold.get("activity") == view.activity():
        return f"PR #{view.number}: the merge is held for a human to review again; waiting for them"
    if view.head == st.get("last_end_sha") and view.activity() == st.get("activity_seen"):
        return (
            f"PR #{view.number}: no new commits since iteration {st.get('last_round')} "
            "(head_sha_at_iteration_end matches remote HEAD)"
        )
    return ""


def _wait_handover(st: dict, view: prs.PrView, why: str, tick_stamp: str | None) -> dict:
    running = bool(prs.ci_running(view)) if not view.problem else False
    st["activity_seen"] = view.activity() if not view.problem else st.get("activity_seen")
    return {
        "turn": WAIT,
        "asked_at": tick_stamp or st.get("asked_at"),
        "why": why,
        "wait_head": view.head or st.get("wait_head"),
        "wait_activity": st.get("activity_seen"),
        "wait_ci": running,
    }


def _merge_gate(st, view, request, tick, counted, report, notes) -> Step:
    humans = ", ".join(request.get("humans") or []) or "a reviewer"
    gate = {
        "name": gates.POST_FEEDBACK_MERGE,
        "question": f"Responder addressed human feedback on PR #{view.number}. "
        "Merge now or hold for human re-review?",
        "options": gates.OPTIONS[gates.POST_FEEDBACK_MERGE],
        "item": f"#{view.number}",
    }
    note = f"`loopwright review merge` stopped before merging: the loop answered feedback from {humans}."
    if tick.gate_policy == "continue":
        st["hold"] = {"sha": view.head, "activity": view.activity()}
        why = f"PR #{view.number}: the gate policy holds the merge for a human to review again"
        handover = _wait_handover(st, view, why, tick.stamp)
        return _step(st, counted, report, notes + [note, why], gates=[gate], handover=handover)
    st["awaiting"] = {"gate": gate["name"], "sha": view.head}
    return _step(st, counted, report, notes + [note], gates=[gate], handover={"turn": GATE})


MODE = ReviewMode()
