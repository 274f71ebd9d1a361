"""The completion sentinel's counting rules (SPEC §4.6)."""

from hypothesis import given
from hypothesis import strategies as st

from loopwright.core.completion import has_sentinel, sentinel


def test_own_line_counts():
    assert has_sentinel("All tests pass.\n<promise>DONE</promise>", "DONE")


def test_surrounding_and_inner_whitespace_is_normalised():
    assert has_sentinel("done\n   <promise>  LOOP   COMPLETE </promise>\t\n", "LOOP COMPLETE")
    assert has_sentinel("<promise>LOOP\tCOMPLETE</promise>", "LOOP  COMPLETE")


def test_inline_mention_does_not_count():
    assert not has_sentinel("I will print <promise>DONE</promise> when done", "DONE")
    assert not has_sentinel("`<promise>DONE</promise>`", "DONE")
    assert not has_sentinel("> <promise>DONE</promise>", "DONE")


def test_other_text_does_not_count():
    assert not has_sentinel("<promise>DONE!</promise>", "DONE")
    assert not has_sentinel("<promise>done</promise>", "DONE")
    assert not has_sentinel("<promise>DONE</promise> and more", "DONE")
    assert not has_sentinel("", "DONE")
    assert not has_sentinel(None, "DONE")


def test_fenced_code_never_counts():
    msg = "Here is how to finish:\n```\n<promise>DONE</promise>\n```\nnot yet"
    assert not has_sentinel(msg, "DONE")
    tilde = "~~~text\n<promise>DONE</promise>\n~~~"
    assert not has_sentinel(tilde, "DONE")


def test_after_a_closed_fence_it_counts():
    msg = "```python\nprint('<promise>DONE</promise>')\n```\n<promise>DONE</promise>"
    assert has_sentinel(msg, "DONE")


def test_fence_closes_only_with_same_kind_and_length():
    msg = "````\n```\n<promise>DONE</promise>\n````"
    assert not has_sentinel(msg, "DONE")
    msg2 = "```\n~~~\n<promise>DONE</promise>\n```"
    assert not has_sentinel(msg2, "DONE")


def test_unclosed_fence_hides_the_rest():
    assert not has_sentinel("```\n<promise>DONE</promise>", "DONE")


words = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs",), blacklist_characters="<>\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    ),
    min_size=1,
    max_size=30,
).filter(lambda s: s.split())
lines = st.lists(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="`~<"), max_size=40
    ).map(lambda s: s.replace("\r", "")),
    max_size=8,
)


@given(promise=words, before=lines, after=lines)
def test_sentinel_on_its_own_line_is_found_anywhere_outside_fences(promise, before, after):
    msg = "\n".join([*before, sentinel(promise), *after])
    assert has_sentinel(msg, promise)


@given(promise=words, before=lines, after=lines)
def test_sentinel_inside_a_fence_is_never_found(promise, before, after):
    msg = "\n".join([*before, "```", sentinel(promise), *after, "```"])
    assert not has_sentinel(msg, promise)


@given(
    promise=words,
    prefix=st.text(min_size=1, max_size=10).filter(
        lambda s: (
            s.strip()
            and "\n" not in s
            and "\r" not in s
            and not any(c in s for c in "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
        )
    ),
)
def test_text_before_the_sentinel_on_the_same_line_never_counts(promise, prefix):
    assert not has_sentinel(prefix + sentinel(promise), promise)
