"""A loop's journal (``journal.jsonl``): what happened to it, one JSON line per event.

Every line starts with when, which loop and which session; the event's own fields
follow. Lines are appended under the file's lock (store.append_jsonl_many), so
concurrent writers never interleave, and a killed writer damages only its own line.
"""

from __future__ import annotations

import time

from loopwright.state import lock as locks
from loopwright.state import store
from loopwright.state.loops import LoopPaths


def stamped(paths: LoopPaths, session: str | None, now: float | None, entry: dict) -> dict:
    """``entry`` as a journal line: when, loop and session first."""
    record = {
        "at": locks.now_iso(time.time() if now is None else now),
        "loop": paths.name,
        "session": session,
    }
    record.update(entry)
    return record


def write(paths: LoopPaths, *entries: dict, session: str | None, now: float | None = None) -> None:
    """Append events that happened now (or at ``now``) in ``session``."""
    append(paths, [stamped(paths, session, now, e) for e in entries])


def append(paths: LoopPaths, records: list[dict]) -> None:
    """Append lines already stamped (a tick's, written again after a crash: see commit.py).

    Not flushed to disk line by line: the journal tells what happened, the budget and
    the history (both flushed) are what a loop resumes from. A power cut may lose the
    last tick's journal lines, never a counter."""
    if records:
        store.append_jsonl_many(paths.journal, records, durable=False)
