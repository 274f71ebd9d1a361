"""The task registry (autoloop): an append-only ``tasks.jsonl`` with tombstones.

Entries are ``task`` lines (``id``, ``text``, ``status`` open|done, ``source``,
``created``, optional ``completed`` and ``depends_on``) and ``task-tombstone``
lines (``target_id``, ``reason``). Updates append a new ``task`` line for the same
id. Materialization reads newest to oldest, keeps the latest entry per id and
drops tombstoned ids; open tasks come oldest-created first, done tasks
most-recently-completed first. Appends hold the file lock, and ids are allocated
under it, so concurrent writers never lose an entry or reuse an id.
"""

from __future__ import annotations

import os

from loopwright.core import jsoncodec
from loopwright.core.errors import UserError
from loopwright.core.record import Record
from loopwright.state import store
from loopwright.state.fspath import Path
from loopwright.state.lock import now_iso

OPEN, DONE = "open", "done"
DEFAULT_PROMPT_BUDGET = 4000
OPEN_IDS_SHOWN = 50  # open task ids named when a completion claim is rejected


class RegistryError(UserError):
    """A one-line, user-facing problem with the task registry (tasks.jsonl)."""


class Registry(Record):
    FIELDS = (
        ("open", []),
        ("done", []),
        ("problems", []),
        ("max_id", 0),
    )

    open: list[dict]
    done: list[dict]
    problems: list[str]
    max_id: int

    def get(self, task_id: str) -> dict | None:
        for t in self.open + self.done:
            if t["id"] == task_id:
                return t
        return None

    @property
    def total(self) -> int:
        return len(self.open) + len(self.done)

    # What the router reads. The incremental view (taskindex.TasksView) offers the same.
    @property
    def open_count(self) -> int:
        return len(self.open)

    @property
    def done_count(self) -> int:
        return len(self.done)

    @property
    def open_ids_head(self) -> list[str]:
        return [t["id"] for t in self.open[:OPEN_IDS_SHOWN]]

    @property
    def cycle(self) -> list[str] | None:
        return dependency_cycle(self)


def _number(task_id: str) -> int:
    n = task_id[5:] if task_id.startswith("task-") else ""
    return int(n) if n.isdigit() else 0


def materialize_lines(lines: list[bytes], name: str = "tasks.jsonl") -> Registry:
    """The registry from raw lines (oldest first). Bad lines are reported by number and skipped.

    Runs on every Stop of a loop with tasks, so the loop is kept tight: one parse
    per line, one pass from newest to oldest, one sort per bucket.
    """
    reg = Registry()
    entries, reg.max_id = _parse_lines(lines, name, reg.problems)
    reg.open, reg.done = _current(entries)
    return reg


def _parse_lines(lines: list[bytes], name: str, problems: list[str]) -> tuple[list[dict], int]:
    """The well-formed entries, oldest first, and the highest task number seen."""
    loads, decode_error = jsoncodec.loads, jsoncodec.DecodeError
    entries: list[dict] = []
    max_id = 0
    for lineno, raw in enumerate(lines, 1):
        if not raw or raw.isspace():
            continue
        try:
            e = loads(raw)
        except decode_error:
            problems.append(f"{name}:{lineno}: not valid JSON (line skipped)")
            continue
        kind = e.get("type") if type(e) is dict else None
        tid = e.get("id") if kind else None
        if type(tid) is not str or kind not in ("task", "task-tombstone"):
            problems.append(f"{name}:{lineno}: not a task entry (line skipped)")
            continue
        if kind == "task":
            if e.get("status") not in (OPEN, DONE) or type(e.get("text")) is not str:
                problems.append(f"{name}:{lineno}: task entry without a valid status and text (line skipped)")
                continue
            if not _well_typed(e):
                problems.append(
                    f"{name}:{lineno}: task entry with a wrong created, completed or depends_on "
                    "(line skipped)"
                )
                continue
        elif type(e.get("target_id")) is not str:
            problems.append(f"{name}:{lineno}: tombstone without target_id (line skipped)")
            continue
        if tid.startswith("task-"):
            n = tid[5:]
            if n.isdigit() and int(n) > max_id:
                max_id = int(n)
        entries.append(e)
    return entries, max_id


def _current(entries: list[dict]) -> tuple[list[dict], list[dict]]:
    """The open and the done tasks: the newest entry of each id wins, tombstones remove."""
    seen: set[str] = set()
    tombstoned: set[str] = set()
    open_, done = [], []
    for e in reversed(entries):
        if e["type"] == "task-tombstone":
            tombstoned.add(e["target_id"])
            continue
        tid = e["id"]
        if tid in seen or tid in tombstoned:
            continue
        seen.add(tid)
        (open_ if e["status"] == OPEN else done).append(e)
    # Timestamps have one-second resolution: ties go by id (creation order) for open
    # tasks, and keep newest-first scan order for done ones (the sort is stable).
    open_.sort(key=lambda t: (t.get("created") or "", _number(t["id"])))
    done.sort(key=lambda t: t.get("completed") or "", reverse=True)
    return open_, done


MAX_FILE_BYTES = 1024 * 1024 * 1024


def read_file(path: Path) -> bytes:
    """The registry's bytes: a regular file reached without a symlink, or nothing."""
    from loopwright.core.errors import UnsafePath

    try:
        data = store.read_regular(Path(path), MAX_FILE_BYTES)
    except UnsafePath as exc:
        raise RegistryError(str(exc)) from None
    except ValueError as exc:
        raise RegistryError(f"{path} is {exc}; split or archive it") from None
    return data or b""


def _well_typed(e: dict) -> bool:
    deps = e.get("depends_on")
    return (
        type(e.get("created", "")) is str
        and type(e.get("completed", "")) in (str, type(None))
        and (deps is None or (type(deps) is list and all(type(d) is str for d in deps)))
    )


def load(path: Path) -> Registry:
    return materialize_lines(read_file(path).split(b"\n"), Path(path).name)


class _Appender:
    """Read-modify-append under the file's exclusive lock."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __enter__(self) -> _Appender:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = store.file_lock(self.path.with_name(self.path.name + ".lock"))
        self._lock.__enter__()
        self.fresh = _empty(self.path)  # this append starts the file
        self.registry = load(self.path)
        return self

    def __exit__(self, *exc) -> None:
        self._lock.__exit__(*exc)

    def append(self, entry: dict) -> None:
        store.append_jsonl(self.path, entry)


def add(
    path: Path,
    text: str,
    source: str = "manual",
    depends_on: list[str] | None = None,
    mark_new: bool = False,
) -> dict:
    """Append an open task. ``mark_new``: when this starts the file, record that loopwright made it
    (see ``made_here``); the project's own registry is marked so."""
    text = " ".join(text.split()) if "\n" not in text else text.strip()
    if not text:
        raise RegistryError("a task needs a description: loopwright task add <text...>")
    with _Appender(path) as ap:
        for dep in depends_on or []:
            if ap.registry.get(dep) is None:
                raise RegistryError(f"--depends-on {dep}: no such task (see loopwright task list)")
        entry = {
            "id": f"task-{ap.registry.max_id + 1}",
            "type": "task",
            "text": text,
            "status": OPEN,
            "source": source,
            "created": now_iso(),
        }
        if depends_on:
            entry["depends_on"] = list(dict.fromkeys(depends_on))
        ap.append(entry)
        if mark_new and ap.fresh:
            from loopwright.state.taskmark import mark_made

            mark_made(path)
    return entry


def _existing(reg: Registry, task_id: str) -> dict:
    task = reg.get(task_id)
    if task is None:
        raise RegistryError(f"no task {task_id} (it may have been removed); see loopwright task list")
    return task


def complete(path: Path, task_id: str) -> tuple[dict, bool]:
    """(task, changed). Completing a done task is a no-op that reports False."""
    with _Appender(path) as ap:
        task = _existing(ap.registry, task_id)
        if task["status"] == DONE:
            return task, False
        entry = dict(task, status=DONE, completed=now_iso())
        ap.append(entry)
    return entry, True


def update(path: Path, task_id: str, text: str) -> dict:
    text = text.strip()
    if not text:
        raise RegistryError("the new description is empty")
    with _Appender(path) as ap:
        task = _existing(ap.registry, task_id)
        entry = dict(task, text=text)  # status and timestamps are kept
        ap.append(entry)
    return entry


def remove(path: Path, task_id: str, reason: str = "manual") -> dict:
    with _Appender(path) as ap:
        _existing(ap.registry, task_id)
        n = ap.registry.max_id + 1
        entry = {
            "id": f"task-{n}",
            "type": "task-tombstone",
            "target_id": task_id,
            "reason": reason or "manual",
            "created": now_iso(),
        }
        ap.append(entry)
    return entry


def dependency_cycle(reg: Registry) -> list[str] | None:
    """A cycle among open tasks' depends_on edges, as a list of ids, or None."""
    graph = {t["id"]: [d for d in t.get("depends_on") or []] for t in reg.open}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if state.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if state.get(node) is None:
            found = visit(node)
            if found:
                return found
    return None


# --- prompt rendering -----------------------------------------------------------------


def pressure_line(reg) -> str:
    return f"Tasks: {reg.open_count} open, {reg.done_count} done ({reg.total} total)"


def _rows(reg: Registry):
    yield "head", "Tasks:"
    if reg.open:
        yield "head", "Open:"
        for t in reg.open:
            yield "task", f"- [ ] [{t['id']}] {t['text']}" + _deps(t)
    if reg.done:
        yield "head", "Done:"
        for t in reg.done:
            yield "task", f"- [x] [{t['id']}] {t['text']} (done)"


def render(reg: Registry, budget_chars: int = DEFAULT_PROMPT_BUDGET) -> str:
    """The ``Tasks:`` section, never longer than ``budget_chars``. Entries are cut
    from the bottom and replaced by a line saying how many were dropped. Stops
    building as soon as the budget is spent, whatever the registry's size."""
    if reg.total == 0:
        return ""
    return _fit(
        _rows(reg),
        reg.total,
        budget_chars,
        lambda n: f"... ({n} more task entries not shown; run `loopwright task list`)",
    )


def _fit(rows, total: int, budget_chars: int, summary_of) -> str:
    """``rows`` ((kind, text), "task" rows counted) joined by newlines within ``budget_chars``;
    when they do not all fit, the top ones and ``summary_of(number of task rows left out)``."""
    # Gather rows only while they could still fit: the work is bounded by the budget.
    head: list[tuple[str, str]] = []
    length = -1
    complete = True
    for row in rows:
        length += len(row[1]) + 1
        if length > budget_chars:
            complete = False
            break
        head.append(row)
    if complete:
        return "\n".join(text for _, text in head)
    kept: list[str] = []
    used = kept_tasks = 0  # used = length of the joined text so far, plus one
    for kind, text in head:
        if used + len(text) + 1 + len(summary_of(total - kept_tasks)) > budget_chars:
            break
        kept.append(text)
        used += len(text) + 1
        kept_tasks += kind == "task"
    summary = summary_of(total - kept_tasks)
    if used + len(summary) <= budget_chars:
        kept.append(summary)
    return "\n".join(kept)


def _deps(task: dict) -> str:
    deps = task.get("depends_on") or []
    return f" (after {', '.join(deps)})" if deps else ""


def tasks_path(project: Path, state: Path, loop_dir: Path | None, config: dict | None) -> Path:
    """``$LOOPWRIGHT_TASKS_FILE`` (absolute, wins), else the config key
    ``tasks_file`` (relative to the project), else the loop's own file inside a
    loop, else ``.loopwright/tasks.jsonl``."""
    env = os.environ.get("LOOPWRIGHT_TASKS_FILE")
    if env:
        p = Path(env)
        if not p.is_absolute():
            raise RegistryError(f"LOOPWRIGHT_TASKS_FILE must be an absolute path, got {env!r}")
        return p
    configured = (config or {}).get("tasks_file")
    if configured:
        from loopwright.core.errors import UnsafePath
        from loopwright.state.project import contained

        try:
            return contained(project, configured, "tasks_file in .loopwright.json")
        except UnsafePath as exc:
            raise RegistryError(str(exc)) from None
    if loop_dir is not None:
        return loop_dir / "tasks.jsonl"
    return state / "tasks.jsonl"


# --- where a loop's tasks come from ---------------------------------------------------------
#
# Decided when the loop starts and kept in its signed loop.json as ``tasks_source``, so a
# later edit of .loopwright.json cannot change it: ``env`` ($LOOPWRIGHT_TASKS_FILE, from the
# user's own environment), ``loop`` (the loop's own file), ``project`` (the project's own
# registry, for a mode that works on it) or ``file:<path relative to the project>``: a file
# loopwright did not write. That is the ``tasks_file`` of a .loopwright.json (which a cloned
# repository commits), or, for a mode working on the project's registry, a
# ``.loopwright/tasks.jsonl`` that this user's loopwright did not start. Its tasks are data:
# quoted in the prompt and attributed to the file (``render_foreign``), never loopwright's
# own list, and they never hold the loop open. The loop's own tasks stay in its own file.

FOREIGN = "file:"
OWN_SOURCES = ("env", "loop", "project")
CONFIG_TASKS_FILE = "tasks_file in .loopwright.json"


def start_source(project: Path, state: Path, project_tasks: bool, config: dict | None = None) -> str:
    """The ``tasks_source`` of a loop starting now (see above)."""
    from loopwright.core.errors import UnsafePath
    from loopwright.state.project import contained, project_config

    if os.environ.get("LOOPWRIGHT_TASKS_FILE"):
        return "env"
    if config is None:
        config, _ = project_config(project)
    configured = config.get("tasks_file")
    if configured:
        try:
            named = contained(project, configured, CONFIG_TASKS_FILE)
            return FOREIGN + os.path.relpath(named, os.path.realpath(project))
        except UnsafePath:
            pass  # never read: the loop keeps its own tasks (`loopwright task` says why)
    if not project_tasks:
        return "loop"
    default = Path(state) / "tasks.jsonl"
    from loopwright.state.taskmark import made_here

    return "project" if made_here(default) else FOREIGN + os.path.relpath(default, project)


def loop_files(
    loop: dict, project: Path, state: Path, loop_dir: Path, project_tasks: bool, config: dict | None
) -> tuple[Path | None, str | None]:
    """The file of the loop's own tasks (None when a mode that works on the project's registry
    finds a file loopwright did not write there), and the project-relative path of a file whose
    tasks are shown as data (None when there is none). ``$LOOPWRIGHT_TASKS_FILE`` wins."""
    env = os.environ.get("LOOPWRIGHT_TASKS_FILE")
    if env:
        return tasks_path(project, state, None, None), None
    source = loop.get("tasks_source")
    if not isinstance(source, str) or not (source in OWN_SOURCES or source.startswith(FOREIGN)):
        source = start_source(project, state, project_tasks, config)  # a loop from before it was kept
    own = Path(state) / "tasks.jsonl" if project_tasks else Path(loop_dir) / "tasks.jsonl"
    if source.startswith(FOREIGN):
        return (None if project_tasks else own), source[len(FOREIGN) :]
    return own, None


def foreign_file(project: Path, relpath: str) -> Path:
    """The file a ``file:`` source names, checked again: inside the project, through real
    directories. Raises RegistryError."""
    from loopwright.core.errors import UnsafePath
    from loopwright.state.project import contained

    try:
        return contained(project, relpath, "the tasks file")
    except UnsafePath as exc:
        raise RegistryError(str(exc)) from None


def _empty(path: Path) -> bool:
    try:
        return os.lstat(path).st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False
