"""A fleet row's spec becomes `loopwright run` arguments: checked, bounded, and never able to set
the runner's own options from a database others can write."""

from __future__ import annotations

import pytest

from loopwright.cli.run import run
from loopwright.fleet import spec
from loopwright.fleet.spec import SpecError, runner_args


def test_the_deny_list_is_exactly_the_run_commands_options():
    options = {o for p in run.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
    assert options | {"--help"} == spec.RUN_OPTIONS


def test_a_goal_goes_after_the_options_as_one_argument():
    args = runner_args("prompt", {"goal": "fix it; rm -rf / $(x)\n`y`", "limits": {"max_iterations": 3}})
    assert args == ["--max-iterations", "3", "--", "fix it; rm -rf / $(x)\n`y`"]


def test_options_and_flags_become_their_switches():
    row = {"goal": "g", "completion_promise": "DONE", "judge": False, "wrap_up": True, "limits": {}}
    assert runner_args("prompt", row) == [
        "--completion-promise",
        "DONE",
        "--no-judge",
        "--wrap-up",
        "--",
        "g",
    ]


def test_a_mode_s_words_follow_its_name():
    assert runner_args("work", {"args": ["--source", "github"]}) == ["work", "--source", "github"]
    words = ["--source", "github", "--repo", "acme/web.site"]
    assert runner_args("work", {"args": words}) == ["work", *words]


def test_a_plain_judge_model_and_a_goal_that_mentions_a_path_are_data():
    row = {"goal": "fix /etc/app.conf parsing", "judge": True, "judge_model": "claude-haiku-4-5"}
    assert runner_args("prompt", row) == [
        "--judge-model",
        "claude-haiku-4-5",
        "--judge",
        "--",
        "fix /etc/app.conf parsing",
    ]


@pytest.mark.parametrize(
    "word", ["--claude", "--claude=/tmp/evil", "--plugin-dir", "--notify=command:x", "--carry"]
)
def test_a_mode_s_words_never_set_a_runner_option(word):
    with pytest.raises(SpecError, match="runner's own option"):
        runner_args("work", {"args": ["--source", "github", word]})


@pytest.mark.parametrize(
    "kind, row, problem",
    [
        ("prompt", {"goal": ""}, "non-empty"),
        ("prompt", {"goal": "x" * (spec.MAX_GOAL + 1)}, "limit is"),
        ("prompt", {"goal": "g", "limits": {"max_iterations": 0}}, "between"),
        ("prompt", {"goal": "g", "limits": {"max_iterations": 2.5}}, "whole number"),
        ("prompt", {"goal": "g", "limits": {"max_iterations": True}}, "whole number"),
        ("prompt", {"goal": "g", "limits": {"max_dollars": "5"}}, "number"),
        ("prompt", {"goal": "g", "limits": {"rm": 1}}, "unknown limit"),
        ("prompt", {"goal": "g", "limits": []}, "JSON object"),
        ("prompt", {"goal": "g", "verify": "a\nb"}, "line break"),
        ("prompt", {"goal": "g", "judge": "yes"}, "true or false"),
        ("prompt", "not a dict", "not a JSON object"),
        ("shell", {"goal": "g"}, "unknown kind"),
        ("work", {"args": "--source github"}, "list"),
        ("work", {"args": ["x"] * 65}, "list"),
        ("work", {"args": ["ok", 7]}, "non-empty text"),
        # What becomes a program's argument has the shape of plain data.
        ("prompt", {"goal": "g", "judge": True, "judge_model": "arn:aws:bedrock:x"}, "plain model name"),
        ("prompt", {"goal": "g", "judge": True, "judge_model": "-x"}, "plain model name"),
        ("prompt", {"goal": "/loopwright:loop --verify 'touch /tmp/x' go"}, "may not start with '/'"),
        ("prompt", {"goal": "\n  /compact"}, "may not start with '/'"),
        ("work", {"args": ["--source", "github", "--repo", "evil.example/acme/x"]}, "OWNER/NAME"),
        ("work", {"args": ["--source", "github", "--repo=acme/.."]}, "OWNER/NAME"),
        ("review", {"args": ["--pr", "3", "--repo", "127.0.0.1:8080/a/b"]}, "OWNER/NAME"),
    ],
)
def test_a_bad_row_is_one_clear_error(kind, row, problem):
    with pytest.raises(SpecError, match=problem) as err:
        runner_args(kind, row)
    assert "\n" not in str(err.value)


def test_limits_of_returns_the_checked_limits():
    assert spec.limits_of({"limits": {"max_dollars": 2.5}}) == {"max_dollars": 2.5}
    assert spec.limits_of(None) == {}
    with pytest.raises(SpecError):
        spec.limits_of({"limits": {"max_dollars": -1}})


@pytest.mark.parametrize(
    "kind, words, problem",
    [
        ("work", ["-h"], "'-h' is not an option of the work mode"),
        ("work", ["--source", "tasks", "-h"], "'-h' is not an option"),
        ("review", ["--pr", "3", "-hv"], "'-hv' is not an option of the review mode"),
        ("task", ["auto", "demo", "--", "-h"], "'--' is not an option of the task mode"),
        ("work", ["--bogus"], "'--bogus' is not an option"),
        ("work", ["--source"], "needs a value"),
        ("work", ["--source", "tasks", "--source=github"], "given twice"),
    ],
)
def test_a_mode_s_words_are_what_the_mode_s_own_parser_takes(kind, words, problem):
    # `loopwright run work -h` prints the runner's help and exits 0: a worker would claim such a
    # loop again and again, so submit refuses it, and a worker given the row by SQL ends it.
    with pytest.raises(SpecError, match=problem) as err:
        runner_args(kind, {"args": words})
    assert "\n" not in str(err.value)


def test_a_value_that_starts_with_a_dash_is_a_value():
    assert runner_args("work", {"args": ["--label", "-wip"]}) == ["work", "--label", "-wip"]
    assert runner_args("task", {"args": ["auto", "demo", "--start"]}) == ["task", "auto", "demo", "--start"]
    assert runner_args("review", {"args": ["--pr", "12"]}) == ["review", "--pr", "12"]
