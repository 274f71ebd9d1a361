"""Safe files: atomic JSON replace, locked JSONL appends, corrupt files moved aside.

A reader never sees a partial JSON file (temp file + fsync + rename), appends hold
an exclusive lock so concurrent writers never interleave, and a file that does not
parse is renamed to ``<file>.corrupt-<timestamp>`` and reported, never rewritten.
"""

from __future__ import annotations

import errno
import os
import stat
import time

from loopwright.core import jsoncodec
from loopwright.core.errors import UnsafePath, UserError
from loopwright.state.fspath import Path

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


class FileLock:
    """An advisory lock on ``path`` (created if missing), held for a ``with`` block.

    flock on POSIX: the lock dies with the process, so a killed holder never
    leaves the project wedged. portalocker is only needed where fcntl is absent
    (Windows); importing it costs ~60 ms, too much for the Stop hook's path. A class
    rather than a contextlib generator: contextlib costs the Stop ~1 ms to import.
    """

    def __init__(self, path: Path, shared: bool = False):
        self.path, self.shared, self._fd, self._fh = path, shared, None, None

    def __enter__(self) -> FileLock:
        fd = _open_nofollow(self.path, os.O_RDWR | os.O_CREAT)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)
            else:  # pragma: no cover - Windows
                import portalocker

                self._fh = os.fdopen(os.dup(fd), "r+b")
                portalocker.lock(self._fh, portalocker.LOCK_SH if self.shared else portalocker.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fh is not None:  # pragma: no cover - Windows
            import portalocker

            portalocker.unlock(self._fh)
            self._fh.close()
            self._fh = None
        if self._fd is not None:
            os.close(self._fd)  # closing releases the flock
            self._fd = None


def file_lock(path: Path, shared: bool = False) -> FileLock:
    """Hold an advisory lock on ``path`` for a ``with`` block (see FileLock)."""
    return FileLock(path, shared)


def others_can_change(st: os.stat_result) -> str | None:
    """Why a file or directory (its ``stat``) is in other hands: "belongs to another user
    (uid N)" or "can be written by other users (mode M)", as ssh asks of its own; None when
    only this user (or root) can change it."""
    if st.st_uid != os.geteuid():
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return f"can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def dir_problem(path: object, st: os.stat_result) -> str | None:
    """Why the directory ``path`` may not hold loopwright's state (another user owns it or can
    write it: they could edit the owner index, plant a FIFO, put back an old copy), or None."""
    why = others_can_change(st)
    if why is None:
        return None
    if why.startswith("belongs"):
        return (
            f"{path} {why} and loopwright keeps state only in directories you own; "
            f"move it away (mv '{path}' '{path}.untrusted') and start again"
        )
    return f"{path} {why}; fix it with: chmod go-w '{path}'"


def changeable_by_others(what: str, st: os.stat_result) -> str | None:
    """Why ``what`` (a loop's directory or file) is not trusted: others can change it; or None."""
    why = others_can_change(st)
    if why is None:
        return None
    return f"{what} {why}, who can change it" if why.startswith("belongs") else f"{what} {why}"


def write_bytes_atomic(path: Path, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically: a reader sees the old or the new file,
    never a mix, even when the writer is killed. ``durable`` flushes the new content to disk
    before it takes the old one's place, so even the machine dying leaves one whole version
    or the other, never a torn or empty file; files that are rewritten every tick and rebuilt
    from others (heartbeat, progress, ledger) skip it. The directory is not flushed: the
    rename reaches the disk with the file system's next commit (seconds), in order with the
    writes around it, so a crash can only lose the last changes, all of them together (a
    tick lost that way is counted again from the transcript). See docs/state-files.md."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(tmp, path)


def identity(path: Path) -> tuple | None:
    """What changes whenever a file is written, replaced or put back: its inode and change
    time (which no one can set back); None when it cannot be seen."""
    try:
        st = os.lstat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns, st.st_size


def write_json(path: Path, obj: object, durable: bool = True) -> None:
    write_bytes_atomic(path, jsoncodec.dumps(obj, indent=True) + b"\n", durable)


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


MAX_JSON_BYTES = 8 * 1024 * 1024  # no state file of loopwright's comes near this


def _open_nofollow(path: Path, flags: int) -> int:
    """Open without following a symlink in the last component; a non-blocking open so a
    FIFO planted where a state file belongs never hangs the caller."""
    try:
        fd = os.open(str(path), flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) or (exc.errno == errno.ENXIO and Path(path).is_fifo()):
            raise UnsafePath(
                f"{path} is a symlink or a special file; loopwright does not follow or read those (remove it)"
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePath(f"{path} is not a regular file; loopwright reads only regular files (remove it)")
    return fd


def read_regular(path: Path, limit: int = MAX_JSON_BYTES) -> bytes | None:
    """The bytes of a regular file (None if missing). Symlinks and special files raise
    UnsafePath; a file larger than ``limit`` raises ValueError."""
    try:
        fd = _open_nofollow(Path(path), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise ValueError(f"larger than {limit // (1024 * 1024)} MiB")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json(path: Path, expect: type = dict, *, move_corrupt: bool = True, spec=None) -> object:
    """Parse a JSON state file; None when it does not exist.

    A file that does not parse, holds the wrong kind of value or fails ``spec``
    (a schema.Spec), is too large, or is a symlink or special file, is moved aside
    (unless ``move_corrupt`` is false, for dry runs) and reported with CorruptFile.
    """
    path = Path(path)
    try:
        data = read_regular(path)
    except (UnsafePath, ValueError) as exc:
        raise CorruptFile(
            path, move_aside(path) if move_corrupt else None, str(exc).replace(f"{path} ", "")
        ) from None
    if data is None:
        return None
    try:
        value = jsoncodec.loads(data)
    except jsoncodec.DecodeError as exc:
        detail = "empty file" if not data.strip() else f"invalid JSON: {exc}"
        raise CorruptFile(path, move_aside(path) if move_corrupt else None, detail) from None
    if not isinstance(value, expect):
        raise CorruptFile(
            path, move_aside(path) if move_corrupt else None, f"expected a JSON {expect.__name__}"
        )
    if spec is not None:
        from loopwright.core.schema import SchemaError

        try:
            spec.check(value, "")
        except SchemaError as exc:
            raise CorruptFile(
                path, move_aside(path) if move_corrupt else None, f"wrong shape: {exc}"
            ) from None
    return value


def append_jsonl(path: Path, obj: object) -> None:
    """Append one JSON line under an exclusive lock (see append_jsonl_many)."""
    append_jsonl_many(path, [obj])


def append_jsonl_many(path: Path, objs: list, durable: bool = True) -> None:
    """Append JSON lines in one write under an exclusive lock, so they land together.

    If a previous writer died mid-line, the torn tail is closed with a newline
    first so the new records always start on a line of their own. ``durable``
    flushes them to disk before returning.
    """
    data = b"".join(jsoncodec.dumps(obj) + b"\n" for obj in objs)
    fd = _open_nofollow(Path(path), os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        os.set_blocking(fd, True)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the flock


def append_text(path: Path, text: str) -> None:
    """Append text to a log file (never through a symlink)."""
    fd = _open_nofollow(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.set_blocking(fd, True)
        _write_all(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_tail(path: Path, size: int) -> bytes:
    """The last ``size`` bytes of a regular file (empty when missing)."""
    try:
        fd = _open_nofollow(Path(path), os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        end = os.fstat(fd).st_size
        return os.pread(fd, size, max(0, end - size))
    finally:
        os.close(fd)


class JsonlProblem:
    """A line of a JSONL file that was skipped, with why."""

    __slots__ = ("path", "lineno", "detail")

    def __init__(self, path: Path, lineno: int, detail: str):
        self.path, self.lineno, self.detail = Path(path), lineno, detail

    def __str__(self) -> str:
        return f"{self.path.name}:{self.lineno}: {self.detail} (line skipped)"


def _check_line(value, spec) -> str | None:
    if not isinstance(value, dict):
        return "not a JSON object"
    if spec is not None:
        from loopwright.core.schema import SchemaError

        try:
            spec.check(value, "")
        except SchemaError as exc:
            return f"wrong shape ({exc})"
    return None


def _parse_lines(data: bytes, path: Path, spec=None) -> tuple[list[dict], list[JsonlProblem]]:
    records: list[dict] = []
    problems: list[JsonlProblem] = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            value = jsoncodec.loads(raw)
        except jsoncodec.DecodeError:
            problems.append(JsonlProblem(path, lineno, "not valid JSON"))
            continue
        bad = _check_line(value, spec)
        if bad:
            problems.append(JsonlProblem(path, lineno, bad))
            continue
        records.append(value)
    return records, problems


MAX_JSONL_READ = 256 * 1024 * 1024  # what one whole-file read may take (history, journal)


def read_jsonl(path: Path, spec=None) -> tuple[list[dict], list[JsonlProblem]]:
    """All object lines of a JSONL file (those that fit ``spec``), plus the lines skipped."""
    path = Path(path)
    try:
        data = read_regular(path, MAX_JSONL_READ)
    except ValueError as exc:
        return [], [JsonlProblem(path, 0, f"the file is {exc}; not read")]
    if data is None:
        return [], []
    return _parse_lines(data, path, spec)


def last_jsonl_record(
    path: Path, chunk: int = 65536, spec=None, limit: int = 64 * 1024 * 1024
) -> dict | None:
    """The last object line that parses (and fits ``spec``), reading from the end:
    cost ~ line size, never more than ``limit`` bytes."""
    try:
        fd = _open_nofollow(Path(path), os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        pos = fh.seek(0, os.SEEK_END)
        floor = max(0, pos - limit)
        buf = b""
        while pos > floor:
            step = min(chunk, pos - floor)
            pos -= step
            fh.seek(pos)
            buf = fh.read(step) + buf
            lines = buf.split(b"\n")
            # lines[0] may be cut unless we reached the file's start
            candidates = lines if pos == 0 else lines[1:]
            for raw in reversed(candidates):
                if raw.strip():
                    try:
                        value = jsoncodec.loads(raw)
                        if _check_line(value, spec) is None:
                            return value
                    except jsoncodec.DecodeError:
                        pass
            buf = lines[0] if pos else b""
    return None


def read_jsonl_from(
    path: Path, offset: int, spec=None, limit: int = 4 * 1024 * 1024
) -> tuple[list[dict], int, list[str]]:
    """Complete object lines appended after byte ``offset``: (records, new offset, problems).

    At most ``limit`` bytes are taken per call (the rest waits for the next); a
    partial last line is left for the next call; a file shorter than ``offset``
    (replaced) is read from the start. A single line longer than ``limit`` is skipped.
    """
    try:
        fd = _open_nofollow(Path(path), os.O_RDONLY)
    except FileNotFoundError:
        return [], 0, []
    with os.fdopen(fd, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        if offset > size:
            offset = 0
        fh.seek(offset)
        data = fh.read(min(size - offset, limit))
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) >= limit:
        return [], offset + len(data), [f"{Path(path).name}: a line longer than {limit} bytes was skipped"]
    records, problems = _parse_lines(data[:end], Path(path), spec)
    # Line numbers count from the offset, so the note names the file and the fault only.
    return records, offset + end, [f"{p.path.name}: a line that is {p.detail} was skipped" for p in problems]


TEMP_MARK = ".tmp-"


def remove_stale_temps(directory: Path) -> list[str]:
    """Delete temp files left by writers that were killed before their rename
    (``.<name>.tmp-<pid>-<ns>``), when that pid is no longer running."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not name.startswith(".") or TEMP_MARK not in name:
            continue
        pid_text = name.rsplit(TEMP_MARK, 1)[1].split("-", 1)[0]
        if not pid_text.isdigit() or _pid_running(int(pid_text)):
            continue
        try:
            os.unlink(entry.path)
            removed.append(name)
        except OSError:
            pass
    return removed


def _pid_running(pid: int) -> bool:
    if pid == os.getpid():
        return False  # our own leftovers: nothing of ours is mid-write while we sweep
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True
