"""The first part of a JSON object's text, read as far as it goes (core/jsonhead.py): what
`fleet ls` and the page show of a spec they read only the head of."""

from __future__ import annotations

import json

import pytest

from loopwright.core.jsonhead import object_head

SPEC = {
    "limits": {"max_iterations": 3, "max_dollars": 2.5},
    "verify": "make test",
    "goal": 'line 1\né "q" \\ end',
}


def test_a_whole_object_reads_as_itself():
    text = json.dumps(SPEC)
    assert object_head(text) == SPEC
    assert object_head(json.dumps(SPEC, indent=2)) == SPEC


@pytest.mark.parametrize("ascii_only", [True, False])
def test_every_cut_keeps_the_whole_members_and_the_start_of_a_string(ascii_only):
    text = json.dumps(SPEC, ensure_ascii=ascii_only)
    for end in range(len(text)):
        head = object_head(text[:end])
        whole = {k: v for k, v in SPEC.items() if k in head and head[k] == v}
        assert list(head) == list(SPEC)[: len(head)], end  # in order, none made up
        assert len(whole) >= len(head) - 1, end  # at most the last is cut
        for key, value in head.items():
            if value != SPEC[key]:
                assert isinstance(value, str) and SPEC[key].startswith(value), (end, key, value)


@pytest.mark.parametrize("text", ["", "[1, 2]", "not json", '"a string"', None, 7, '{"a": tru', "{1: 2}"])
def test_anything_else_reads_as_no_member_and_never_as_an_error(text):
    assert object_head(text) == {}
