"""Incremental reading of Claude Code's JSONL transcript.

Each Stop reads only the bytes appended since the offset reached last time, so
the cost of a tick follows what is new, never the size of the whole session.
An assistant message can span several lines that share ``message.id``; every
such line repeats the message's usage, so usage is counted once per id (the
largest value seen for each field, topped up if a later line reports more).
"""

from __future__ import annotations

import os
import stat

from loopwright.core import jsoncodec
from loopwright.core.turn import USAGE_FIELDS, Cursor, Increment  # noqa: F401  (read here, used everywhere)

# Where a loop's first tick starts reading when the start nonce cannot be found:
# never scan a whole long session just to join it.
FIRST_READ_WINDOW = 4 * 1024 * 1024
# Memory stays near one chunk plus the longest line kept; a longer line is skipped.
_SCAN_CHUNK = 1024 * 1024
MAX_LINE_BYTES = 32 * 1024 * 1024
# Work per call is bounded too: a larger backlog is read over several stops, none lost.
MAX_SCAN_BYTES = 256 * 1024 * 1024


def _open_regular(path: str) -> tuple[int, int] | None:
    """A read-only fd and the size of ``path``, or None if it is not a regular file.

    The hook's stdin names the path, so it may be a FIFO (a blocking open would hang the
    Stop), a device (endless or with open side effects) or a directory. Stat first so such
    a path is never opened; O_NONBLOCK and fstat on the fd cover a swap between the two."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st.st_size


def regular_size(path: str | None) -> int | None:
    """The size of ``path`` if it is a regular file, else None. Never raises."""
    if not path:
        return None
    try:
        opened = _open_regular(path)
    except (OSError, ValueError):
        return None
    if opened is None:
        return None
    os.close(opened[0])
    return opened[1]


def _first_start(fd: int, size: int, nonce: bytes | None) -> int:
    """Where a loop's first read starts: the line holding the last copy of the nonce
    within the final window, else the window's start (aligned to a line by the scan)."""
    floor = max(0, size - FIRST_READ_WINDOW)
    if nonce:
        window = os.pread(fd, size - floor, floor)
        hit = window.rfind(nonce)
        if hit >= 0:
            # If its line begins before the window this is ``floor``, and the scan starts
            # at the line after it.
            return floor + window.rfind(b"\n", 0, hit) + 1
    return floor


class _Scan:
    """Feeds chunks in order, handling each whole line once and carrying a partial
    line between chunks. ``reached`` is where the next read must resume: after the
    last whole line, or inside a line being skipped (the next read skips on)."""

    def __init__(self, inc: Increment, nonce: bytes | None, pos: int, skipping: bool) -> None:
        self.inc, self.nonce = inc, nonce
        self.pos = self.reached = pos
        self.skipping = skipping  # discarding bytes up to the next newline
        self.pending: list[bytes] = []  # pieces of the unfinished line
        self.pending_len = 0

    def feed(self, chunk: bytes) -> None:
        self.pos += len(chunk)
        first = chunk.find(b"\n")
        if first < 0:
            if not self.skipping:
                self.pending_len += len(chunk)
                if self.pending_len > MAX_LINE_BYTES:
                    self._too_long()
                    self.pending, self.pending_len, self.skipping = [], 0, True
                else:
                    self.pending.append(chunk)
            if self.skipping:
                self.reached = self.pos
            return
        if self.skipping:
            self.skipping = False
        elif self.pending_len + first > MAX_LINE_BYTES:
            self._too_long()
        elif self.pending:
            self.pending.append(chunk[:first])
            line, self.pending = b"".join(self.pending), []
            self._lines(line)
        else:
            self._lines(chunk[:first])
        last = chunk.rfind(b"\n")
        if last > first:
            self._lines(chunk[first + 1 : last])
        self.reached = self.pos - len(chunk) + last + 1
        rest = chunk[last + 1 :]
        self.pending, self.pending_len = ([rest] if rest else []), len(rest)

    def _too_long(self) -> None:
        self.inc.bad_lines += 1
        note = f"a transcript line longer than {MAX_LINE_BYTES} bytes was skipped"
        if note not in self.inc.notes:
            self.inc.notes.append(note)

    def _lines(self, data: bytes) -> None:
        if self.nonce and self.nonce in data:
            self.inc.nonce_seen = True
        for raw in data.split(b"\n"):
            if len(raw) > MAX_LINE_BYTES:  # only if a chunk is larger than the cap: one rule however read
                self._too_long()
            # Cheap pre-filter: only assistant lines and compaction markers matter here.
            elif raw and (b'"assistant"' in raw or b"compact_boundary" in raw):
                _take_line(self.inc, raw)


def _scan(fd: int, start: int, size: int, inc: Increment, nonce: bytes | None) -> int:
    """Handle the whole lines in ``[start, size)``, at most MAX_SCAN_BYTES of them; the
    offset to resume from. A ``start`` inside a line first skips to the next line."""
    skipping = start > 0 and os.pread(fd, 1, start - 1) != b"\n"
    scan = _Scan(inc, nonce, start, skipping)
    limit = start + MAX_SCAN_BYTES
    while scan.pos < size:
        want = min(_SCAN_CHUNK, size - scan.pos)
        if scan.reached > start:  # past the cap only until the first line is through: always progress
            want = min(want, limit - scan.pos)
            if want <= 0:
                inc.notes.append(
                    f"more than {MAX_SCAN_BYTES} new transcript bytes; the rest is read at the next stop"
                )
                break
        chunk = os.pread(fd, want, scan.pos)
        if not chunk:
            break  # the file shrank while being read
        scan.feed(chunk)
    return scan.reached


def read_increment(path: str | None, cursor: Cursor, nonce: str | None = None) -> Increment:
    inc = Increment(
        cursor=Cursor(path, cursor.offset, cursor.last_id, dict(cursor.last_usage), cursor.last_ts)
    )
    if not path:
        return inc
    try:
        opened = _open_regular(path)
    except (OSError, ValueError):
        inc.notes.append("transcript not readable")
        return inc
    if opened is None:
        inc.notes.append("transcript is not a regular file; not read")
        return inc
    fd, size = opened
    inc.opened = True
    try:
        _read_open(fd, size, inc, cursor, nonce.encode() if nonce else None)
    except OSError:
        inc.notes.append("transcript not readable")
    finally:
        os.close(fd)
    return inc


def _read_open(fd: int, size: int, inc: Increment, cursor: Cursor, nonce: bytes | None) -> None:
    cur = inc.cursor
    if cursor.path and cursor.path != cur.path:
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
        start = _first_start(fd, size, nonce)
    end = _scan(fd, start, size, inc, nonce)
    cur.offset = end
    inc.bytes_read = end - start


def _take_line(inc: Increment, raw: bytes) -> None:
    try:
        entry = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        inc.bad_lines += 1
        return
    if not isinstance(entry, dict):
        return
    kind = entry.get("type")
    if kind == "system" and entry.get("subtype") == "compact_boundary":
        inc.compacted = True
    elif kind == "assistant":
        _take_assistant(inc, entry)


def _take_assistant(inc: Increment, entry: dict[str, object]) -> None:
    msg = entry.get("message")
    if not isinstance(msg, dict):
        return
    mid = msg.get("id") or entry.get("uuid")
    content = msg.get("content")
    if isinstance(content, list):
        blocks = content
    else:
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else []
    texts = [
        b.get("text")
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
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
    again = mid is not None and mid == cur.last_id
    seen = cur.last_usage if again else {}
    inc.requests += not again  # a message id seen before is the same response, read on
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


def merge(first: Increment, more: Increment) -> Increment:
    """``first`` followed by ``more`` (read from where ``first`` stopped)."""
    out = Increment(
        cursor=more.cursor,
        used_tool=first.used_tool or more.used_tool,
        compacted=first.compacted or more.compacted,
        nonce_seen=first.nonce_seen or more.nonce_seen,
        bytes_read=first.bytes_read + more.bytes_read,
        bad_lines=first.bad_lines + more.bad_lines,
        notes=first.notes + more.notes,
        opened=first.opened or more.opened,
        requests=first.requests + more.requests,
    )
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
