"""JSON as loopwright reads and writes it, with the standard library.

The Stop hook runs after every turn: importing orjson costs it more (it loads
dataclasses, inspect, uuid and more at import) than the C-accelerated ``json``
module spends on the few kilobytes a Stop reads. Strict like orjson: NaN and
Infinity are refused both ways, output is compact UTF-8 bytes.
"""

from __future__ import annotations

import json

DecodeError = json.JSONDecodeError


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_decoder = json.JSONDecoder(parse_constant=_refuse_constant)
_compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_indented = json.JSONEncoder(ensure_ascii=False, allow_nan=False, indent=2)


def loads(data: bytes | bytearray | str):
    """Parse one JSON document. DecodeError (a ValueError) when it is not one."""
    if not isinstance(data, str):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"not UTF-8: {exc.reason}", "", 0) from None
    try:
        return _decoder.decode(data)
    except DecodeError:
        raise
    except (ValueError, RecursionError) as exc:  # a NaN, or nesting too deep to be ours
        raise DecodeError(str(exc) or type(exc).__name__, data[:80], 0) from None


def dumps(obj, indent: bool = False) -> bytes:
    return (_indented if indent else _compact).encode(obj).encode("utf-8")
