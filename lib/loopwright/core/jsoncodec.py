"""JSON as loopwright reads and writes it, with the standard library's C codec.

The Stop hook runs after every turn. ``orjson`` costs more to import than it saves on
the few kilobytes a Stop reads, and so does the ``json`` package itself: it imports
``re`` and ``enum`` (about 5 ms) to compile patterns the C scanner and encoder in
``_json`` never use. This module drives ``_json`` directly, with exactly the options
``json`` would pass, and falls back to ``json`` where ``_json`` is missing. Strict like
orjson: NaN and Infinity are refused both ways. Output is UTF-8 bytes; ``indent``
gives the layout of ``json.dumps(indent=2)`` (the tests hold both to ``json``).
"""

from __future__ import annotations


class DecodeError(ValueError):
    """The text is not one JSON document loopwright accepts."""


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _refuse_object(obj):
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


class _ScanContext:
    """The attributes ``_json.make_scanner`` reads (those of a json.JSONDecoder)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_refuse_constant)


try:
    import _json

    _scan = _json.make_scanner(_ScanContext())
    _encode_str = _json.encode_basestring
    _c_compact = _json.make_encoder(None, _refuse_object, _encode_str, None, ":", ",", False, False, False)
    _c_canonical = _json.make_encoder(
        None, _refuse_object, _json.encode_basestring_ascii, None, ":", ",", True, False, False
    )

    def _compact(obj) -> str:
        return "".join(_c_compact(obj, 0))

    def _canonical(obj) -> str:
        return "".join(_c_canonical(obj, 0))

except (ImportError, AttributeError, TypeError):  # pragma: no cover - an interpreter without _json
    import json

    _scan = json.JSONDecoder(parse_constant=_refuse_constant).scan_once
    _encode_str = json.encoder.py_encode_basestring
    _compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    _canonical = json.JSONEncoder(
        ensure_ascii=True, allow_nan=False, separators=(",", ":"), sort_keys=True
    ).encode

_WS = " \t\n\r"


def loads(data: bytes | bytearray | str):
    """Parse one JSON document. DecodeError (a ValueError) when it is not one."""
    if not isinstance(data, str):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"not UTF-8: {exc.reason}") from None
    if data.startswith("\ufeff"):
        raise DecodeError("Unexpected UTF-8 BOM")
    start = len(data) - len(data.lstrip(_WS))
    try:
        value, end = _scan(data, start)
    except StopIteration:
        raise DecodeError(f"Expecting value: char {start}") from None
    except (ValueError, RecursionError, SystemError):
        # The C scanner builds its error from json.decoder, which it does not import
        # (without it: a SystemError). Errors are rare: let json word this one.
        raise DecodeError(_why_not_json(data)) from None
    if end != len(data.rstrip(_WS)):
        raise DecodeError(f"Extra data: char {end}")
    return value


def _why_not_json(data: str) -> str:
    import json

    try:
        json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        return str(exc) or type(exc).__name__
    return "not JSON"


def _key(k) -> str:
    """A mapping key as json writes it."""
    if isinstance(k, str):
        return k
    if k is True or k is False or k is None:
        return {True: "true", False: "false", None: "null"}[k]
    if isinstance(k, int):
        return int.__repr__(k)
    if isinstance(k, float):
        return _compact(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


_NESTED = (dict, list, tuple)


def _pretty(obj, pad: str) -> str:
    """``obj`` laid out as json.dumps(indent=2) does, starting at indentation ``pad``. (Every
    tick writes four state files this way: plain values are encoded in place, without a call.)"""
    inner = pad + "  "
    if isinstance(obj, dict) and obj:
        items = [
            f"{inner}{_encode_str(k if type(k) is str else _key(k))}: "
            + (_pretty(v, inner) if isinstance(v, _NESTED) else _compact(v))
            for k, v in obj.items()
        ]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(obj, (list, tuple)) and obj:
        return "[\n" + ",\n".join(inner + _pretty(v, inner) for v in obj) + f"\n{pad}]"
    return _compact(obj)


def dumps(obj, indent: bool = False) -> bytes:
    """``obj`` as compact JSON (or laid out with ``indent``), UTF-8."""
    try:
        return (_pretty(obj, "") if indent else _compact(obj)).encode("utf-8")
    except RecursionError:  # markers=None: a cycle ends here instead of in a check
        raise ValueError("circular reference or nesting too deep to encode") from None


def canonical(obj) -> bytes:
    """``obj`` as sorted, compact, ASCII-only JSON: the same bytes for the same value,
    whoever wrote it (what a signature covers)."""
    return _canonical(obj).encode("ascii")
