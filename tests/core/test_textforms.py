"""The line shapes the Stop hook reads with plain string tests, held to the regular
expressions they replace (re costs the hook more to import than the whole check)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwright.core import completion, rates
from loopwright.state import claudemd, loops
from loopwright.state.project import is_loop_name


def sometimes(*fragments: str):
    """Text built from the pieces that matter, so hypothesis finds the edges."""
    return st.lists(st.sampled_from(fragments), max_size=8).map("".join)


FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
SENTINEL = re.compile(r"^\s*<promise>(.*?)</promise>\s*$", re.DOTALL)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
REDACT = re.compile(r"^\s*[-*]\s*redact:\s*`(.+)`\s*$")
SUFFIX = re.compile(r"(\[[^\]]*\])$|(-\d{8})$|(-latest)$")
LOOP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
OWNER_ID = re.compile(r"[A-Za-z0-9_-]{1,128}\Z")


@settings(max_examples=400)
@given(sometimes(" ", "   ", "    ", "\t", "`", "```", "~~~", "x", "\u2003"))
def test_fence(line):
    m = FENCE.match(line)
    assert completion.fence_run(line) == (m.group(1) if m else None)


@given(sometimes(" ", "\t", "<promise>", "</promise>", "DONE", "<", ">", "x", "\u00a0"))
def test_sentinel_line(line):
    m = SENTINEL.match(line)
    assert completion.sentinel_text(line) == (m.group(1) if m else None)


@settings(max_examples=400)
@given(sometimes(" ", "   ", "\t", "#", "###", "Loop Cost Rates", "C#", "x", "\u3000"))
def test_heading(line):
    m = HEADING.match(line)
    assert claudemd.heading_title(line) == (m.group(2) if m else None)


@given(sometimes(" ", "\t", "-", "*", "redact:", "`", "sk-[a-z]+", "x"))
def test_redaction_line(line):
    m = REDACT.match(line)
    assert claudemd.redact_pattern(line) == (m.group(1) if m else None)


def reference_model(name: str) -> str:
    name = name.strip().lower()
    while True:
        stripped = SUFFIX.sub("", name)
        if stripped == name:
            return name
        name = stripped


@given(sometimes("claude", "-", "[", "]", "1m", "2025", "0101", "latest", "\u0663", " "))
def test_model_names(name):
    assert rates.normalise_model(name) == reference_model(name)


@given(st.text(alphabet="aZ09_-. /\n\u00e9", max_size=70) | sometimes("a", "-", "_", "9"))
def test_names_and_ids(text):
    assert is_loop_name(text) == bool(LOOP_NAME.match(text)) or text.endswith("\n")
    assert not is_loop_name(text + "\n")  # stricter than the old pattern's $
    assert loops.is_owner_id(text) == bool(OWNER_ID.match(text))
