"""The on-disk shape of loops: where each file lives, loop.json, active markers.

``.loopwright/active/<name>`` exists exactly while loop ``<name>`` is active, so
the Stop hook's launcher can tell "nothing to do" with one directory listing,
before any Python starts. The marker is created before loop.json says active
and removed after it says ended: a crash in between leaves a marker that points
at nothing active, which costs one Python start and is then cleaned up.

``.loopwright/owners/<name>=<session>`` (``<name>=`` while nobody owns it) says
which session owns active loop ``<name>``, so the launcher can also pass another
session's Stop through without Python (see ``save_config`` and hooks/stop).
"""

from __future__ import annotations

import os
import stat

from loopwright.core import jsoncodec, schema
from loopwright.core.errors import LoopError, UnsafePath, UserError
from loopwright.state import store, trust
from loopwright.state.fspath import Path
from loopwright.state.owners import (  # noqa: F401 - the index's names, used through this module too
    ACTIVE,
    OWNER_ID_LONGEST,
    OWNERS_DIRNAME,
    is_owner_id,
    owner_entries,
    owner_entry,
    set_owner_index,
)
from loopwright.state.project import is_loop_name

ENDED = "ended"

# Ceilings a start request leaves out and its mode does not set.
DEFAULT_MAX_ITERATIONS = 20
DEFAULT_MAX_MINUTES = 60.0
DEFAULT_MAX_DOLLARS = 25.0


class UntrustedLoop(LoopError):
    """A loop this user's loopwright did not create here: never acted on."""

    def __init__(self, name: str, why: str):
        self.name, self.why = name, why
        super().__init__(
            f"loop {name} was not created by your loopwright in this project ({why}); loopwright leaves it "
            f"alone. See its goal and commands with `loopwright adopt {name}`, or delete it with "
            f"`loopwright teardown {name} --force`"
        )


class EndedCopy(UntrustedLoop):
    """A loop.json this user's loopwright signed, put back after the loop ended: an older copy
    (the record of ended loops beside the key says so). Never continued."""

    def __init__(self, name: str, why: str):
        self.name, self.why = name, why
        LoopError.__init__(
            self,
            f"loop {name} is an older copy of a loop that has ended ({why}); loopwright does not continue "
            f"it. Delete it with `loopwright teardown {name} --force`, or, to run it again on purpose, "
            f"review it with `loopwright adopt {name}`",
        )


class StateMissing(LoopError):
    """A signed loop whose budget or history file is gone: it stops, and is never started
    again from zero (deleting budget.json would otherwise reset its spend)."""

    def __init__(self, name: str, what: str):
        self.name, self.what = name, what
        super().__init__(
            f"loop {name}: {what} is missing (removed after the loop started); the loop stops rather "
            "than count its iterations and spend again from zero. Start a new loop to go on"
        )


class LoopPaths:
    """Every file of one loop, under ``<state>/loops/<name>/``."""

    def __init__(self, state: Path, name: str):
        self.state = Path(state)
        self.name = name
        self.dir = d = self.state / "loops" / name
        self.config = d / "loop.json"
        self.lock = d / "loop.lock"
        self.budget = d / "budget.json"
        self.history = d / "history.jsonl"
        self.journal = d / "journal.jsonl"
        self.progress = d / "progress.json"
        self.stop = d / "stop"
        self.tombstone = d / "cancelled"
        self.report = d / "report.md"
        self.mutex = d / ".mutex"
        self.reports = d / "reports.jsonl"
        self.tasks = d / "tasks.jsonl"
        self.backprop_pending = d / "backprop-pending.json"
        self.backprop_log = d / "backprop-log.md"
        self.ledger = d / "token-ledger.json"
        self.handoff = d / "handoff.md"  # written by the agent in the wrap-up turn (core/wrapup.py)
        # Rewritten by a long, quiet tool call of the loop's own (`loopwright review wait`): it
        # tells the headless runner that a client using no CPU is waiting, not stalled.
        self.busy = d / "busy.json"
        self.marker = self.state / "active" / name

    def configured(self, cfg: dict | None) -> LoopPaths:
        """These paths with the loop's own overrides applied (``--budget-file``)."""
        if cfg and cfg.get("budget_file"):
            from loopwright.state.project import contained

            self.budget = contained(self.state.parent, cfg["budget_file"], "budget_file")
        return self


def validate_name(name: str) -> str:
    if not is_loop_name(name):
        raise LoopError(
            f"invalid loop name {name!r}: use 1-64 letters, digits, '-' or '_',"
            " starting with a letter or digit"
        )
    return name


def ensure_state_dir(state: Path) -> None:
    ensure_ignored(state)
    for sub in ("loops", "active"):
        try:
            (state / sub).mkdir(mode=0o700)
        except FileExistsError:
            pass
    check_dirs(state)


def ensure_ignored(state: Path) -> None:
    """History and telemetry are secret-class: the directory is private and keeps itself out of git."""
    try:
        state.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    check_dirs(state)
    # Always exactly "*": a .gitignore shipped by a cloned repository (empty, or re-including
    # files) would let `git add -A` commit the loop's history. Replacing it never follows a link.
    ignore = state / ".gitignore"
    try:
        current = store.read_regular(ignore, limit=64)
    except (OSError, ValueError, UserError):
        current = None
    if current != IGNORE_ALL:
        try:
            store.write_bytes_atomic(ignore, IGNORE_ALL)
        except OSError as exc:
            raise UnsafePath(f"{ignore} cannot be replaced ({exc.strerror}); remove it") from None


IGNORE_ALL = b"*\n"


def _real_dir(path: Path) -> bool:
    """True for a real directory of this user's that nobody else can write, False when
    missing; UnsafePath for a symlink, a file, or a directory another user owns or can write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symlink; loopwright does not follow symlinks in its state (remove it)")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} is not a directory; remove it")
    why = store.dir_problem(path, st)
    if why:
        raise UnsafePath(why)
    return True


def check_dirs(state: Path, name: str | None = None) -> None:
    """Refuse a symlinked ``.loopwright/``, ``loops/``, ``active/``, ``owners/`` or loop
    directory (following one would read or write outside the project), and one that another
    user owns or can write (that user could edit the loop's state under it)."""
    if not _real_dir(state):
        return
    _real_dir(state / "loops")
    _real_dir(state / "active")
    _real_dir(state / OWNERS_DIRNAME)
    if name is not None:
        _real_dir(state / "loops" / name)


def loop_names(state: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(state / "loops") if e.is_dir() and is_loop_name(e.name))
    except FileNotFoundError:
        return []


def active_names(state: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(state / "active") if is_loop_name(e.name))
    except FileNotFoundError:
        return []


class Found:
    """One entry of ``active/``: its paths, and its config when it is a trusted active loop."""

    __slots__ = ("paths", "config", "problem")

    def __init__(self, paths: LoopPaths, config: dict | None, problem: UserError | None):
        self.paths, self.config, self.problem = paths, config, problem


def scan_active(state: Path, *, move_corrupt: bool = True) -> list[Found]:
    """Every loop marked active, trusted or not, with its config or the problem that
    keeps it from being acted on. Markers of loops that ended (left by a crash
    between the two writes) are cleared when the loop is ours."""
    out = []
    for name in active_names(state):
        paths = LoopPaths(state, name)
        try:
            cfg = load_config(paths, move_corrupt=move_corrupt)
        except (UntrustedLoop, store.CorruptFile, UnsafePath) as exc:
            out.append(Found(paths, None, exc))
            continue
        if cfg is None or cfg.get("status") != ACTIVE:
            if move_corrupt and cfg is not None:
                clear_active(paths)
            continue
        if move_corrupt:
            heal_owner_index(paths, cfg)
        out.append(Found(paths, cfg, None))
    return out


def mark_active(paths: LoopPaths) -> None:
    set_owner_index(paths, None)  # until loop.json names the owner, the launcher asks Python
    paths.marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(str(paths.marker), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)


def clear_active(paths: LoopPaths) -> None:
    set_owner_index(paths, None)  # first: a marker left alone by a crash means "ask Python"
    try:
        paths.marker.unlink()
    except FileNotFoundError:
        pass


def heal_owner_index(paths: LoopPaths, cfg: dict) -> None:
    """Bring the entry of a trusted active loop up to date when it is missing or stale (a
    loop started before the index existed, or a crash between the writes): under the
    loop's mutex, so no owner change runs meanwhile; skipped when someone holds it."""
    want = owner_entry(paths.name, cfg)
    if want is None or owner_entries(paths.state, paths.name) == [want]:
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no launcher index
        return
    try:
        fd = store._open_nofollow(paths.mutex, os.O_RDWR | os.O_CREAT)
    except (OSError, UnsafePath):
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # busy: whoever holds it is changing the loop and writes the entry itself
        try:
            current = load_config(paths, move_corrupt=False)
        except (UntrustedLoop, store.CorruptFile, UnsafePath):
            return
        if os.path.lexists(paths.marker):  # not ended meanwhile: then no entry belongs
            set_owner_index(paths, owner_entry(paths.name, current))
    finally:
        os.close(fd)


_VERIFIED: dict[str, tuple] = {}  # loop.json files this process verified (see load_config)


def load_config(paths: LoopPaths, *, move_corrupt: bool = True, again: bool = True) -> dict | None:
    """loop.json, only if this user's loopwright wrote it for this project and name.

    None when there is none. UntrustedLoop when it does not parse or is not signed
    by this user's key (nothing of such a loop is touched: not even moved aside).
    CorruptFile when it is ours but has the wrong shape (moved aside). UntrustedLoop also
    when its directory or loop.json is another user's or writable by others (they could
    change it at any time), and EndedCopy when it is an older copy of a loop that has ended.
    """
    check_dirs(paths.state)
    check_loop_dir(paths)
    try:
        cfg = store.read_json(paths.config, move_corrupt=False)
    except store.CorruptFile as exc:
        raise UntrustedLoop(paths.name, f"loop.json is unreadable: {exc.detail}") from None
    if cfg is None:
        return None
    try:
        key = trust.load_key()
    except trust.KeyProblem as exc:
        raise UntrustedLoop(paths.name, f"your loopwright key is unsafe: {exc}") from None
    seen = (store.identity(paths.config), key)
    if _VERIFIED.get(str(paths.config)) == (seen, cfg):
        return cfg  # the Stop's second read (under the mutex) of a file unchanged since, same key
    why = trust.verify(cfg, paths.state, paths.name, key)
    if why:
        raise UntrustedLoop(paths.name, why)
    try:
        schema.check(schema.LOOP, cfg, "loop.json")
        check_loop_values(paths, cfg)
    except (schema.SchemaError, UnsafePath) as exc:
        moved = store.move_aside(paths.config) if move_corrupt else None
        raise store.CorruptFile(paths.config, moved, f"wrong shape: {exc}") from None
    if cfg.get("status") == ACTIVE:
        why = trust.ended_earlier(cfg, paths.state, paths.name)
        if why and again:
            # A loop that ends saves loop.json, then records its end: a read between the two
            # (the runner polling while the last Stop ends the loop) finds the new save when it
            # reads once more; an older copy put back is the same copy again, and refused.
            return load_config(paths, move_corrupt=move_corrupt, again=False)
        if why:
            raise EndedCopy(paths.name, why)
    _VERIFIED[str(paths.config)] = (seen, jsoncodec.loads(jsoncodec.dumps(cfg)))  # a copy no caller holds
    return cfg


def check_loop_dir(paths: LoopPaths) -> None:
    """The loop's directory and its loop.json must be this user's, writable by nobody else:
    whoever else can write them can change the loop's files between any two reads (delete
    budget.json to reset its spend, add tasks to its prompt). Such a loop is not trusted
    (UntrustedLoop); adopting it copies it into a new private directory. A symlink or a file
    where the directory belongs is UnsafePath."""
    try:
        st = os.lstat(paths.dir)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        _real_dir(paths.dir)  # says why in its words: a symlink, or not a directory
    why = store.changeable_by_others("its directory", st)
    if why is None:
        try:
            why = store.changeable_by_others("its loop.json", os.lstat(paths.config))
        except FileNotFoundError:
            pass
    if why:
        raise UntrustedLoop(paths.name, why)


def missing_state(paths: LoopPaths, cfg: dict) -> str | None:
    """Which of a signed loop's budget.json and history.jsonl is gone, or None. Both exist
    from its start on (start writes them before loop.json); a loop started by an older
    version (no ``loop_id``) has history.jsonl from its first committed tick on."""
    if not os.path.lexists(paths.budget):
        return paths.budget.name
    if os.path.lexists(paths.history):
        return None
    if cfg.get("loop_id"):
        return paths.history.name
    try:
        budget = read_state(paths, "budget", move_corrupt=False) or {}
    except (store.CorruptFile, UnsafePath):
        return None  # the reader that acts on it reports it
    if budget.get("tick") is not None or budget.get("iterations_used"):
        return paths.history.name
    return None


def last_snapshot(paths: LoopPaths) -> dict | None:
    """The last history line, when it carries a budget snapshot (a damaged last line is skipped):
    where a loop's counters come back from when its budget.json is gone."""
    last = store.last_jsonl_record(paths.history, spec=schema.HISTORY)
    return last if last and isinstance(last.get("budget_snapshot"), dict) else None


def check_loop_values(paths: LoopPaths, cfg: dict) -> None:
    """What a type check cannot see: the name matches the directory, the budget file
    stays inside the project."""
    if cfg.get("name") != paths.name:
        raise schema.SchemaError(
            f"loop.json: name {cfg.get('name')!r} does not match its directory {paths.name!r}"
        )
    if cfg.get("budget_file"):
        from loopwright.state.project import contained

        contained(paths.state.parent, cfg["budget_file"], "budget_file")


def read_unverified(paths: LoopPaths) -> dict | None:
    """loop.json as it is on disk, for showing an untrusted loop to the user (never acted on)."""
    try:
        return store.read_json(paths.config, move_corrupt=False)
    except store.CorruptFile:
        return None


SPECS = {
    "budget": schema.BUDGET,
    "lock": schema.LOCK,
    "progress": schema.PROGRESS,
    "ledger": schema.LEDGER,
    "stop": schema.STOP_REQUEST,
    "backprop_pending": schema.BACKPROP,
}


def read_state(paths: LoopPaths, which: str, *, move_corrupt: bool = True) -> dict | None:
    """One of the loop's JSON files (``budget``, ``lock``, ``progress``, ``ledger``,
    ``stop``, ``backprop_pending``), checked against its schema: a file that fails
    is moved aside (unless ``move_corrupt`` is false) and raised as CorruptFile."""
    return store.read_json(getattr(paths, which), move_corrupt=move_corrupt, spec=SPECS[which])


def save_config(paths: LoopPaths, cfg: dict) -> dict:
    """Write loop.json signed with this user's key; returns what was written.

    Every change of ``status`` or ``owner_session`` passes here, and the owner index
    follows: its entries go before loop.json changes, the new one comes after, so the
    launcher never sees a lone entry that disagrees with loop.json (only none: doubt).

    Every save raises ``generation``; saving a loop as ended records that generation beside
    the key, so an older copy of it put back later is not continued (trust.ended_earlier)."""
    signed = sign_config(paths, cfg)
    set_owner_index(paths, None)
    store.write_json(paths.config, signed)
    set_owner_index(paths, owner_entry(paths.name, signed))
    if signed.get("status") == ENDED:
        trust.record_ended(signed, paths.state, paths.name)
    return signed


def sign_config(paths: LoopPaths, cfg: dict) -> dict:
    """``cfg`` as the next save of loop ``paths.name`` writes it: one generation on, signed."""
    return trust.sign(dict(cfg, generation=trust.generation(cfg) + 1), paths.state, paths.name)


def is_cancelled(paths: LoopPaths) -> bool:
    return paths.tombstone.exists()


def allocate_name(state: Path, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``… : never reuse a directory, so an
    ended loop's files stay for inspection. Call under the state mutex."""
    existing = set(loop_names(state))
    if base not in existing:
        return base
    n = 2
    while f"{base}-{n}" in existing:
        n += 1
    return f"{base}-{n}"


def state_mutex(state: Path):
    ensure_ignored(state)
    return store.file_lock(state / ".mutex")


class loop_mutex:  # lower case: used as `with loop_mutex(paths):`, as it was when a function
    """The loop's mutex, held for a ``with`` block. A symlink or special file in its place
    is moved aside (it holds no data: it only exists to be locked) and a fresh lock file
    is used."""

    def __init__(self, paths: LoopPaths):
        self.paths = paths
        self._lock = None

    def __enter__(self) -> loop_mutex:
        lock = store.file_lock(self.paths.mutex)
        try:
            lock.__enter__()
        except UnsafePath:
            store.move_aside(self.paths.mutex)
            lock = store.file_lock(self.paths.mutex)
            lock.__enter__()
        self._lock = lock
        return self

    def __exit__(self, *exc) -> None:
        if self._lock is not None:
            self._lock.__exit__(*exc)
            self._lock = None
