"""Text from the agent or from files, made safe to show on a terminal.

Task texts, reasons, goals, gate questions and file contents can hold escape
sequences: OSC 52 writes the clipboard, others retitle the window, move the
cursor or hide text. Everything loopwright prints that did not come from
loopwright's own code goes through ``clean`` (or ``clean_json`` for JSON), which
shows control characters as visible escapes instead of sending them. Standard
library only: the status line uses it.
"""

from __future__ import annotations

import re

# C0 controls except tab and newline, DEL, C1 controls, and the bidirectional
# overrides and isolates that reorder what is displayed ("Trojan Source").
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}


def _shown(m: re.Match) -> str:
    ch = m.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: object) -> str:
    """``text`` with control characters shown as escapes (newlines and tabs kept)."""
    return _UNSAFE.sub(_shown, str(text))


def one_line(text: object) -> str:
    """Like ``clean``, and newlines and tabs escaped too: for a status line or a table cell."""
    return _UNSAFE_LINE.sub(_shown, str(text))


def clean_json(text: str) -> str:
    """JSON text (control characters below 0x20 are already escaped by the encoder)
    with DEL, C1 and bidi characters written as ``\\uXXXX`` escapes: still valid JSON,
    and the same strings once parsed."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)
