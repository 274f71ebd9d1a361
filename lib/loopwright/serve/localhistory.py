"""The iterations of this machine's loops, for the monitor's metrics: each trusted loop's
history.jsonl of the served projects, read forward from where the last scrape stopped, so that a
scrape reads only the lines that are new.

A file is read again from its start when it was replaced or shortened. Only loops this user's
loopwright signed are read, and only history files of this user's that nobody else can write
(serve/files.py): a cloned repository's .loopwright/ is data, never a metric."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from loopwright.core import jsoncodec
from loopwright.core.durations import Histogram
from loopwright.core.errors import UserError
from loopwright.serve.files import _open_own
from loopwright.state import loops

CHUNK = 1024 * 1024  # a history line is a few KiB; one longer than this is skipped, not parsed


class _File:
    """How far one history file was read, and what its lines held."""

    def __init__(self, identity: tuple) -> None:
        self.identity, self.offset, self.seen = identity, 0, Histogram()


class LocalHistory:
    def __init__(self, projects: list[Path]) -> None:
        self.projects = [Path(p) for p in projects]
        self._files: dict[str, _File] = {}
        self._lock = threading.Lock()

    def read(self) -> Histogram:
        """Every counted iteration of the trusted local loops, with the durations they took."""
        with self._lock:
            total, present = Histogram(), set()
            for path in self._histories():
                key = str(path)
                kept = self._follow(path, self._files.get(key))
                if kept is not None:
                    self._files[key] = kept
                    present.add(key)
                    total = total.plus(kept.seen)
            for gone in set(self._files) - present:  # a loop removed: its lines count no more
                del self._files[gone]
            return total

    def _histories(self):
        for project in self.projects:
            state = project / ".loopwright"
            try:
                names = loops.loop_names(state)
            except OSError:
                continue  # not a directory this user can read: no loop of its is shown either
            for name in names:
                paths = loops.LoopPaths(state, name)
                try:
                    if loops.load_config(paths, move_corrupt=False) is None:
                        continue
                except (UserError, OSError):
                    continue  # not this user's loop, or damaged: the page says which
                yield paths.history

    def _follow(self, path: Path, known: _File | None) -> _File | None:
        fd = _open_own(path)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino)
            if known is None or known.identity != identity or st.st_size < known.offset:
                known = _File(identity)  # new, replaced or cut short: from the start
            while known.offset < st.st_size:
                if not _take(fd, known, st.st_size):
                    break
        finally:
            os.close(fd)
        return known


def _take(fd: int, known: _File, size: int) -> bool:
    """Reads the complete lines after ``known.offset`` (a chunk's worth); whether any was."""
    data = os.pread(fd, min(CHUNK, size - known.offset), known.offset)
    end = data.rfind(b"\n") + 1
    if end == 0:  # a line still being written (the next scrape reads it), or one over a chunk
        skipped = _skip_long(fd, known.offset, size) if len(data) == CHUNK else 0
        known.offset += skipped
        return skipped > 0
    for raw in data[:end].split(b"\n")[:-1]:
        try:
            known.seen.add_line(jsoncodec.loads(raw) if raw.strip() else None)
        except jsoncodec.DecodeError:
            pass  # a damaged line is no iteration (the page's timeline names it)
    known.offset += end
    return True


def _skip_long(fd: int, offset: int, size: int) -> int:
    """Bytes up to the end of a line longer than a chunk (it is not parsed)."""
    at = offset + CHUNK
    while at < size:
        data = os.pread(fd, min(CHUNK, size - at), at)
        cut = data.find(b"\n")
        if cut >= 0:
            return at + cut + 1 - offset
        at += len(data)
    return 0  # no end yet: still being written (or damaged): looked at again next time
