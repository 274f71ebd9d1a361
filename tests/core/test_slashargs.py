"""Parsing slash-command argument text without a shell."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright.core.slashargs import ArgError, parse

SPEC = {"--max-iterations": True, "--completion-promise": True, "--name": True, "--force": False}


def test_quoted_goal_with_trailing_options():
    prompt, opts = parse('"Fix the flaky test" --max-iterations 10 --completion-promise DONE', SPEC)
    assert prompt == "Fix the flaky test"
    assert opts == {"--max-iterations": "10", "--completion-promise": "DONE"}


def test_leading_options_and_equals_form():
    prompt, opts = parse("--max-iterations=3 --name fix fix the build", SPEC)
    assert prompt == "fix the build"
    assert opts == {"--max-iterations": "3", "--name": "fix"}


def test_unquoted_goal_is_kept_verbatim():
    text = "run it; echo $(whoami) | cat `id` 'x' \"y\"\nsecond line"
    prompt, opts = parse(text + " --max-iterations 2", SPEC)
    assert prompt == text
    assert opts == {"--max-iterations": "2"}


def test_single_quoted_goal_keeps_inner_text_exactly():
    prompt, _ = parse("'a \"b\" $(c)\n d'", SPEC)
    assert prompt == 'a "b" $(c)\n d'


def test_double_dash_ends_options():
    prompt, opts = parse("--name x -- --max-iterations is part of the goal", SPEC)
    assert prompt == "--max-iterations is part of the goal"
    assert opts == {"--name": "x"}


def test_options_inside_the_goal_are_text():
    prompt, opts = parse("do --max-iterations 3 things", SPEC)
    assert prompt == "do --max-iterations 3 things"
    assert opts == {}


def test_quoted_option_value():
    _, opts = parse('"goal" --completion-promise "ALL DONE"', SPEC)
    assert opts["--completion-promise"] == "ALL DONE"


def test_boolean_option():
    prompt, opts = parse("goal --force", SPEC)
    assert prompt == "goal" and opts == {"--force": True}


@pytest.mark.parametrize(
    "text, message",
    [
        ("goal --max-iterations", "needs a value"),
        ("--max-iterations", "needs a value"),
        ("goal --bogus 3", "unknown option --bogus"),
        ("--bogus goal", "unknown option --bogus"),
        ("--name a --name b goal", "given twice"),
        ("goal --force=yes", "takes no value"),
    ],
)
def test_errors_are_one_clear_line(text, message):
    with pytest.raises(ArgError, match=message) as exc:
        parse(text, SPEC)
    assert "\n" not in str(exc.value)


def test_empty_text():
    assert parse("", SPEC) == ("", {})
    assert parse("   ", SPEC) == ("", {})


goal_text = st.text(min_size=1, max_size=200).filter(lambda s: s.strip() and "'" not in s)


@given(goal=goal_text, n=st.integers(1, 999))
def test_single_quoted_goal_round_trips_any_text(goal, n):
    prompt, opts = parse(f"'{goal}' --max-iterations {n}", SPEC)
    assert prompt == goal
    assert opts == {"--max-iterations": str(n)}
