"""Terminal-safe text: every control, C1 and bidi character is shown, never sent."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from loopwright.core import termsafe

BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
BREAKS = "\u2028\u2029"  # line and paragraph separators: line breaks to some terminals and readers
# The specification, written as regular expressions.
UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI}{BREAKS}]")
UNSAFE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{BIDI}{BREAKS}]")
JSON_RAW = re.compile(f"[\x7f-\x9f{BIDI}{BREAKS}]")
NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}


def shown(m):
    ch = m.group(0)
    return NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


TEXT = st.text(alphabet=st.characters(max_codepoint=0x2100), max_size=200)


@given(TEXT)
def test_clean_and_one_line_follow_the_specification(text):
    assert termsafe.clean(text) == UNSAFE.sub(shown, text)
    assert termsafe.one_line(text) == UNSAFE_LINE.sub(shown, text)
    assert not UNSAFE.search(termsafe.clean(text)) and not UNSAFE_LINE.search(termsafe.one_line(text))


@given(st.recursive(st.none() | TEXT, lambda inner: st.lists(inner) | st.dictionaries(TEXT, inner)))
def test_clean_json_stays_the_same_json(value):
    text = termsafe.clean_json(json.dumps(value, ensure_ascii=False))
    assert not JSON_RAW.search(text) and json.loads(text) == value


def test_an_osc_52_clipboard_write_is_shown_not_sent():
    assert termsafe.clean("x\x1b]52;c;ZXZpbA==\x07y") == "x\\e]52;c;ZXZpbA==\\x07y"
