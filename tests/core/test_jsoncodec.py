"""loopwright's JSON codec drives the C codec directly; it must read and write exactly
what the json module would (with NaN and Infinity refused both ways)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright.core import jsoncodec

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"))
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5)
)


@given(VALUES)
def test_output_is_what_json_writes(value):
    assert jsoncodec.dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    assert jsoncodec.dumps(value, indent=True) == json.dumps(value, ensure_ascii=False, indent=2).encode()
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert jsoncodec.canonical(value) == canonical.encode()


@given(VALUES)
def test_what_it_writes_reads_back(value):
    assert jsoncodec.loads(jsoncodec.dumps(value)) == value
    assert jsoncodec.loads(jsoncodec.dumps(value, indent=True).decode()) == value


@given(st.text(max_size=60))
def test_any_text_parses_as_json_does_or_is_refused(text):
    try:
        expected = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (ValueError, RecursionError):
        with pytest.raises(jsoncodec.DecodeError):
            jsoncodec.loads(text)
    else:
        assert jsoncodec.loads(text) == expected


@pytest.mark.parametrize(
    "bad", ["", "  ", "NaN", "[Infinity]", "-Infinity", '{"a":1} x', "\ufeff{}", b"\xff", "[" * 100_000]
)
def test_bad_documents_are_one_error(bad):
    with pytest.raises(jsoncodec.DecodeError):
        jsoncodec.loads(bad)


@pytest.mark.parametrize("bad", [math.nan, [math.inf], {"a": -math.inf}, {1, 2}, object()])
def test_values_json_cannot_hold_are_refused(bad):
    with pytest.raises((ValueError, TypeError)):
        jsoncodec.dumps(bad)


def test_a_cycle_is_refused_not_a_crash():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        jsoncodec.dumps(loop)


def test_keys_that_are_not_strings_are_written_as_json_writes_them():
    value = {1: "a", False: "b", None: "c", 2.5: {"x": [1]}}
    assert jsoncodec.dumps(value, indent=True) == json.dumps(value, ensure_ascii=False, indent=2).encode()
