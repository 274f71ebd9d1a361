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
# expressions (compiling the patterns cost every Stop ~0.6 ms), built on first need:
# text with nothing to escape (str.isprintable() holds for each line: it is False for
# every character below, and for more) is returned as it is.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
# Unicode's line and paragraph separators: str.splitlines() and some renderers break lines
# there, so a quoted line could end early and the rest read as loopwright's own text.
_BREAKS = (0x2028, 0x2029)
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}
_TABLES: list[dict] = []  # [one line, keeping newlines and tabs, JSON]


def _shown(code: int) -> str:
    ch = chr(code)
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _tables() -> list[dict]:
    if not _TABLES:
        line = {c: _shown(c) for c in (*range(0x20), *range(0x7F, 0xA0), *_BIDI, *_BREAKS)}
        kept = {c: v for c, v in line.items() if c not in (0x09, 0x0A)}  # tab, newline kept
        _TABLES.extend((line, kept, {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), *_BIDI, *_BREAKS)}))
    return _TABLES


def clean(text: object) -> str:
    """``text`` with control characters shown as escapes (newlines and tabs kept)."""
    text = str(text)
    if all(part.isprintable() for part in text.split("\n")):
        return text
    return text.translate(_tables()[1])


def one_line(text: object) -> str:
    """Like ``clean``, and newlines and tabs escaped too: for a status line or a table cell."""
    text = str(text)
    return text if text.isprintable() else text.translate(_tables()[0])


def clean_json(text: str) -> str:
    """JSON text (control characters below 0x20 are already escaped by the encoder)
    with DEL, C1 and bidi characters written as ``\\uXXXX`` escapes: still valid JSON,
    and the same strings once parsed."""
    return text if text.isprintable() else text.translate(_tables()[2])
