"""Where a client's error is kept in the loop's own state: a ``client_error`` line in its
journal (every one, in order) and ``last_error`` in progress.json (the latest, for `status`
while the loop runs; the next tick's progress rewrites it). The loop's end reason and report
carry it too when the runner gives up (runner/run.py words the reason)."""

from __future__ import annotations

from loopwright.core.clock import now_iso
from loopwright.state import journal, loops, store


def record(paths: loops.LoopPaths, error: str, code: int | None, session: str | None) -> None:
    """Keep ``error`` (already scrubbed and bounded: core/clienterror.py) for the loop."""
    journal.write(paths, {"event": "client_error", "code": code, "error": error}, session=session)
    with loops.loop_mutex(paths):  # a resident Stop server may still be writing progress.json
        try:
            progress = loops.read_state(paths, "progress", move_corrupt=False) or {}
        except (store.CorruptFile, OSError):
            progress = {}
        progress.update(last_error=error, last_error_at=now_iso())
        store.write_json(paths.progress, progress, durable=False)
