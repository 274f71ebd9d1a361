"""Text from the agent or from files, made safe to show on a terminal.

Task texts, reasons, goals, gate questions and file contents can hold escape
sequences: OSC 52 writes the clipboard, others retitle the window, move the
cursor or hide text. Everything loopwright prints that did not come from
loopwright's own code goes through ``clean`` (or ``clean_json`` for JSON), which
shows control characters as visible escapes instead of sending them. Standard
library only: the status line uses it.
"""

from __future__ import annotations

# C0 controls, DEL, C1 controls, and the bidirectional overrides and isolates that
# reorder what is displayed ("Trojan Source"). Translation tables, not regular
# expressions: building them costs nothing, compiling the patterns cost every Stop ~0.6 ms.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}


def _shown(code: int) -> str:
    ch = chr(code)
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_UNSAFE_LINE = {c: _shown(c) for c in (*range(0x20), *range(0x7F, 0xA0), *_BIDI)}
_UNSAFE = {c: v for c, v in _UNSAFE_LINE.items() if c not in (0x09, 0x0A)}  # tab, newline kept
_JSON_RAW = {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), *_BIDI)}


def clean(text: object) -> str:
    """``text`` with control characters shown as escapes (newlines and tabs kept)."""
    return str(text).translate(_UNSAFE)


def one_line(text: object) -> str:
    """Like ``clean``, and newlines and tabs escaped too: for a status line or a table cell."""
    return str(text).translate(_UNSAFE_LINE)


def clean_json(text: str) -> str:
    """JSON text (control characters below 0x20 are already escaped by the encoder)
    with DEL, C1 and bidi characters written as ``\\uXXXX`` escapes: still valid JSON,
    and the same strings once parsed."""
    return text.translate(_JSON_RAW)
