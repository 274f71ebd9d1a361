"""The router's incremental view of a task registry.

``tasks.load`` parses every line of ``tasks.jsonl``: fine for the CLI, too much for
a Stop that runs after every turn (100,000 lines took 0.6 s and 140 MiB). The Stop
needs only counts, the first tasks in prompt order, the first open ids and a
dependency cycle, so a large registry is folded into a SQLite sidecar in the
loop's directory, one appended line at a time: each Stop reads only the bytes
written since the last one and answers with indexed, LIMITed queries.

The sidecar is a cache derived from ``tasks.jsonl`` and nothing else: when the
registry was replaced, truncated or rewritten (its inode, size or fingerprints
changed) or the sidecar is unreadable, it is rebuilt from the file. Small
registries are parsed whole (no SQLite at all). The view gives exactly what
``tasks.render``, ``tasks.pressure_line`` and ``tasks.dependency_cycle`` give on
the whole registry; a property test holds it to that.
"""

from __future__ import annotations

import os
import stat

from loopwright.core import jsoncodec
from loopwright.state import tasks as taskreg
from loopwright.state.fspath import Path

SMALL_FILE = 256 * 1024  # below this, parsing the whole file is cheaper than opening SQLite
SCHEMA_VERSION = "4"
FP_BYTES = 4096
CHUNK = 1 << 20
MAX_PROBLEMS = 3


class TasksView:
    """What the router reads of the tasks: the same names as tasks.Registry offers."""

    def __init__(self, open_count: int, done_count: int, open_head: list, done_head: list, cycle, problems):
        self.open_count, self.done_count = open_count, done_count
        self.open, self.done = open_head, done_head  # heads only: enough to fill any prompt budget asked for
        self.cycle, self.problems = cycle, problems

    @property
    def total(self) -> int:
        return self.open_count + self.done_count

    @property
    def open_ids_head(self) -> list[str]:
        return [t["id"] for t in self.open[: taskreg.OPEN_IDS_SHOWN]]


def view(tasks_path: Path, index_path: Path, budget_chars: int) -> taskreg.Registry | TasksView:
    """The registry as the router needs it. Raises RegistryError for an unsafe tasks file."""
    head = max(budget_chars // 8 + 1, taskreg.OPEN_IDS_SHOWN)
    size = _regular_size(tasks_path)
    if size is None:
        return taskreg.Registry()
    if size < SMALL_FILE or not _index_usable(index_path):
        return taskreg.load(tasks_path)
    try:
        return _Index(index_path).view(tasks_path, head)
    except Exception:  # a cache that cannot be used is rebuilt or bypassed, never trusted half-way
        _discard(index_path)
        return taskreg.load(tasks_path)


def _regular_size(path: Path) -> int | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise taskreg.RegistryError(
            f"{path} is a symlink or a special file; loopwright does not follow or read those"
        )
    return st.st_size


def _index_usable(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True  # made on first use
    except OSError:
        return False


def _discard(path: Path) -> None:
    for p in (path, Path(str(path) + "-journal"), Path(str(path) + "-wal"), Path(str(path) + "-shm")):
        try:
            if not os.path.islink(p):
                os.unlink(p)
        except OSError:
            pass


class _Index:
    def __init__(self, path: Path):
        try:  # only for large registries: it costs more to import than a small parse
            import _sqlite3 as sqlite3  # its C module: the package adds date adapters (~1 ms)
        except ImportError:  # pragma: no cover - a build that keeps it elsewhere
            import sqlite3

        fd = os.open(str(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.close(fd)
        self.db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=DELETE")
        self.db.execute("PRAGMA synchronous=OFF")  # a cache: a torn one is detected and rebuilt
        self._schema()

    def _schema(self) -> None:
        db = self.db
        db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
        if self._meta().get("version") not in (None, SCHEMA_VERSION):
            db.executescript("DROP TABLE IF EXISTS task; DROP TABLE IF EXISTS problem; DELETE FROM meta;")
        db.executescript(
            "CREATE TABLE IF NOT EXISTS task (id TEXT PRIMARY KEY, seq INTEGER, status TEXT, created TEXT,"
            " completed TEXT, num INTEGER, deps INTEGER, entry BLOB);"
            "CREATE INDEX IF NOT EXISTS open_order ON task(status, created, num, seq);"
            "CREATE INDEX IF NOT EXISTS done_order ON task(status, completed, seq);"
            "CREATE INDEX IF NOT EXISTS with_deps ON task(deps, status, created, num);"
            "CREATE TABLE IF NOT EXISTS problem (lineno INTEGER, text TEXT);"
        )

    def _meta(self) -> dict:
        return dict(self.db.execute("SELECT k, v FROM meta").fetchall())

    def view(self, path: Path, head: int) -> TasksView:
        fd = os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self._catch_up(fd, path.name)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        finally:
            os.close(fd)
        return self._query(head)

    def _catch_up(self, fd: int, name: str) -> None:
        st = os.fstat(fd)
        meta = self._meta()
        offset = int(meta.get("offset") or 0)
        ident = f"{st.st_dev}:{st.st_ino}"
        if (
            meta.get("version") != SCHEMA_VERSION
            or meta.get("ident") != ident
            or st.st_size < offset
            or meta.get("head_fp") != _fingerprint(fd, 0, min(offset, FP_BYTES))
            or meta.get("tail_fp") != _fingerprint(fd, max(0, offset - FP_BYTES), offset)
        ):
            for table in ("task", "problem", "meta"):  # not executescript: it would commit the transaction
                self.db.execute(f"DELETE FROM {table}")
            meta, offset = {}, 0
        counts = None  # after a rebuild: counted once below; else kept up to date row by row
        if offset and "open_count" in meta:
            counts = {"open": int(meta["open_count"]), "done": int(meta["done_count"])}
        state = _Fold(self.db, name, int(meta.get("lines") or 0), int(meta.get("max_id") or 0), counts)
        end = state.read(fd, offset, st.st_size)
        if state.counts is None:
            state.counts = dict(
                self.db.execute("SELECT status, count(*) FROM task GROUP BY status").fetchall()
            )
        self.db.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [
                ("version", SCHEMA_VERSION),
                ("ident", ident),
                ("offset", str(end)),
                ("lines", str(state.lines)),
                ("max_id", str(state.max_id)),
                ("open_count", str(state.counts.get("open", 0))),
                ("done_count", str(state.counts.get("done", 0))),
                ("head_fp", _fingerprint(fd, 0, min(end, FP_BYTES))),
                ("tail_fp", _fingerprint(fd, max(0, end - FP_BYTES), end)),
            ],
        )

    def _query(self, head: int) -> TasksView:
        db = self.db
        meta = self._meta()
        counts = {"open": int(meta["open_count"]), "done": int(meta["done_count"])}
        open_head = [
            jsoncodec.loads(r[0])
            for r in db.execute(
                "SELECT entry FROM task WHERE status='open' ORDER BY created, num, seq DESC LIMIT ?", (head,)
            )
        ]
        done_head = [
            jsoncodec.loads(r[0])
            for r in db.execute(
                "SELECT entry FROM task WHERE status='done' ORDER BY completed DESC, seq DESC LIMIT ?",
                (head,),
            )
        ]
        with_deps = [
            jsoncodec.loads(r[0])
            for r in db.execute(
                "SELECT entry FROM task INDEXED BY with_deps WHERE deps=1 AND status='open'"
                " ORDER BY created, num, seq DESC"
            )
        ]
        cycle = taskreg.dependency_cycle(taskreg.Registry(open=with_deps)) if with_deps else None
        problems = [
            r[0] for r in db.execute("SELECT text FROM problem ORDER BY lineno LIMIT ?", (MAX_PROBLEMS,))
        ]
        return TasksView(counts.get("open", 0), counts.get("done", 0), open_head, done_head, cycle, problems)


def _fingerprint(fd: int, start: int, end: int) -> str:
    """A checksum of bytes ``start``..``end``: tells a rewritten registry from a grown one (with
    its inode and size). CRC-32, not SHA-256: this guards a cache against accidents, and
    hashlib costs the Stop 2 ms to import."""
    import zlib

    return f"{zlib.crc32(os.pread(fd, max(0, end - start), start)):08x}" if end > start else ""


class _Fold:
    """Folds appended lines into the index: a task line replaces its id's row, a
    tombstone deletes it (a later task line for that id brings it back, as in
    materialization, where the newest entry wins)."""

    def __init__(self, db, name: str, lines: int, max_id: int, counts: dict | None):
        self.db, self.name, self.lines, self.max_id = db, name, lines, max_id
        self.counts = counts  # tasks per status, or None while rebuilding (counted at the end)

    def read(self, fd: int, offset: int, size: int) -> int:
        carry = b""
        pos = offset
        while pos < size:
            chunk = os.pread(fd, min(CHUNK, size - pos), pos)
            if not chunk:
                break
            pos += len(chunk)
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                self._lines(data[:cut].split(b"\n")[:-1])
            carry = data[cut:]
        return pos - len(carry)  # a partial last line waits for the next Stop

    def _lines(self, raws: list[bytes]) -> None:
        rows, problems = [], []
        for raw in raws:
            self.lines += 1
            if not raw or raw.isspace():
                continue
            reg = taskreg.materialize_lines([raw], self.name)
            if reg.problems:
                problems.append(
                    (self.lines, reg.problems[0].replace(f"{self.name}:1:", f"{self.name}:{self.lines}:"))
                )
                continue
            entry = jsoncodec.loads(raw)
            self.max_id = max(self.max_id, reg.max_id)
            if entry["type"] == "task-tombstone":
                self._put(rows)  # file order: the rows before the tombstone land first
                rows = []
                self._recount(entry["target_id"], None)
                self.db.execute("DELETE FROM task WHERE id = ?", (entry["target_id"],))
                continue
            rows.append(
                (
                    entry["id"],
                    self.lines,
                    entry["status"],
                    entry.get("created") or "",
                    entry.get("completed") or "",
                    _num(entry["id"]),
                    1 if entry.get("depends_on") else 0,
                    raw,
                )
            )
        self._put(rows)
        self.db.executemany("INSERT INTO problem VALUES (?, ?)", problems)

    def _put(self, rows: list) -> None:
        if self.counts is not None:
            for row in rows:  # one by one: a later row may replace an earlier one
                self._recount(row[0], row[2])
                self.db.execute("INSERT OR REPLACE INTO task VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
            return
        self.db.executemany("INSERT OR REPLACE INTO task VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def _recount(self, task_id: str, new_status: str | None) -> None:
        """Move ``task_id`` in the counts from the status it has to ``new_status`` (None: gone)."""
        if self.counts is None:
            return
        old = self.db.execute("SELECT status FROM task WHERE id = ?", (task_id,)).fetchone()
        if old is not None:
            self.counts[old[0]] = self.counts.get(old[0], 0) - 1
        if new_status is not None:
            self.counts[new_status] = self.counts.get(new_status, 0) + 1


def _num(task_id: str) -> int:
    n = task_id[5:] if task_id.startswith("task-") else ""
    return int(n) if n.isdigit() else 0
