"""What the monitor's page reads of a loop beyond its summary: its ``report.md`` and
``handoff.md`` as text, and its history in bounded slices from the end.

Only loops this user's loopwright signed, only by a name the loop listing holds (no path
from a request is used as a path), never through a link, and never more than a bounded
number of bytes per request however long the loop has run."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from loopwright.core import jsoncodec, prompts, schema
from loopwright.core.errors import UnsafePath
from loopwright.state import loops, store

DOC_LIMIT = 512 * 1024  # a report or handoff is a few KiB; more is cut with a note
HISTORY_READ = 512 * 1024  # the most one history request reads; a line is a few KiB
HISTORY_CHUNK = 64 * 1024
MAX_ENTRIES = 200


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def trusted_loop(state: Path, name: object) -> tuple[loops.LoopPaths, dict]:
    """The paths and loop.json of the project's loop ``name``, if this user's loopwright
    signed it; Refused otherwise (404 unknown, 403 untrusted, 409 damaged)."""
    if not isinstance(name, str) or not loops.is_loop_name(name) or name not in loops.loop_names(state):
        raise Refused(404, f"no loop named {name!r} in this project")
    paths = loops.LoopPaths(state, name)
    try:
        cfg = loops.load_config(paths, move_corrupt=False)
    except loops.UntrustedLoop as exc:
        raise Refused(403, f"loop {name} is not trusted ({exc.why}); its files are not shown") from None
    except (loops.LoopError, store.CorruptFile, UnsafePath) as exc:
        raise Refused(409, f"loop {name} is damaged ({exc})") from None
    if cfg is None:
        raise Refused(404, f"loop {name} has no loop.json")
    return paths, cfg


def _open_own(path: Path) -> int | None:
    """A descriptor of ``path`` when it is a regular file of this user's that nobody else can
    write, opened without following a link (None otherwise: missing, a link, a FIFO)."""
    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or store.others_can_change(st) is not None:
        os.close(fd)
        return None
    return fd


def read_doc(path: Path, limit: int = DOC_LIMIT) -> str | None:
    """The text of a loop's report or handoff, at most ``limit`` bytes of it (then a note
    says where the rest is); None when there is none this user's loopwright can trust."""
    fd = _open_own(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    text = data[:limit].decode("utf-8", errors="replace")
    if len(data) > limit:
        text += f"\n\n[… cut at {limit} bytes; the whole file is {path}]\n"
    return text


def _pread(fd: int, size: int, offset: int) -> bytes:
    return os.pread(fd, size, offset)


class Slice:
    """What one backward read found: complete lines (start offset, bytes), oldest first; where
    the read began (``pos``) and where its last complete line ends (``end``); bytes read."""

    def __init__(self, lines: list[tuple[int, bytes]], pos: int, end: int, read: int):
        self.lines, self.pos, self.end, self.read = lines, pos, end, read


def _lines_back(fd: int, end: int, limit: int, budget: int) -> Slice:
    """Up to ``limit`` complete lines ending at or before ``end``, reading back from ``end``
    in chunks, never more than ``budget`` bytes."""
    pos, buf, read = end, b"", 0
    while pos > 0 and read < budget and buf.count(b"\n") <= limit:
        step = min(HISTORY_CHUNK, pos, budget - read)
        pos -= step
        chunk = _pread(fd, step, pos)
        read += len(chunk)
        if len(chunk) < step:  # the file shrank under us (replaced): nothing sure to show
            return Slice([], end, end, read)
        buf = chunk + buf
    stop = buf.rfind(b"\n") + 1  # a torn last line (still being written) waits
    start = 0 if pos == 0 else buf.find(b"\n") + 1  # the first line may be cut
    if stop <= start:
        return Slice([], pos, pos, read)  # inside one line longer than the budget
    out, at = [], pos + start
    for raw in buf[start:stop].split(b"\n")[:-1]:
        out.append((at, raw))
        at += len(raw) + 1
    return Slice(out[-limit:], pos, pos + stop, read)


def _entry(cfg: dict, offset: int, raw: bytes) -> dict:
    """One timeline row from a history line: its status line, spend, gates and outcome."""
    try:
        rec = jsoncodec.loads(raw)
        schema.check(schema.HISTORY, rec, "history line")
    except (jsoncodec.DecodeError, schema.SchemaError) as exc:
        return {"offset": offset, "problem": f"a damaged history line ({str(exc)[:200]})"}
    snap = rec.get("budget_snapshot")
    try:  # the line the user saw after this iteration, from the counters it recorded
        status = prompts.status_line(cfg, snap, rec["iteration"]) if snap else None
    except (KeyError, TypeError, ValueError):
        status = None
    return {
        "offset": offset,
        "iteration": rec["iteration"],
        "counted": rec.get("counted") is not False,
        "ended_at": rec.get("ended_at") if isinstance(rec.get("ended_at"), str) else None,
        "status_line": status,
        "dollars": rec.get("dollars_this_iter", 0.0),
        "tokens_in": rec.get("tokens_in_this_iter", 0),
        "tokens_out": rec.get("tokens_out_this_iter", 0),
        "gates": [{"name": g.get("name"), "answer": g.get("answer")} for g in rec.get("gates") or []],
        "stop_conditions": rec.get("stop_conditions_fired") or [],
        "outcome": rec["outcome"],
    }


def history_slice(paths: loops.LoopPaths, cfg: dict, before: int | None, limit: int) -> dict:
    """The ``limit`` iterations before byte ``before`` of the history (None: its end), oldest
    first. ``before`` of the answer asks for the ones before them (0: none left); ``end`` is
    where its newest complete line ends (a line still being written comes next time)."""
    limit = max(1, min(limit, MAX_ENTRIES))
    fd = _open_own(paths.history)
    if fd is None:
        return {"entries": [], "before": 0, "end": 0, "size": 0, "bytes_read": 0}
    try:
        size = os.fstat(fd).st_size
        upto = size if before is None else max(0, min(before, size))
        got = _lines_back(fd, upto, limit, HISTORY_READ)
    finally:
        os.close(fd)
    entries = [_entry(cfg, at, raw) for at, raw in got.lines if raw.strip()]
    if not got.lines and got.read >= HISTORY_READ:  # a whole budget read inside one line
        entries = [
            {"offset": got.pos, "problem": f"a history line longer than {HISTORY_READ} bytes is not shown"}
        ]
    return {
        "entries": entries,
        "before": got.lines[0][0] if got.lines else got.pos,
        "end": got.end,
        "size": size,
        "bytes_read": got.read,
    }
