"""Where a project's loop state lives. Standard library only: the Stop hook's
fast path imports this before deciding whether anything else is needed."""

from __future__ import annotations

import os

from loopwright.state.fspath import Path

STATE_DIRNAME = ".loopwright"
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def is_id(text: object, longest: int) -> bool:
    """1 to ``longest`` ASCII letters, digits, '-' and '_' (string tests, not re: the
    Stop hook checks names on every event, and importing re would cost it more)."""
    return isinstance(text, str) and 0 < len(text) <= longest and _ID_CHARS.issuperset(text)


def is_loop_name(name: object) -> bool:
    """A loop's name: 1-64 letters, digits, '-' or '_', starting with a letter or digit."""
    return is_id(name, 64) and name[0] not in "-_"


def project_dir(cwd: str | os.PathLike | None = None) -> Path:
    """``$CLAUDE_PROJECT_DIR`` (set for hooks), else ``$LOOPWRIGHT_PROJECT_DIR``, else the
    nearest directory above ``cwd`` that already holds loop state (so a command run in a
    subdirectory finds the loop its session started), else the git top level, else ``cwd``."""
    env = os.environ.get("CLAUDE_PROJECT_DIR") or os.environ.get("LOOPWRIGHT_PROJECT_DIR")
    if env:
        return Path(env)
    start = Path(cwd) if cwd else Path.cwd()
    start = start.absolute()
    git_top = None
    for candidate in (start, *start.parents):
        if (candidate / STATE_DIRNAME / "loops").is_dir():
            return candidate
        # .git is a directory, or a file in worktrees: no subprocess needed.
        if (candidate / ".git").exists():
            git_top = candidate
            break
    return git_top or start


CONFIG_FILENAME = ".loopwright.json"


def project_config(project: Path) -> tuple[dict, str | None]:
    """The project's ``.loopwright.json`` (committed settings such as ``tasks_file``
    and ``tasks.prompt_budget_chars``), and a problem line if it is unusable.
    A symlink, a special file or a file of the wrong shape is ignored, with the line."""
    from loopwright.core import jsoncodec
    from loopwright.core.schema import PROJECT_CONFIG, SchemaError

    path = Path(project) / CONFIG_FILENAME
    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"{CONFIG_FILENAME} cannot be read ({exc.strerror}: a symlink?); its settings are ignored"
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}, f"{CONFIG_FILENAME} is not a regular file; its settings are ignored"
        data = os.read(fd, 1024 * 1024 + 1)
    finally:
        os.close(fd)
    try:
        if len(data) > 1024 * 1024:
            raise ValueError("larger than 1 MiB")
        value = jsoncodec.loads(data)
    except ValueError as exc:
        return {}, f"{CONFIG_FILENAME} is not valid JSON ({exc}); its settings are ignored until it is fixed"
    if not isinstance(value, dict):
        return {}, f"{CONFIG_FILENAME} must hold a JSON object; its settings are ignored"
    try:
        PROJECT_CONFIG.check(value, CONFIG_FILENAME)
    except SchemaError as exc:
        return {}, f"{exc}; its settings are ignored until it is fixed"
    return value, None


def contained(project: str | os.PathLike, value: str | os.PathLike, what: str) -> Path:
    """``value`` (relative to ``project``, or absolute) as a path inside the project,
    reached through real directories only. Raises UnsafePath otherwise."""
    from loopwright.core.errors import UnsafePath

    root = os.path.realpath(project)
    raw = Path(value).expanduser()
    full = Path(os.path.normpath(raw if raw.is_absolute() else Path(root) / raw))
    try:
        rel = full.relative_to(root)
    except ValueError:
        try:
            rel = full.relative_to(os.path.abspath(project))
        except ValueError:
            raise UnsafePath(
                f"{what} {value} is outside the project {project}; loopwright keeps every file it "
                "uses inside the project"
            ) from None
    if not rel.parts or rel.parts[0] == "..":
        raise UnsafePath(f"{what} {value} is outside the project {project}")
    walk = Path(root)
    for part in rel.parts:
        walk = walk / part
        if os.path.islink(walk):
            raise UnsafePath(
                f"{what} {value} goes through the symlink {walk}; loopwright does not follow symlinks"
            )
    return walk


def state_dir(cwd: str | os.PathLike | None = None) -> Path:
    override = os.environ.get("LOOPWRIGHT_STATE_DIR")
    if override:
        return Path(override)
    return project_dir(cwd) / STATE_DIRNAME


def has_active_loops(state: Path) -> bool:
    """True when any loop is marked active. Markers live in ``active/``."""
    try:
        with os.scandir(state / "active") as it:
            return any(True for _ in it)
    except (FileNotFoundError, NotADirectoryError):
        return False
