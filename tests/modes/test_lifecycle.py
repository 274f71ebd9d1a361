"""The ai-cli-task state machine cell by cell, both routing tables row by row,
the signal validator, module-name validation, and the .index.md format."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright.modes.task import automode, lifecycle, signals, taskdir
from loopwright.modes.task.lifecycle import LifecycleError

S = lifecycle.STATUSES
R = None  # ⊘

# The seed's matrix, transcribed independently of the implementation:
# status -> command -> {result: new status} or R. "=" keeps the status.
EXPECTED = {
    "draft": {
        "plan": {"": "planning"},
        "check post-plan": R,
        "check mid-exec": R,
        "check post-exec": R,
        "exec": R,
        "merge": R,
        "report": {"": "="},
        "cancel": {"": "cancelled"},
    },
    "planning": {
        "plan": {"": "="},
        "check post-plan": {"PASS": "review", "NEEDS_REVISION": "=", "BLOCKED": "blocked"},
        "check mid-exec": R,
        "check post-exec": R,
        "exec": R,
        "merge": R,
        "report": {"": "="},
        "cancel": {"": "cancelled"},
    },
    "review": {
        "plan": {"": "re-planning"},
        "check post-plan": R,
        "check mid-exec": R,
        "check post-exec": R,
        "exec": {"(start)": "executing"},
        "merge": R,
        "report": {"": "="},
        "cancel": {"": "cancelled"},
    },
    "executing": {
        "plan": {"": "re-planning"},
        "check post-plan": R,
        "check mid-exec": {"CONTINUE": "=", "NEEDS_FIX": "=", "REPLAN": "re-planning", "BLOCKED": "blocked"},
        "check post-exec": {"ACCEPT": "=", "NEEDS_FIX": "=", "REPLAN": "re-planning"},
        "exec": {"(start)": "=", "(done)": "=", "(blocked)": "blocked"},
        "merge": {"success": "complete", "conflict": "="},
        "report": {"": "="},
        "cancel": {"": "cancelled"},
    },
    "re-planning": {
        "plan": {"": "="},
        "check post-plan": {"PASS": "review", "NEEDS_REVISION": "=", "BLOCKED": "blocked"},
        "check mid-exec": R,
        "check post-exec": R,
        "exec": R,
        "merge": R,
        "report": {"": "="},
        "cancel": {"": "cancelled"},
    },
    "complete": {
        "plan": R,
        "check post-plan": R,
        "check mid-exec": R,
        "check post-exec": R,
        "exec": R,
        "merge": R,
        "report": {"": "="},
        "cancel": {"": "cancelled"},
    },
    "blocked": {
        "plan": {"": "planning"},
        "check post-plan": R,
        "check mid-exec": R,
        "check post-exec": R,
        "exec": R,
        "merge": R,
        "report": {"": "="},
        "cancel": {"": "cancelled"},
    },
    "cancelled": {
        "plan": R,
        "check post-plan": R,
        "check mid-exec": R,
        "check post-exec": R,
        "exec": R,
        "merge": R,
        "report": {"": "="},
        "cancel": {"": "="},
    },
}


def split(key):
    if key.startswith("check "):
        return "check", key.split()[1]
    return key, None


CELLS = [(s, c) for s in S for c in lifecycle.COMMANDS]


def test_the_expected_table_covers_every_cell():
    assert sorted((s, c) for s in EXPECTED for c in EXPECTED[s]) == sorted(CELLS)


@pytest.mark.parametrize("status, key", CELLS)
def test_every_cell_of_the_state_command_matrix(status, key):
    command, checkpoint = split(key)
    expected = EXPECTED[status][key]
    if expected is R:
        with pytest.raises(LifecycleError) as exc:
            lifecycle.transition(status, "", command, checkpoint, "PASS" if command == "check" else None)
        assert status in str(exc.value) and key in str(exc.value)
        assert not lifecycle.allowed(status, key)
        return
    assert lifecycle.allowed(status, key)
    for result, target in expected.items():
        change = lifecycle.transition(status, "", command, checkpoint, result or None)
        assert change.status == (status if target == "=" else target), (status, key, result)


@pytest.mark.parametrize(
    "status, key, bad",
    [
        ("planning", "check post-plan", "ACCEPT"),
        ("executing", "check mid-exec", "PASS"),
        ("executing", "check post-exec", "CONTINUE"),
        ("executing", "merge", "maybe"),
        ("executing", "exec", "(finished)"),
    ],
)
def test_results_outside_a_cell_are_refused(status, key, bad):
    command, checkpoint = split(key)
    with pytest.raises(LifecycleError, match="cannot give result"):
        lifecycle.transition(status, "", command, checkpoint, bad)


def test_phase_rules():
    assert lifecycle.transition("executing", "", "check", "mid-exec", "REPLAN").phase == "needs-plan"
    assert lifecycle.transition("executing", "", "check", "post-exec", "REPLAN").phase == "needs-plan"
    assert lifecycle.transition("re-planning", "needs-plan", "plan").phase == "needs-check"
    assert lifecycle.transition(
        "re-planning", "needs-check", "check", "post-plan", "PASS"
    ) == lifecycle.Change("review", "", True)
    assert lifecycle.transition("planning", "", "plan").phase == ""
    assert lifecycle.transition("review", "", "report").phase == ""


def test_exec_step_results():
    assert lifecycle.transition("executing", "", "exec", None, "(step-3)").status == "executing"
    with pytest.raises(LifecycleError):
        lifecycle.transition("executing", "", "exec", None, "(step-x)")


def test_check_needs_a_checkpoint_and_unknown_commands_are_named():
    with pytest.raises(LifecycleError, match="--checkpoint"):
        lifecycle.transition("planning", "", "check", None, "PASS")
    with pytest.raises(LifecycleError, match="unknown command 'deploy'"):
        lifecycle.transition("planning", "", "deploy")
    with pytest.raises(LifecycleError, match="unknown status"):
        lifecycle.transition("paused", "", "plan")


def test_matrix_verification_properties():
    for s in S:
        if s not in lifecycle.TERMINAL:
            exits = {
                lifecycle.transition(s, "", *split(c)[:1], split(c)[1], r or None).status
                for c in lifecycle.COMMANDS
                if lifecycle.allowed(s, c)
                for r in EXPECTED[s][c]
            }
            assert exits - {s}, f"{s} has no way out"
    assert all(lifecycle.allowed(s, "cancel") for s in S)
    assert not any(lifecycle.allowed(s, "exec") for s in ("draft", "planning", "re-planning"))


# --- routing tables --------------------------------------------------------------------------------

ENTRY_ROWS = [
    ("draft", "", ("plan", "")),
    ("planning", "", ("check", "post-plan")),
    ("review", "", ("exec", "")),
    ("executing", "", ("check", "post-exec")),
    ("re-planning", "needs-plan", ("plan", "")),
    ("re-planning", "needs-check", ("check", "post-plan")),
    ("re-planning", "", ("plan", "")),
    ("complete", "", ("report", "")),
    ("blocked", "", None),
    ("cancelled", "", None),
]


@pytest.mark.parametrize("status, phase, step", ENTRY_ROWS)
def test_status_based_entry_table(status, phase, step):
    assert signals.entry_step(status, phase) == step


def test_draft_needs_target_content():
    assert "fill .target.md first" in automode.first_step("draft", "", False)
    assert automode.first_step("draft", "", True) == ("plan", "")
    assert "blocked" in automode.first_step("blocked", "", True)


ROUTE_ROWS = [
    ("check", "PASS", "post-plan", ("exec", "")),
    ("check", "NEEDS_REVISION", "post-plan", ("plan", "")),
    ("check", "ACCEPT", "post-exec", ("merge", "")),
    ("check", "NEEDS_FIX", "post-exec", ("exec", "post-exec")),
    ("check", "NEEDS_FIX", "mid-exec", ("exec", "mid-exec")),
    ("check", "REPLAN", "post-exec", ("plan", "")),
    ("check", "BLOCKED", "post-plan", ("(stop)", "")),
    ("check", "CONTINUE", "mid-exec", ("exec", "")),
    ("check", "REPLAN", "mid-exec", ("plan", "")),
    ("check", "BLOCKED", "mid-exec", ("(stop)", "")),
    ("plan", "(generated)", "", ("check", "post-plan")),
    ("plan", "(annotations)", "", ("check", "post-plan")),
    ("exec", "(done)", "", ("check", "post-exec")),
    ("exec", "(mid-exec)", "", ("check", "mid-exec")),
    ("exec", "(step-2)", "", ("check", "mid-exec")),
    ("exec", "(blocked)", "", ("(stop)", "")),
    ("merge", "success", "", ("report", "")),
    ("merge", "conflict", "", ("(stop)", "")),
    ("report", "(generated)", "", ("(stop)", "")),
]


@pytest.mark.parametrize("step, result, checkpoint, expected", ROUTE_ROWS)
def test_result_based_routing_table(step, result, checkpoint, expected):
    assert signals.route(step, result, checkpoint) == expected


# --- the Stop-side step decision -------------------------------------------------------------------


def sig(step, result, nxt, ts="2026-11-22T10:00:05Z", **kw):
    return dict({"step": step, "result": result, "next": nxt, "checkpoint": "", "timestamp": ts}, **kw)


STATE = {"module": "demo", "step": "plan", "checkpoint": "", "asked_at": "2026-11-22T10:00:00Z"}


def test_step_decision_follows_the_signal():
    d = automode.next_step(
        STATE, automode.TaskView("planning", signal=sig("plan", "(generated)", "check")), 1
    )
    assert (d.outcome, d.step, d.checkpoint) == (None, "check", "post-plan")


def test_table_wins_over_a_wrong_next_field():
    d = automode.next_step(STATE, automode.TaskView("planning", signal=sig("plan", "(generated)", "exec")), 1)
    assert d.step == "check" and "following the table" in d.notes[0]


@pytest.mark.parametrize(
    "view, problem",
    [
        (automode.TaskView("planning"), "no .auto-signal"),
        (automode.TaskView("planning", signal=sig("check", "PASS", "exec")), "is for step check"),
        (
            automode.TaskView(
                "planning", signal=sig("plan", "(generated)", "check", ts="2026-11-22T09:00:00Z")
            ),
            "older than",
        ),
        (automode.TaskView("planning", signal_problem=".auto-signal is not valid JSON"), "not valid JSON"),
    ],
)
def test_missing_stale_or_invalid_signals_get_bounded_corrections(view, problem):
    state = dict(STATE)
    d = automode.next_step(state, view, 1)
    assert d.outcome is None and d.step == "plan" and problem in d.correction
    d = automode.next_step(d.state, view, 2)
    assert d.outcome is None
    d = automode.next_step(d.state, view, 3)
    assert d.outcome == "STOPPED:no-signal"


@pytest.mark.parametrize(
    "status, last, outcome",
    [
        ("complete", sig("report", "(generated)", "(stop)"), "LOOP_DONE"),
        ("blocked", sig("check", "BLOCKED", "(stop)"), "BLOCKED"),
        ("executing", sig("merge", "conflict", "(stop)"), "STOPPED:merge-conflict"),
        ("blocked", sig("exec", "(blocked)", "(stop)"), "BLOCKED"),
    ],
)
def test_stop_outcomes(status, last, outcome):
    state = dict(STATE, step=last["step"])
    assert automode.next_step(state, automode.TaskView(status, signal=last), 5).outcome == outcome


def test_auto_stop_and_cancel_end_between_steps():
    view = automode.TaskView(
        "planning", signal=sig("plan", "(generated)", "check"), stop_request={"reason": "timeout"}
    )
    assert automode.next_step(STATE, view, 1).outcome == "STOPPED:timeout"
    assert automode.next_step(STATE, automode.TaskView("cancelled"), 1).outcome == "CANCELLED"


# --- the signal validator ------------------------------------------------------------------------------


def test_valid_signals():
    for s in (
        sig("check", "PASS", "exec"),
        sig("exec", "(step-12)", "check", checkpoint="mid-exec", iteration=0),
        sig("report", "(generated)", "(stop)", iteration=7),
    ):
        assert signals.validate(s) is s


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("step", "deploy", "step"),
        ("result", "OK", "result"),
        ("result", "(step-x)", "result"),
        ("next", "done", "next"),
        ("checkpoint", "pre-plan", "checkpoint"),
        ("iteration", -1, "iteration"),
        ("iteration", 2.5, "iteration"),
        ("iteration", True, "iteration"),
        ("timestamp", "yesterday", "timestamp"),
        ("timestamp", "2026-11-22", "timestamp"),
    ],
)
def test_invalid_signals_name_the_field(field, value, message):
    s = sig("check", "PASS", "exec")
    s[field] = value
    with pytest.raises(signals.SignalError, match=message):
        signals.validate(s)


@given(st.text(max_size=20))
def test_signal_validator_accepts_only_whitelisted_results(result):
    s = sig("check", result, "exec")
    ok = result in signals.RESULTS or (
        result.startswith("(step-")
        and result.endswith(")")
        and result[6:-1].isdigit()
        and result[6:-1].isascii()
    )
    try:
        signals.validate(s)
        assert ok
    except signals.SignalError:
        assert not ok


# --- module names and paths -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["auth-refactor", "a_b", "模块", "données-2", "x", "Ωmega_3"])
def test_unicode_names_are_valid(name):
    assert taskdir.valid_name(name)


@pytest.mark.parametrize("name", ["", "..", "../x", "a/b", "a\\b", "a b", ".hidden", "x.y", "a\x00", "-\n"])
def test_bad_names_are_rejected(name, tmp_path):
    assert not taskdir.valid_name(name) or name == ".."
    with pytest.raises(taskdir.TaskDirError):
        taskdir.module_dir(tmp_path, name, must_exist=False)


@given(st.text(min_size=1, max_size=12))
def test_any_accepted_name_stays_under_task(tmp_path_factory, name):
    root = tmp_path_factory.mktemp("p")
    try:
        path = taskdir.module_dir(root, name, must_exist=False)
    except taskdir.TaskDirError:
        assert not taskdir.valid_name(name) or os.sep in name
        return
    assert taskdir.valid_name(name)
    assert os.path.realpath(path).startswith(os.path.realpath(root / "TASK") + os.sep)


def test_symlinked_module_is_rejected(tmp_path):
    (tmp_path / "TASK").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "TASK" / "evil")
    with pytest.raises(taskdir.TaskDirError, match="outside TASK|symlink"):
        taskdir.module_dir(tmp_path, "evil")


def test_missing_module_is_rejected_except_for_init(tmp_path):
    with pytest.raises(taskdir.TaskDirError, match="no task module TASK/nope"):
        taskdir.module_dir(tmp_path, "nope")
    assert taskdir.module_dir(tmp_path, "nope", must_exist=False) == tmp_path / "TASK" / "nope"


# --- .index.md ---------------------------------------------------------------------------------------------

SEED_INDEX = """---
title: "Human-readable task title"
status: draft
phase: ""
completed_steps: 0
created: 2024-01-01T00:00:00Z
updated: 2024-01-01T00:00:00Z
depends_on: []
tags: []
branch: "task/module-name"
worktree: ".worktrees/task-module-name"   # empty if not using worktree
---
# Notes
kept as they are
"""


def test_seed_frontmatter_parses_and_round_trips():
    idx = taskdir.parse_index(SEED_INDEX)
    assert (
        idx.meta["title"] == "Human-readable task title"
        and idx.meta["worktree"] == ".worktrees/task-module-name"
    )
    assert idx.meta["completed_steps"] == 0 and idx.meta["depends_on"] == []
    again = taskdir.parse_index(taskdir.render_index(idx))
    assert again.meta == idx.meta and "kept as they are" in again.body


def test_lists_in_both_forms():
    text = SEED_INDEX.replace("depends_on: []", 'depends_on: ["auth", db-setup]').replace(
        "tags: []", "tags:\n  - api\n  - 'v2'"
    )
    idx = taskdir.parse_index(text)
    assert idx.meta["depends_on"] == ["auth", "db-setup"] and idx.meta["tags"] == ["api", "v2"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("no frontmatter", "no YAML frontmatter"),
        ("---\nstatus: draft\n", "not closed"),
        ("---\nstatus: sleeping\n---\n", "status 'sleeping'"),
        ("---\nstatus: draft\ncompleted_steps: many\n---\n", "completed_steps"),
        ("---\nstatus: draft\n: oops\n---\n", "cannot read"),
    ],
)
def test_bad_frontmatter_is_a_clear_error(text, message):
    with pytest.raises(taskdir.TaskDirError, match=message):
        taskdir.parse_index(text)
