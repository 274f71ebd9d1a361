"""What the first part of a JSON object's text says, for a list that reads only that much of a
value (a fleet loop's spec may be megabytes that `fleet ls` must not load).

Every member that is whole in the part is kept as it is; a string member cut short keeps what
is there; the member cut elsewhere, and everything after it, is left out.
"""

from __future__ import annotations

import json

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _string_head(text: str) -> str | None:
    """The string that ``text`` (an opening quote and what follows, with no closing quote)
    begins; an escape cut in the middle is dropped."""
    for cut in range(6):  # the longest escape is \\uXXXX
        try:
            value = json.loads(text[: len(text) - cut] + '"')
        except ValueError:
            continue
        return value if isinstance(value, str) else None
    return None


def object_head(text) -> dict:
    """The members of the JSON object that ``text`` begins, as far as it goes; {} when it
    begins no object."""
    out: dict = {}
    if not isinstance(text, str):
        return out
    i = _skip(text, 0)
    if not text.startswith("{", i):
        return out
    i += 1
    while True:
        i = _skip(text, i)
        try:
            key, i = _DECODER.raw_decode(text, i)
        except ValueError:
            return out
        i = _skip(text, i)
        if not isinstance(key, str) or not text.startswith(":", i):
            return out
        i = _skip(text, i + 1)
        try:
            value, i = _DECODER.raw_decode(text, i)
        except ValueError:
            head = _string_head(text[i:]) if text.startswith('"', i) else None
            if head is not None:
                out[key] = head
            return out
        out[key] = value
        i = _skip(text, i)
        if not text.startswith(",", i):
            return out
        i += 1
