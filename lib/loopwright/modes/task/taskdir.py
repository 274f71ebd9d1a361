"""The TASK/ directory convention (ai-cli-task): module names and paths,
``.index.md`` frontmatter, the ``.target.md`` template, the root listing.

Module names are Unicode letters, digits, ``-`` and ``_`` (``[\\p{L}\\p{N}_-]+``);
a module's resolved path must lie under ``TASK/``, its directory must not be a
symlink, and it must exist (except for ``init``). Every rejection is a one-line
TaskDirError.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from loopwright.core.errors import UserError
from loopwright.state import store
from loopwright.state.lock import now_iso

TASK_ROOT = "TASK"
FIELDS = (
    "title",
    "status",
    "phase",
    "completed_steps",
    "created",
    "updated",
    "depends_on",
    "tags",
    "branch",
    "worktree",
)
GITIGNORE_LINES = (
    ".worktrees/",
    "TASK/**/.tmp-annotations.json",
    "TASK/**/.auto-signal",
    "TASK/**/.auto-stop",
)
SUBDIRS = (".analysis", ".test", ".bugfix", ".notes")

TARGET_TEMPLATE = """# Target: {title}

<!-- Describe what this task must achieve. Replace every comment below with real content;
     auto mode refuses to plan while this file holds only the template. -->

## Objective
<!-- What should be true when the task is done? -->

## Requirements
<!-- Concrete, testable requirements. -->

## Constraints
<!-- Limits: compatibility, performance, files not to touch, ... -->

## Acceptance Criteria
<!-- How the result will be checked. -->
"""


class TaskDirError(UserError):
    """A one-line, user-facing problem with a task module or its files."""


def valid_name(name: str) -> bool:
    """``[\\p{L}\\p{N}_-]+``: every character a Unicode letter or digit, '-' or '_'."""
    if not name:
        return False
    for ch in name:
        if ch in "-_":
            continue
        cat = unicodedata.category(ch)
        if not cat.startswith(("L", "N")):
            return False
    return True


def task_root(project: Path) -> Path:
    return Path(project) / TASK_ROOT


def module_dir(project: Path, name: str, *, must_exist: bool = True) -> Path:
    """The validated directory of module ``name`` in the main worktree."""
    if not valid_name(name):
        raise TaskDirError(
            f"invalid module name {name!r}: use letters, digits, '-' and '_' only"
            " (no '/', '.', spaces or '..')"
        )
    root = task_root(project)
    path = root / name
    if os.path.islink(root) or os.path.realpath(root) != os.path.join(os.path.realpath(project), TASK_ROOT):
        raise TaskDirError(
            f"{TASK_ROOT}/ is a symlink or leads outside the project; loopwright does not follow it"
        )
    real_root = os.path.realpath(root)
    if os.path.realpath(path) != os.path.join(real_root, name) or not os.path.realpath(path).startswith(
        real_root + os.sep
    ):
        raise TaskDirError(f"TASK/{name} resolves outside TASK/; refusing it")
    if path.is_symlink():
        raise TaskDirError(f"TASK/{name} is a symlink; task modules must be real directories")
    if must_exist and not path.is_dir():
        raise TaskDirError(f"no task module TASK/{name}; create it with `/loopwright:task init {name}`")
    return path


# --- .index.md frontmatter ------------------------------------------------------------------

_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$")


def _strip_comment(value: str) -> str:
    """Drop a trailing `# comment` that is outside quotes."""
    quote = None
    for i, ch in enumerate(value):
        if quote:
            if ch == "\\" and quote == '"':
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or value[i - 1].isspace()):
            return value[:i].rstrip()
    return value.strip()


def _scalar(raw: str):
    raw = raw.strip()
    if raw == "":
        return ""
    if raw.startswith('"'):
        try:
            return json.loads(raw)
        except ValueError:
            raise TaskDirError(f"bad quoted value {raw!r}") from None
    if raw.startswith("'") and raw.endswith("'") and len(raw) >= 2:
        return raw[1:-1].replace("''", "'")
    if raw.startswith("["):
        if not raw.endswith("]"):
            raise TaskDirError(f"unclosed list {raw!r}")
        inner = raw[1:-1].strip()
        if not inner:
            return []
        items, buf, quote = [], "", None
        for ch in inner:
            if quote:
                buf += ch
                if ch == quote:
                    quote = None
            elif ch in "\"'":
                quote = ch
                buf += ch
            elif ch == ",":
                items.append(_scalar(buf))
                buf = ""
            else:
                buf += ch
        items.append(_scalar(buf))
        return items
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    if raw in ("null", "~"):
        return None
    return raw


@dataclass
class Index:
    meta: dict = field(default_factory=dict)
    body: str = ""


def parse_index(text: str, where: str = ".index.md") -> Index:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise TaskDirError(f"{where} has no YAML frontmatter (it must start with ---)")
    meta: dict = {}
    end = None
    current_list: str | None = None
    for i, line in enumerate(lines[1:], 2):
        if line.strip() == "---":
            end = i
            break
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if current_list and line.lstrip().startswith("- "):
            meta[current_list].append(_scalar(_strip_comment(line.lstrip()[2:])))
            continue
        m = _KEY.match(line)
        if not m:
            raise TaskDirError(f"{where}:{i}: cannot read {line.strip()!r} (expected key: value)")
        key, raw = m.group(1), _strip_comment(m.group(2))
        try:
            value = _scalar(raw)
        except TaskDirError as exc:
            raise TaskDirError(f"{where}:{i}: {exc}") from None
        if raw == "" and key in ("depends_on", "tags"):
            value, current_list = [], key
        else:
            current_list = None
        meta[key] = value
    if end is None:
        raise TaskDirError(f"{where}: the frontmatter is not closed with ---")
    body = "\n".join(lines[end:]) + ("\n" if text.endswith("\n") and end < len(lines) else "")
    _check_meta(meta, where)
    return Index(meta, body)


def _check_meta(meta: dict, where: str) -> None:
    from loopwright.modes.task.lifecycle import STATUSES

    if meta.get("status") not in STATUSES:
        raise TaskDirError(f"{where}: status {meta.get('status')!r} is not one of {', '.join(STATUSES)}")
    if not isinstance(meta.get("completed_steps", 0), int):
        raise TaskDirError(f"{where}: completed_steps must be a whole number")
    for key in ("depends_on", "tags"):
        if not isinstance(meta.get(key, []), list):
            raise TaskDirError(f"{where}: {key} must be a list")


def _yaml(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None:
        return '""'
    return json.dumps(str(value), ensure_ascii=False)


def render_index(index: Index) -> str:
    lines = ["---"]
    for key in FIELDS:
        value = index.meta.get(
            key, [] if key in ("depends_on", "tags") else 0 if key == "completed_steps" else ""
        )
        if key in ("status", "created", "updated") and value:
            lines.append(f"{key}: {value}")
        else:
            lines.append(f"{key}: {_yaml(value)}")
    for key, value in index.meta.items():  # keep fields other tools added
        if key not in FIELDS:
            lines.append(f"{key}: {_yaml(value)}")
    lines.append("---")
    body = index.body.lstrip("\n")
    return "\n".join(lines) + "\n" + (body if body else "")


def read_index(mdir: Path) -> Index:
    path = Path(mdir) / ".index.md"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskDirError(f"{path.parent.name}: .index.md is missing") from None
    return parse_index(text, f"TASK/{path.parent.name}/.index.md")


def write_index(mdir: Path, index: Index) -> None:
    index.meta["updated"] = now_iso()
    store.write_text(Path(mdir) / ".index.md", render_index(index))


def new_index(name: str, title: str, tags: list[str], worktree: bool) -> Index:
    stamp = now_iso()
    return Index(
        {
            "title": title or name,
            "status": "draft",
            "phase": "",
            "completed_steps": 0,
            "created": stamp,
            "updated": stamp,
            "depends_on": [],
            "tags": tags,
            "branch": f"task/{name}",
            "worktree": f".worktrees/task-{name}" if worktree else "",
        },
        f"\n# {title or name}\n",
    )


def target_has_content(mdir: Path) -> bool:
    """Whether .target.md says more than the template's own text."""
    try:
        text = (Path(mdir) / ".target.md").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return bool(lines)


ROOT_INDEX = f"{TASK_ROOT}/.index.md"  # the root listing, relative to a checkout


def update_root_index(project: Path) -> None:
    """TASK/.index.md: one row per module, with its title and status.

    A directory without ``.index.md`` is not a module and gets no row: in the main
    checkout it holds only the transient signal files of a module that works in its
    own worktree. The listing is derived from the modules, never edited by hand, so
    a merge that conflicts on it is resolved by writing it again (ops/merge.py).
    """
    root = task_root(project)
    rows = []
    dirs = (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and not p.is_symlink())
    for d in sorted(dirs):
        if not (d / ".index.md").exists():
            continue
        try:
            meta = read_index(d).meta
            rows.append(
                f"| [{d.name}]({d.name}/.index.md) | {meta.get('title', '')} | {meta.get('status')} |"
            )
        except TaskDirError:
            rows.append(f"| {d.name} | (unreadable .index.md) | ? |")
    text = "# Task modules\n\n| module | title | status |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    store.write_text(root / ".index.md", text)


GITIGNORE_HEADER = "# ai-cli-task ephemeral files (loopwright)"


def ensure_gitignore(project: Path) -> bool:
    """Add the ephemeral TASK/ files to the project's .gitignore; True if it changed."""
    path = Path(project) / ".gitignore"
    existing = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    missing = [ln for ln in GITIGNORE_LINES if ln not in existing]
    if not missing:
        return False
    text = "\n".join(existing + (["", GITIGNORE_HEADER] if existing else [GITIGNORE_HEADER]) + missing) + "\n"
    store.write_text(path, text)
    return True


def gitignore_change_is_ours(base: str | None, theirs: str | None) -> bool:
    """Whether a branch changed .gitignore (from ``base`` to ``theirs``) only by what
    ``ensure_gitignore`` adds: it removed no line and added only ours."""
    if theirs is None:
        return False
    before, after = set((base or "").splitlines()), set(theirs.splitlines())
    return not (before - after) and (after - before) <= {"", GITIGNORE_HEADER, *GITIGNORE_LINES}
