"""The ai-cli-task sub-commands' deterministic parts: init, the recorded status
changes of plan/check/exec, merge, report, cancel, annotations, status.

Each operation validates the module (taskdir), checks the state × command matrix
(lifecycle), writes ``.index.md`` atomically, keeps a small system log in
``.lifecycle.json``, and makes its state commit with the ai-cli-task convention
(gitops). Errors are TaskError with one line for the user.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import gitops, lifecycle, signals, store, taskdir
from .errors import UserError
from .lock import now_iso

MAX_MERGE_ATTEMPTS = 3


class TaskError(UserError):
    """A one-line, user-facing refusal; nothing was changed."""


@dataclass
class Module:
    """Where a module lives: its main-worktree directory (signals), the directory
    holding its state (the task worktree's copy in worktree mode), and the git
    working tree its commits go to."""

    project: Path
    name: str
    main_dir: Path
    state_dir: Path
    workdir: Path

    @property
    def worktree(self) -> Path:
        return self.project / ".worktrees" / f"task-{self.name}"


def locate(project: Path, name: str, *, must_exist: bool = True) -> Module:
    project = Path(project).absolute()
    try:
        main = taskdir.module_dir(project, name, must_exist=False)
    except taskdir.TaskDirError as exc:
        raise TaskError(str(exc)) from None
    wt = project / ".worktrees" / f"task-{name}"
    wt_state = wt / taskdir.TASK_ROOT / name
    if (wt_state / ".index.md").exists():
        if wt_state.is_symlink():
            raise TaskError(f"{wt_state} is a symlink; task modules must be real directories")
        return Module(project, name, main, wt_state, wt)
    if must_exist and not (main / ".index.md").exists():
        if main.is_dir():
            raise TaskError(f"TASK/{name} has no .index.md; it is not a task module")
        raise TaskError(f"no task module TASK/{name}; create it with `/loopwright:task init {name}`")
    return Module(project, name, main, main, project)


def _log(mod: Module) -> dict:
    path = mod.state_dir / ".lifecycle.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("history", [])
    return data


def _save_log(mod: Module, data: dict) -> None:
    store.write_json(mod.state_dir / ".lifecycle.json", data)


def _read(mod: Module) -> taskdir.Index:
    try:
        return taskdir.read_index(mod.state_dir)
    except taskdir.TaskDirError as exc:
        raise TaskError(str(exc)) from None


def _dependency_problems(mod: Module, index: taskdir.Index) -> list[str]:
    problems = []
    for dep in index.meta.get("depends_on") or []:
        try:
            dmod = locate(mod.project, str(dep))
            status = taskdir.read_index(dmod.state_dir).meta.get("status")
        except (TaskError, taskdir.TaskDirError):
            status = "missing"
        if status != "complete":
            problems.append(f"{dep} ({status})")
    return problems


def _commit(mod: Module, kind: str, description: str, paths: list[Path] | None = None) -> str | None:
    if not gitops.is_repo(mod.workdir):
        return None
    rel = None if paths is None else [str(p.relative_to(mod.workdir)) for p in paths]
    return gitops.commit_paths(mod.workdir, mod.name, kind, description, rel)


def _task_paths(mod: Module) -> list[Path]:
    root = mod.workdir / taskdir.TASK_ROOT
    out = [mod.state_dir, root / ".index.md"]
    gi = mod.workdir / ".gitignore"
    if gi.exists():
        out.append(gi)
    return out


def apply(project: Path, name: str, command: str, *, checkpoint: str | None = None, result: str | None = None,
          completed_steps: int | None = None, description: str | None = None, commit_kind: str | None = None) -> dict:
    """Validate and record one status change; returns what happened."""
    mod = locate(project, name)
    index = _read(mod)
    status, phase = index.meta["status"], index.meta.get("phase") or ""
    if command == "cancel" and status == "cancelled":
        return {"module": name, "from": status, "to": status, "phase": phase, "commit": None, "noop": True}
    try:
        change = lifecycle.transition(status, phase, command, checkpoint, result)
    except lifecycle.LifecycleError as exc:
        raise TaskError(f"TASK/{name}: {exc}") from None
    if command in ("exec", "merge") and change.status != "blocked":
        blocking = _dependency_problems(mod, index)
        if blocking:
            raise TaskError(f"TASK/{name}: {command} needs its dependencies complete first; not complete: {', '.join(blocking)}")
    index.meta["status"], index.meta["phase"] = change.status, change.phase
    if completed_steps is not None:
        if completed_steps < 0:
            raise TaskError("--completed-steps must be 0 or more")
        index.meta["completed_steps"] = completed_steps
    log = _log(mod)
    entry = {"at": now_iso(), "command": lifecycle.command_key(command, checkpoint), "result": result,
             "from": status, "to": change.status, "phase": change.phase}
    log["history"].append(entry)
    if command == "check":
        log["last_check"] = {"checkpoint": checkpoint, "result": result, "at": entry["at"], "seq": len(log["history"])}
    if command == "exec":
        log["last_exec_seq"] = len(log["history"])
    taskdir.write_index(mod.state_dir, index)
    _save_log(mod, log)
    taskdir.update_root_index(mod.workdir)
    if description is None:
        arrow = f" → {change.status}" if change.changed else ""
        description = {
            "plan": "annotations processed" if result == "(annotations)" else "generate implementation plan",
            "check": f"{checkpoint} {result}{arrow}",
            "exec": {None: "execution started", "(start)": "execution started", "(done)": "all steps done",
                     "(mid-exec)": "stopped for a mid-exec check", "(blocked)": "blocked"}.get(
                result, f"step {result[6:-1]} done" if result and result.startswith("(step-") else str(result)) + arrow,
            "report": "generate completion report",
            "cancel": "user cancelled",
        }.get(command, f"{command} {result or ''}".strip())
    sha = _commit(mod, commit_kind or command, description, _task_paths(mod))
    out = {"module": name, "from": status, "to": change.status, "phase": change.phase, "commit": sha}
    if command == "check":
        blocking = _dependency_problems(mod, index)
        if blocking:  # check flags what exec and merge will refuse
            out["warning"] = f"dependencies not complete: {', '.join(blocking)}; exec and merge will refuse until they are"
    return out


# --- init -------------------------------------------------------------------------------------


def init(project: Path, name: str, title: str = "", tags: list[str] | None = None, worktree: bool = False) -> dict:
    project = Path(project).absolute()
    try:
        main = taskdir.module_dir(project, name, must_exist=False)
    except taskdir.TaskDirError as exc:
        raise TaskError(str(exc)) from None
    if main.exists() or (project / ".worktrees" / f"task-{name}" / taskdir.TASK_ROOT / name).exists():
        raise TaskError(f"TASK/{name} already exists; pick another name or cancel the old module")
    if not gitops.is_repo(project):
        raise TaskError("task modules need git: this project is not a git repository (run `git init` and commit once)")
    if not gitops.has_commits(project):
        raise TaskError("the repository has no commit yet; commit once so the task branch has a base to start from")
    base = gitops.current_branch(project)
    if not base or base == "HEAD":
        raise TaskError("HEAD is detached; check out the branch the task should start from")
    branch = f"task/{name}"
    if gitops.branch_exists(project, branch):
        raise TaskError(f"branch {branch} already exists; delete it or pick another module name")
    if worktree:
        wt = project / ".worktrees" / f"task-{name}"
        gitops.run(project, "worktree", "add", "-q", str(wt), "-b", branch)
        workdir = wt
        main.mkdir(parents=True, exist_ok=True)  # signals always land in the main worktree
        _exclude_locally(project)
    else:
        gitops.run(project, "checkout", "-q", "-b", branch)
        workdir = project
    mdir = workdir / taskdir.TASK_ROOT / name
    mdir.mkdir(parents=True, exist_ok=True)
    for sub in taskdir.SUBDIRS:
        (mdir / sub).mkdir(exist_ok=True)
        (mdir / sub / ".gitkeep").touch()
    index = taskdir.new_index(name, title, tags or [], worktree)
    store.write_text(mdir / ".index.md", taskdir.render_index(index))
    store.write_text(mdir / ".target.md", taskdir.TARGET_TEMPLATE.format(title=title or name))
    mod = Module(project, name, main, mdir, workdir)
    _save_log(mod, {"base_branch": base, "created": now_iso(), "history": [{"at": now_iso(), "command": "init", "to": "draft"}]})
    taskdir.ensure_gitignore(workdir)
    taskdir.update_root_index(workdir)
    sha = _commit(mod, "init", "initialize task module", _task_paths(mod))
    return {"module": name, "branch": branch, "base_branch": base, "worktree": str(workdir) if worktree else "",
            "dir": str(mdir), "commit": sha}


def _exclude_locally(project: Path) -> None:
    """The main checkout stays on its branch in worktree mode: keep the worktrees and
    the transient signal files out of its status through .git/info/exclude, not a commit."""
    git_dir = Path(gitops.run(project, "rev-parse", "--absolute-git-dir").stdout.strip())
    exclude = git_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    existing = exclude.read_text().splitlines() if exclude.exists() else []
    missing = [ln for ln in taskdir.GITIGNORE_LINES if ln not in existing]
    if missing:
        with open(exclude, "a", encoding="utf-8") as fh:
            fh.write("\n".join(missing) + "\n")


# --- exec commits --------------------------------------------------------------------------------


def commit_work(project: Path, name: str, kind: str, description: str) -> str | None:
    if kind not in ("feat", "fix", "refactor"):
        raise TaskError("--type must be feat, fix or refactor (state commits are made by the lifecycle commands)")
    if not description.strip():
        raise TaskError("--message must say what changed")
    mod = locate(project, name)
    if _read(mod).meta["status"] != "executing":
        raise TaskError(f"TASK/{name} is not executing; code commits belong to the exec phase")
    return _commit(mod, kind, description.strip())


# --- merge -----------------------------------------------------------------------------------------


def _merge_state_path(mod: Module) -> Path:
    git_dir = gitops.run(mod.project, "rev-parse", "--absolute-git-dir").stdout.strip()
    return Path(git_dir) / f"loopwright-merge-{mod.name}.json"


def _back_to_task_branch(mod: Module) -> None:
    """An undone merge leaves the main checkout on the task branch again, where the
    module's files are, so the task can be inspected and merged again."""
    if mod.workdir == mod.project and gitops.branch_exists(mod.project, f"task/{mod.name}"):
        gitops.run(mod.project, "checkout", "-q", f"task/{mod.name}")


def _attempts(mod: Module) -> dict:
    try:
        return json.loads(_merge_state_path(mod).read_text())
    except (OSError, ValueError):
        return {"attempts": 0}


def merge(project: Path, name: str, *, verify: str | None = None, cont: bool = False, abort: bool = False) -> dict:
    from . import verify as checks

    mod = locate(project, name)
    index = _read(mod)
    log = _log(mod)
    base = log.get("base_branch")
    state = _attempts(mod)
    if abort:
        if gitops.merge_in_progress(mod.project):
            gitops.run(mod.project, "merge", "--abort")
        _merge_state_path(mod).unlink(missing_ok=True)
        _back_to_task_branch(mod)
        return {"module": name, "result": "conflict", "aborted": True}
    if not cont:
        status = index.meta["status"]
        if not lifecycle.allowed(status, "merge"):
            raise TaskError(f"TASK/{name}: merge is not allowed while the task is {status} (it needs executing with a post-exec ACCEPT)")
        last = log.get("last_check") or {}
        if last.get("checkpoint") != "post-exec" or last.get("result") != "ACCEPT" or log.get("last_exec_seq", 0) > last.get("seq", 0):
            raise TaskError(f"TASK/{name}: merge needs an ACCEPT from `check --checkpoint post-exec` after the last exec")
        blocking = _dependency_problems(mod, index)
        if blocking:
            raise TaskError(f"TASK/{name}: merge needs its dependencies complete first; not complete: {', '.join(blocking)}")
        if not base:
            raise TaskError(f"TASK/{name}: .lifecycle.json does not name the base branch to merge into")
        if gitops.run(mod.workdir, "status", "--porcelain", check=False).stdout.strip():
            raise TaskError("the task branch has uncommitted changes; commit them (`loopwright lifecycle commit`) first")
        if mod.workdir == mod.project:
            gitops.run(mod.project, "checkout", "-q", base)
        elif gitops.current_branch(mod.project) != base:
            gitops.run(mod.project, "checkout", "-q", base)
        proc = gitops.run(mod.project, "merge", "--no-ff", f"task/{name}", "-m",
                          gitops.message(name, "merge", "merge completed task"), check=False)
        if proc.returncode != 0:
            files = gitops.conflicted_files(mod.project)
            if not files:
                raise TaskError(f"git merge failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
            state["attempts"] = state.get("attempts", 0)
            store.write_json(_merge_state_path(mod), state)
            return {"module": name, "result": "conflict", "conflicts": files, "attempts": state["attempts"],
                    "next": f"resolve the conflicts, `git add` the files, then `loopwright lifecycle merge {name} --continue`"}
    else:
        if not gitops.merge_in_progress(mod.project):
            raise TaskError(f"no merge of task/{name} is in progress; run `loopwright lifecycle merge {name}`")
        left = gitops.conflicted_files(mod.project)
        if left:
            raise TaskError(f"still conflicted: {', '.join(left)}; resolve and `git add` them first")
        gitops.run(mod.project, "commit", "-q", "--no-verify", "-m", gitops.message(name, "merge", "resolve merge conflict"))
    if verify:
        result = checks.run(verify, mod.project)
        if not checks.passed(result):
            state["attempts"] = state.get("attempts", 0) + 1
            gitops.run(mod.project, "reset", "-q", "--hard", "HEAD~1")
            _back_to_task_branch(mod)
            if state["attempts"] >= MAX_MERGE_ATTEMPTS:
                _merge_state_path(mod).unlink(missing_ok=True)
                return {"module": name, "result": "conflict", "gave_up": True, "attempts": state["attempts"],
                        "output_tail": result["output_tail"][-1500:],
                        "next": "the task stays executing; resolve by hand, then run merge again"}
            store.write_json(_merge_state_path(mod), state)
            return {"module": name, "result": "conflict", "attempts": state["attempts"], "output_tail": result["output_tail"][-1500:],
                    "next": f"the merge was undone because `{verify}` failed; fix it on the task branch and merge again "
                            f"({MAX_MERGE_ATTEMPTS - state['attempts']} attempt(s) left)"}
    # Merged and verified: the task is complete on the base branch.
    _merge_state_path(mod).unlink(missing_ok=True)
    done = Module(mod.project, name, mod.main_dir, mod.main_dir, mod.project)
    if not (done.state_dir / ".index.md").exists():
        raise TaskError(f"after the merge TASK/{name}/.index.md is missing on {base}")
    index = taskdir.read_index(done.state_dir)
    change = lifecycle.transition(index.meta["status"], index.meta.get("phase") or "", "merge", result="success")
    index.meta["status"], index.meta["phase"] = change.status, change.phase
    taskdir.write_index(done.state_dir, index)
    dlog = _log(done)
    dlog["history"].append({"at": now_iso(), "command": "merge", "result": "success", "from": "executing", "to": "complete"})
    _save_log(done, dlog)
    taskdir.update_root_index(done.project)
    sha = _commit(done, "merge", "task completed", _task_paths(done))
    cleaned = []
    if mod.workdir != mod.project:
        gitops.run(mod.project, "worktree", "remove", "--force", str(mod.workdir))
        cleaned.append(f"worktree {mod.workdir.relative_to(mod.project)}")
    if gitops.run(mod.project, "branch", "-d", f"task/{name}", check=False).returncode == 0:
        cleaned.append(f"branch task/{name}")
    return {"module": name, "result": "success", "base_branch": base, "commit": sha, "cleaned": cleaned}


# --- report -----------------------------------------------------------------------------------------


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*") if p.is_file() and p.name != ".gitkeep") if d.is_dir() else []


def _excerpt(path: Path, lines: int = 12) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return "\n".join(text[:lines]) + ("\n…" if len(text) > lines else "")


def report(project: Path, name: str, fmt: str = "full") -> dict:
    if fmt not in ("full", "summary"):
        raise TaskError("--format must be full or summary")
    mod = locate(project, name)
    index = _read(mod)
    meta = index.meta
    d = mod.state_dir
    commits = gitops.history(mod.project, name) if gitops.is_repo(mod.project) else []
    lines = [f"# Task Report: {meta.get('title') or name}", "",
             f"**Status**: {meta['status']} | **Phase**: {meta.get('phase') or '-'} | **Completed steps**: {meta.get('completed_steps', 0)}"
             f" | **Branch**: {meta.get('branch')} | **Created**: {meta.get('created')} | **Updated**: {meta.get('updated')}", ""]
    summary = d / ".summary.md"
    lines += ["## Summary", "", _excerpt(summary, 40) if summary.exists() else f"The task is {meta['status']}.", ""]
    if fmt == "full":
        target = d / ".target.md"
        lines += ["## Objective", "", _excerpt(target, 40) if target.exists() else "(no .target.md)", ""]
        plans = [p for p in _files(d) if not p.name.startswith(".") and p.suffix == ".md"]
        lines += ["## Plan", ""] + ([f"- `{p.name}`: " + (next((ln.lstrip('# ').strip() for ln in p.read_text(errors='replace').splitlines() if ln.strip()), '')) for p in plans] or ["(no plan files)"]) + [""]
    lines += ["## Changes", ""]
    if commits:
        lines += ["| commit | date | type | description |", "|---|---|---|---|"]
        lines += [f"| {c['short']} | {c['date'][:10]} | {c['type']} | {c['description']} |" for c in commits]
    else:
        lines.append("(no ai-cli-task commits found)")
    lines.append("")
    if fmt == "full":
        lines += ["## Verification", ""]
        lines += [f"- `.test/{p.name}`" for p in _files(d / ".test")] or ["(no test records)"]
        lines += [f"- `.analysis/{p.name}`" for p in _files(d / ".analysis")]
        lines += ["", "## Issues", ""] + ([f"- `.bugfix/{p.name}`: " + _excerpt(p, 1) for p in _files(d / ".bugfix")] or ["(none recorded)"])
        deps = meta.get("depends_on") or []
        lines += ["", "## Dependencies", ""]
        for dep in deps:
            try:
                st = taskdir.read_index(locate(mod.project, str(dep)).state_dir).meta.get("status")
            except (TaskError, taskdir.TaskDirError):
                st = "missing"
            lines.append(f"- {dep}: {st}")
        if not deps:
            lines.append("(none)")
        notes = [p for p in _files(d / ".notes") if p.stem.endswith("-exec")]
        lines += ["", "## Lessons", ""] + ([f"- `.notes/{p.name}`" for p in notes] or ["(see .summary.md)"])
    lines.append("")
    store.write_text(d / ".report.md", "\n".join(lines))
    result = apply(project, name, "report")
    return {"module": name, "report": str(d / ".report.md"), "commits": len(commits), "commit": result["commit"]}


# --- cancel ------------------------------------------------------------------------------------------


def cancel(project: Path, name: str, reason: str = "user cancelled", cleanup: bool = False) -> dict:
    mod = locate(project, name)
    index = _read(mod)
    if index.meta["status"] == "cancelled":
        return {"module": name, "noop": True, "message": f"TASK/{name} is already cancelled; nothing changed"}
    snapshot = None
    if gitops.is_repo(mod.workdir) and gitops.run(mod.workdir, "status", "--porcelain", check=False).stdout.strip():
        snapshot = gitops.commit_paths(mod.workdir, name, "cancel", "snapshot uncommitted changes")
    # An auto loop on this module stops between steps.
    if mod.main_dir.is_dir():
        signals.write_stop(mod.main_dir, "user_stop")
    res = apply(project, name, "cancel", description=reason or "user cancelled")
    cleaned = []
    if cleanup and gitops.is_repo(mod.project):
        base = _log(mod).get("base_branch")
        if mod.workdir != mod.project:
            gitops.run(mod.project, "worktree", "remove", "--force", str(mod.workdir))
            cleaned.append("worktree")
        elif base and gitops.current_branch(mod.project) == f"task/{name}":
            gitops.run(mod.project, "checkout", "-q", base)
        if gitops.run(mod.project, "branch", "-D", f"task/{name}", check=False).returncode == 0:
            cleaned.append(f"branch task/{name}")
    return {**res, "snapshot": snapshot, "cleaned": cleaned}


# --- status ------------------------------------------------------------------------------------------


def status(project: Path, name: str) -> dict:
    mod = locate(project, name)
    index = _read(mod)
    meta = index.meta
    allowed = [c for c in lifecycle.COMMANDS if lifecycle.allowed(meta["status"], c)]
    signal = None
    sig_path = mod.main_dir / ".auto-signal"
    if sig_path.exists():
        try:
            signal = json.loads(sig_path.read_text())
        except ValueError:
            signal = {"invalid": True}
    return {"module": name, "title": meta.get("title"), "status": meta["status"], "phase": meta.get("phase") or "",
            "completed_steps": meta.get("completed_steps", 0), "branch": meta.get("branch"), "worktree": meta.get("worktree"),
            "depends_on": meta.get("depends_on") or [], "blocking_dependencies": _dependency_problems(mod, index),
            "allowed_commands": allowed, "last_check": _log(mod).get("last_check"), "auto_signal": signal,
            "auto_stop": (mod.main_dir / ".auto-stop").exists(), "dir": str(mod.state_dir)}


# --- annotations ----------------------------------------------------------------------------------------

ANNOTATION_KINDS = {"Insert Annotations": 3, "Delete Annotations": 3, "Replace Annotations": 4, "Comment Annotations": 4}
_LINE = re.compile(r"^Line(\d+):(?:\.\.\.)?(.*)$", re.DOTALL)


def _context(text: str) -> str:
    return text.replace("↵", "\n")


def load_annotations(path: Path) -> list[tuple[str, list[str]]]:
    """The annotations in file order per kind, validated against the four-array schema."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskError(f"{path.name} not found; the annotation panel writes it") from None
    except ValueError as exc:
        raise TaskError(f"{path.name} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TaskError(f"{path.name} must hold an object with the four annotation arrays")
    out = []
    for key, value in data.items():
        if key not in ANNOTATION_KINDS:
            raise TaskError(f"{path.name}: unknown key {key!r}; expected {', '.join(ANNOTATION_KINDS)}")
        if not isinstance(value, list):
            raise TaskError(f"{path.name}: {key} must be a list of string arrays")
        for i, item in enumerate(value):
            if not isinstance(item, list) or len(item) != ANNOTATION_KINDS[key] or not all(isinstance(x, str) for x in item):
                raise TaskError(f"{path.name}: {key}[{i}] must be {ANNOTATION_KINDS[key]} strings")
            if not _LINE.match(item[0]):
                raise TaskError(f"{path.name}: {key}[{i}] context must start with 'Line<N>:'")
            out.append((key, item))
    return out


def _locate(text: str, line_no: int, before: str, selected: str) -> int:
    """Offset in ``text`` where ``selected`` begins (or where an insertion goes)."""
    lines = text.split("\n")
    start_line = max(0, min(line_no - 1, len(lines) - 1))
    line_offset = sum(len(ln) + 1 for ln in lines[:start_line])
    before = before.rstrip(".") if before.endswith("...") else before
    candidates = []
    probe = before + selected
    idx = text.find(probe, max(0, line_offset - len(before) - 200))
    if probe and idx >= 0:
        candidates.append(idx + len(before))
    if selected:
        pos = text.find(selected, line_offset)
        if pos >= 0:
            candidates.append(pos)
    elif before:
        pos = text.find(before, max(0, line_offset - len(before)))
        if pos >= 0:
            candidates.append(pos + len(before))
    if not candidates:
        raise TaskError(f"could not find the annotated text near line {line_no}: {selected[:40]!r}")
    return min(candidates, key=lambda c: abs(c - line_offset))


def annotate(project: Path, name: str, plan_file: str) -> dict:
    mod = locate(project, name)
    if _read(mod).meta["status"] in lifecycle.TERMINAL:
        raise TaskError(f"TASK/{name} is {_read(mod).meta['status']}; annotations are rejected")
    target = (mod.state_dir / plan_file).resolve()
    if target.parent != mod.state_dir.resolve() or target.name.startswith(".") or target.suffix != ".md":
        raise TaskError("the plan file must be a non-dot .md file directly in the module directory")
    if not target.exists():
        raise TaskError(f"no plan file {plan_file} in TASK/{name}")
    ann_path = mod.state_dir / ".tmp-annotations.json"
    items = load_annotations(ann_path)
    text = target.read_text(encoding="utf-8")
    edits = []
    for kind, item in items:
        m = _LINE.match(item[0])
        line_no, before = int(m.group(1)), _context(m.group(2))
        if kind == "Insert Annotations":
            pos = _locate(text, line_no, before, "")
            edits.append((pos, pos, _context(item[1]), kind, line_no))
        elif kind == "Delete Annotations":
            sel = _context(item[1])
            pos = _locate(text, line_no, before, sel)
            edits.append((pos, pos + len(sel), "", kind, line_no))
        elif kind == "Replace Annotations":
            sel = _context(item[1])
            pos = _locate(text, line_no, before, sel)
            edits.append((pos, pos + len(sel), _context(item[2]), kind, line_no))
        else:
            sel = _context(item[1])
            pos = _locate(text, line_no, before, sel)
            eol = text.find("\n", pos + len(sel))
            eol = len(text) if eol < 0 else eol
            edits.append((eol, eol, f"\n> 💬 {item[2].strip()}", kind, line_no))
    # Apply from the end so earlier offsets stay valid.
    for start, end, new, _, _ in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:start] + new + text[end:]
    store.write_text(target, text)
    ann_path.unlink()
    return {"module": name, "file": plan_file, "applied": [{"kind": k.split()[0].lower(), "line": ln} for _, _, _, k, ln in edits]}
