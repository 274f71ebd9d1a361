"""Safe files: atomic JSON replace, locked JSONL appends, corrupt files moved aside.

A reader never sees a partial JSON file (temp file + fsync + rename), appends hold
an exclusive lock so concurrent writers never interleave, and a file that does not
parse is renamed to ``<file>.corrupt-<timestamp>`` and reported, never rewritten.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Iterator

import orjson

from .errors import UserError

try:  # POSIX: flock is in the standard library and costs nothing to import.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class CorruptFile(UserError):
    """A state file did not parse; it has been moved aside to ``moved_to``."""

    def __init__(self, path: Path, moved_to: Path | None, detail: str):
        self.path = Path(path)
        self.moved_to = moved_to
        self.detail = detail
        where = f"moved aside to {moved_to.name}" if moved_to else "left in place"
        super().__init__(f"{self.path.name} is corrupt ({detail}); {where}")


@contextlib.contextmanager
def file_lock(path: Path, shared: bool = False) -> Iterator[None]:
    """Hold an advisory lock on ``path`` (created if missing) for the block.

    flock on POSIX: the lock dies with the process, so a killed holder never
    leaves the project wedged. portalocker is only needed where fcntl is absent
    (Windows); importing it costs ~60 ms, too much for the Stop hook's path.
    """
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        else:  # pragma: no cover - Windows
            import portalocker

            with os.fdopen(os.dup(fd), "r+b") as fh:
                portalocker.lock(fh, portalocker.LOCK_SH if shared else portalocker.LOCK_EX)
                try:
                    yield
                finally:
                    portalocker.unlock(fh)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(str(directory), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def write_json(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")


def write_text(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def move_aside(path: Path) -> Path | None:
    """Rename a bad file to ``<file>.corrupt-<timestamp>``; None if it vanished."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return None
    return target


def read_json(path: Path, expect: type = dict, *, move_corrupt: bool = True) -> Any:
    """Parse a JSON state file; None when it does not exist.

    A file that does not parse, or holds the wrong kind of value, is moved
    aside (unless ``move_corrupt`` is false, for dry runs) and reported with
    CorruptFile.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        detail = "empty file" if not data.strip() else f"invalid JSON: {exc}"
        raise CorruptFile(path, move_aside(path) if move_corrupt else None, detail) from None
    if not isinstance(value, expect):
        raise CorruptFile(path, move_aside(path) if move_corrupt else None, f"expected a JSON {expect.__name__}")
    return value


def append_jsonl(path: Path, obj: Any) -> None:
    """Append one JSON line under an exclusive lock.

    If a previous writer died mid-line, the torn tail is closed with a newline
    first so the new record always starts on a line of its own.
    """
    line = orjson.dumps(obj) + b"\n"
    fd = os.open(str(path), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the flock


class JsonlProblem:
    """A line of a JSONL file that was skipped, with why."""

    __slots__ = ("path", "lineno", "detail")

    def __init__(self, path: Path, lineno: int, detail: str):
        self.path, self.lineno, self.detail = Path(path), lineno, detail

    def __str__(self) -> str:
        return f"{self.path.name}:{self.lineno}: {self.detail} (line skipped)"


def _parse_lines(data: bytes, path: Path) -> tuple[list[dict], list[JsonlProblem]]:
    records: list[dict] = []
    problems: list[JsonlProblem] = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            problems.append(JsonlProblem(path, lineno, "not valid JSON"))
            continue
        if not isinstance(value, dict):
            problems.append(JsonlProblem(path, lineno, "not a JSON object"))
            continue
        records.append(value)
    return records, problems


def read_jsonl(path: Path) -> tuple[list[dict], list[JsonlProblem]]:
    """All object lines of a JSONL file, plus the lines that had to be skipped."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], []
    return _parse_lines(data, path)


def last_jsonl_record(path: Path, chunk: int = 65536) -> dict | None:
    """The last parseable object line, reading from the end (cost ~ line size)."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return None
    with fh:
        end = fh.seek(0, os.SEEK_END)
        buf = b""
        pos = end
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            fh.seek(pos)
            buf = fh.read(step) + buf
            lines = buf.split(b"\n")
            # lines[0] may be cut unless we reached the file's start
            candidates = lines if pos == 0 else lines[1:]
            for raw in reversed(candidates):
                if raw.strip():
                    with contextlib.suppress(orjson.JSONDecodeError):
                        value = orjson.loads(raw)
                        if isinstance(value, dict):
                            return value
            buf = lines[0] if pos else b""
    return None


def read_jsonl_from(path: Path, offset: int) -> tuple[list[dict], int, list[str]]:
    """Complete object lines appended after byte ``offset``: (records, new offset, problems).

    A partial last line is left for the next call; a file shorter than ``offset``
    (replaced) is read from the start.
    """
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            if offset > size:
                offset = 0
            fh.seek(offset)
            data = fh.read(size - offset)
    except FileNotFoundError:
        return [], 0, []
    end = data.rfind(b"\n") + 1
    records, problems = _parse_lines(data[:end], Path(path))
    # Line numbers count from the offset, so the note names the file and the fault only.
    return records, offset + end, [f"{p.path.name}: a line that is {p.detail} was skipped" for p in problems]
