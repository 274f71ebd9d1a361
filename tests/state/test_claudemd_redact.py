"""CLAUDE.md's redaction patterns are untrusted: they run on RE2, in bounded windows, and
a pattern RE2 cannot take (or RE2 itself missing) is skipped with a note, never handed to
Python's backtracking re."""

import json
import re
import sys

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import LIB
from loopwright.state import claudemd
from loopwright.state.redaction import MARK, match_spans, redact_text

re2 = pytest.importorskip("re2")
OPTIONS = re2.Options()
OPTIONS.never_capture = True


def load(tmp_path, *patterns: str):
    lines = "".join(f"- redact: `{p}`\n" for p in patterns)
    (tmp_path / "CLAUDE.md").write_text(f"# Project\n\n### Loop Logging\n{lines}")
    return claudemd.load(tmp_path)


def test_patterns_run_on_re2_and_a_catastrophic_one_takes_linear_time(tmp_path):
    rules = load(tmp_path, r"(\S+)+QQQ", "sk-live-[a-z0-9]+")
    assert rules.problems == []
    assert all(type(p).__module__.startswith("re2") for p in rules.redactions)
    # Python's re needs about 2**n steps for n characters here; 100 would never finish, so
    # coming back at all shows RE2 ran it. In a child process: a hang fails at the timeout (a
    # bound on waiting, not a measure of speed) instead of holding the suite.
    code = (
        "import json, sys; from loopwright.state import claudemd; from loopwright.state.fspath import Path\n"
        f"rules = claudemd.load(Path({str(tmp_path)!r}))\n"
        "text = 'tests/test_api.py::test_token_' + 'a' * 200_000 + ' sk-live-abc123'\n"
        "out = claudemd.redact({'tail': text, 'more': [text[:100]]}, rules.redactions)\n"
        "print(json.dumps(out['tail'][-40:]), 'sk-live' in out['tail'])"
    )
    import subprocess

    env = {"PYTHONPATH": str(LIB)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    tail, leaked = res.stdout.rsplit(" ", 1)
    assert json.loads(tail).endswith(" " + MARK) and leaked.strip() == "False"


def test_patterns_re2_rejects_are_skipped_with_their_line(tmp_path):
    rules = load(tmp_path, r"(a)\1", r"foo(?=bar)", r"(?<=x)y", "ok-[0-9]+", "([")
    assert [p.split(":")[1] for p in rules.problems] == ["4", "5", "6", "8"]
    assert all("redaction pattern skipped: RE2 cannot run it" in p for p in rules.problems)
    assert len(rules.redactions) == 1
    assert claudemd.redact("a ok-12 aa", rules.redactions) == f"a {MARK} aa"


def test_without_re2_every_pattern_is_skipped_with_one_note(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "re2", None)  # import re2 raises ImportError
    rules = load(tmp_path, "sk-[a-z]+", "password=\\S+")
    assert rules.redactions == []  # never Python's re instead
    assert rules.problems == [
        "CLAUDE.md:4: redaction patterns need the google-re2 package, which cannot be imported; "
        "the Loop Logging patterns are skipped (start a new session to install it)"
    ]


def test_pattern_count_and_length_are_bounded(tmp_path):
    many = [f"p{i}" for i in range(claudemd.MAX_PATTERNS + 3)]
    rules = load(tmp_path, "x" * (claudemd.MAX_PATTERN_CHARS + 1), *many)
    assert len(rules.redactions) == claudemd.MAX_PATTERNS - 1
    assert "longer than 1000 characters" in rules.problems[0]
    assert rules.problems[1].startswith(f"CLAUDE.md:{4 + claudemd.MAX_PATTERNS}: more than 20 redaction")
    assert len(rules.problems) == 2


def test_no_patterns_imports_no_re2(tmp_path):
    import subprocess

    (tmp_path / "CLAUDE.md").write_text("### Loop Logging\n\n### Loop Cost Rates\n| m | 1 | 1 | 1 | 1 |\n")
    code = (
        "import sys; from loopwright.state import claudemd; from loopwright.state.fspath import Path;"
        f"r = claudemd.load(Path({str(tmp_path)!r})); print('re2' in sys.modules, sorted(r.rates))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(LIB)}
    )
    assert out.stdout.split() == ["False", "['m']"], out.stderr


def test_lone_surrogates_are_searched_without_breaking_indices():
    rx = re2.compile("sk-[a-z]+", OPTIONS)
    text = "\ud800 sk-abc \udfff é sk-z"
    assert redact_text(text, [rx]) == f"\ud800 {MARK} \udfff é {MARK}"


def test_marks_are_not_searched_again_and_touching_matches_become_one():
    word, dot = re2.compile(r"\w", OPTIONS), re2.compile(".", OPTIONS)
    text = "a" * 5000 + " b"
    # Sequential substitution would grow the text tenfold per pattern; here it shrinks.
    assert redact_text(text, [word, dot, word]) == MARK
    assert redact_text("ab cd", [word]) == f"{MARK} {MARK}"


# --- the window rule --------------------------------------------------------------------------

WIN, OVL = 16, 5  # small windows, so short texts cross many boundaries
DELIMITED = "K[0-9]+Z"
TEXT = st.lists(
    st.one_of(st.sampled_from(list("xyK0Z ")), st.integers(1, 3).map(lambda k: "K" + "1" * k + "Z")),
    max_size=60,
).map("".join)


def spans(pattern: str, text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(pattern, text) if m.end() > m.start()]


@given(TEXT)
def test_every_match_up_to_the_overlap_is_found_whole_wherever_it_falls(text):
    assume(all(b - a <= OVL for a, b in spans(DELIMITED, text)))
    assert match_spans(re2.compile(DELIMITED, OPTIONS), text, WIN, OVL) == spans(DELIMITED, text)
    # The same rule with Python's re (trusted, test-only) as the engine.
    assert match_spans(re.compile(DELIMITED), text, WIN, OVL) == spans(DELIMITED, text)
    out = redact_text(text, [re2.compile(DELIMITED, OPTIONS)])
    assert out == re.sub(f"(?:{DELIMITED})+", MARK, text)


@given(st.text(alphabet="ab K1Z", max_size=40), st.integers(0, 40), st.integers(OVL + 1, WIN - 1))
def test_a_match_reaching_a_window_end_is_searched_again_from_its_start(filler, at, length):
    """A greedy match longer than the overlap that a window cuts short is redacted whole."""
    secret = "S" + "1" * (length - 1)
    text = filler[:at] + " " + secret + " " + filler[at:]
    found = match_spans(re2.compile("S1+", OPTIONS), text, WIN, OVL)
    assert (text.index(secret), text.index(secret) + length) in found


def test_a_match_longer_than_a_window_is_redacted_in_its_first_window():
    text = "ab " + "S" + "1" * 40
    assert match_spans(re2.compile("S1+", OPTIONS), text, WIN, OVL) == [(3, 3 + WIN)]
    assert redact_text(text, [re2.compile("S1+", OPTIONS)]).startswith("ab " + MARK)


class Counting:
    """A pattern that counts the windows it is asked to search."""

    def __init__(self, pattern):
        self.pattern, self.calls = pattern, 0

    def finditer(self, text):
        self.calls += 1
        assert len(text) <= WIN
        return self.pattern.finditer(text)


PATTERNS = st.sampled_from([r"\w+X|\w", "a+$|a", "[ab]+", "b", ".", "a*", r"\w+", "(ab)+b|a"])


@given(PATTERNS, st.text(alphabet="abX \n", max_size=300))
def test_windows_are_bounded_and_spans_are_real_matches(pattern, text):
    rx = Counting(re2.compile(pattern, OPTIONS))
    found = match_spans(rx, text, WIN, OVL)
    assert rx.calls <= 2 * len(text) / (WIN - OVL) + 2
    flat = [i for s in found for i in s]
    assert flat == sorted(flat) and all(0 <= a < b <= len(text) for a, b in found)
    if "$" not in pattern:  # `$` also matches where a window ends: more is redacted, never less
        assert all(re.fullmatch(pattern, text[a:b]) for a, b in found)
    out = redact_text(text, [rx.pattern])
    assert len(out) <= len(text) + len(MARK) * (len(text) // 2 + 1)


def test_the_window_parameters_are_checked():
    with pytest.raises(ValueError):
        match_spans(re2.compile("a", OPTIONS), "aaa", 4, 4)
