"""Incremental reading of Claude Code's JSONL transcript.

Each Stop reads only the bytes appended since the offset reached last time, so
the cost of a tick follows what is new, never the size of the whole session.
An assistant message can span several lines that share ``message.id``; every
such line repeats the message's usage, so usage is counted once per id (the
largest value seen for each field, topped up if a later line reports more).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import orjson

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)

# Where a loop's first tick starts reading when the start nonce cannot be found:
# never scan a whole long session just to join it.
FIRST_READ_WINDOW = 4 * 1024 * 1024
_SCAN_CHUNK = 1024 * 1024


@dataclass
class Cursor:
    """How far the transcript has been read, persisted between ticks."""

    path: str | None = None
    offset: int | None = None
    last_id: str | None = None  # id of the last assistant message counted
    last_usage: dict[str, int] = field(default_factory=dict)
    last_ts: str | None = None  # timestamp of the newest message counted

    @classmethod
    def from_dict(cls, d: dict | None) -> "Cursor":
        d = d or {}
        return cls(d.get("path"), d.get("offset"), d.get("last_id"), dict(d.get("last_usage") or {}), d.get("last_ts"))

    def to_dict(self) -> dict:
        return {"path": self.path, "offset": self.offset, "last_id": self.last_id, "last_usage": self.last_usage,
                "last_ts": self.last_ts}


@dataclass
class Increment:
    """What the new part of the transcript says."""

    cursor: Cursor
    used_tool: bool = False
    final_message_id: str | None = None
    final_blocks: list[str] = field(default_factory=list)  # text blocks of the final message
    usage: dict[str, dict[str, int]] = field(default_factory=dict)  # model -> field -> tokens
    compacted: bool = False
    nonce_seen: bool = False
    recount_guard: str | None = None  # after a rewind: messages at or before this time were counted already
    bytes_read: int = 0
    bad_lines: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def final_text(self) -> str | None:
        return "\n".join(self.final_blocks) if self.final_blocks else None


def _find_backwards(path: str, needle: bytes, size: int) -> int | None:
    """Offset of the start of the last line containing ``needle``."""
    with open(path, "rb") as fh:
        pos = size
        tail = b""
        while pos > 0:
            step = min(_SCAN_CHUNK, pos)
            pos -= step
            fh.seek(pos)
            buf = fh.read(step) + tail
            hit = buf.rfind(needle)
            if hit >= 0:
                line_start = buf.rfind(b"\n", 0, hit) + 1
                if line_start or pos == 0:
                    return pos + line_start
                # The line starts before this chunk; keep reading backwards.
                tail = buf[: hit + len(needle)]
                continue
            tail = buf[: len(needle)]
    return None


def _line_start_after(path: str, offset: int) -> int:
    """The first line start at or after ``offset``."""
    if offset <= 0:
        return 0
    with open(path, "rb") as fh:
        fh.seek(offset - 1)
        while True:
            chunk = fh.read(65536)
            if not chunk:
                return offset
            i = chunk.find(b"\n")
            if i >= 0:
                return fh.tell() - len(chunk) + i + 1


def read_increment(path: str | None, cursor: Cursor, nonce: str | None = None) -> Increment:
    inc = Increment(cursor=Cursor(path, cursor.offset, cursor.last_id, dict(cursor.last_usage), cursor.last_ts))
    if not path:
        return inc
    try:
        size = os.stat(path).st_size
    except OSError:
        inc.notes.append("transcript not readable")
        return inc
    cur = inc.cursor
    if cursor.path and cursor.path != path:
        # A different transcript (e.g. the session was resumed under a new file). It may
        # repeat messages already counted: those carry old timestamps and are skipped.
        cur.offset, cur.last_id, cur.last_usage = None, None, {}
        inc.recount_guard = cursor.last_ts
    start = cur.offset
    if start is not None and start > size:
        inc.notes.append("transcript is shorter than the stored offset; reading it from the start")
        start, cur.last_id, cur.last_usage = 0, None, {}
        inc.recount_guard = cursor.last_ts
    if start is None:
        found = _find_backwards(path, nonce.encode(), size) if nonce else None
        if found is not None:
            start = found
        else:
            start = _line_start_after(path, max(0, size - FIRST_READ_WINDOW))
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(size - start)
    end = data.rfind(b"\n") + 1  # only whole lines; a partial last line waits for the next tick
    data = data[:end]
    cur.offset = start + end
    inc.bytes_read = end
    if nonce and nonce.encode() in data:
        inc.nonce_seen = True
    for raw in data.split(b"\n"):
        if not raw:
            continue
        # Cheap pre-filter: only assistant lines and compaction markers matter here.
        if b'"assistant"' not in raw and b"compact_boundary" not in raw:
            continue
        try:
            entry = orjson.loads(raw)
        except orjson.JSONDecodeError:
            inc.bad_lines += 1
            continue
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        if kind == "system" and entry.get("subtype") == "compact_boundary":
            inc.compacted = True
            continue
        if kind != "assistant":
            continue
        _take_assistant(inc, entry)
    return inc


def _take_assistant(inc: Increment, entry: dict[str, Any]) -> None:
    msg = entry.get("message")
    if not isinstance(msg, dict):
        return
    mid = msg.get("id") or entry.get("uuid")
    content = msg.get("content")
    blocks = content if isinstance(content, list) else ([{"type": "text", "text": content}] if isinstance(content, str) else [])
    texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]
    if any(isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use") for b in blocks):
        inc.used_tool = True
    if not entry.get("isSidechain"):
        if mid != inc.final_message_id:
            inc.final_message_id = mid
            inc.final_blocks = []
        inc.final_blocks.extend(texts)
    usage = msg.get("usage")
    if isinstance(usage, dict):
        ts = entry.get("timestamp") if isinstance(entry.get("timestamp"), str) else None
        if inc.recount_guard and ts and ts <= inc.recount_guard:
            return  # counted before the transcript was rewritten
        _count_usage(inc, mid, str(msg.get("model") or "unknown"), usage)
        if ts and (inc.cursor.last_ts is None or ts > inc.cursor.last_ts):
            inc.cursor.last_ts = ts


def _count_usage(inc: Increment, mid: str | None, model: str, usage: dict) -> None:
    cur = inc.cursor
    seen = cur.last_usage if (mid is not None and mid == cur.last_id) else {}
    fresh: dict[str, int] = {}
    bucket = inc.usage.setdefault(model, {f: 0 for f in USAGE_FIELDS})
    for f in USAGE_FIELDS:
        value = usage.get(f)
        value = value if isinstance(value, int) and value >= 0 else 0
        already = seen.get(f, 0)
        if value > already:
            bucket[f] += value - already
        fresh[f] = max(value, already)
    cur.last_id, cur.last_usage = mid, fresh


def tail_text(path: str | None, limit: int = 65536) -> bytes:
    """The last ``limit`` bytes of the transcript (for nonce adoption)."""
    if not path:
        return b""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            return fh.read()
    except OSError:
        return b""


def merge(first: Increment, more: Increment) -> Increment:
    """``first`` followed by ``more`` (read from where ``first`` stopped)."""
    out = Increment(cursor=more.cursor, used_tool=first.used_tool or more.used_tool,
                    compacted=first.compacted or more.compacted, nonce_seen=first.nonce_seen or more.nonce_seen,
                    bytes_read=first.bytes_read + more.bytes_read, bad_lines=first.bad_lines + more.bad_lines,
                    notes=first.notes + more.notes)
    out.final_message_id, out.final_blocks = first.final_message_id, list(first.final_blocks)
    if more.final_message_id is not None:
        if more.final_message_id != first.final_message_id:
            out.final_blocks = []
        out.final_message_id = more.final_message_id
        out.final_blocks.extend(more.final_blocks)
    for src in (first.usage, more.usage):
        for model, counts in src.items():
            slot = out.usage.setdefault(model, {f: 0 for f in USAGE_FIELDS})
            for f in USAGE_FIELDS:
                slot[f] += counts.get(f, 0)
    return out
