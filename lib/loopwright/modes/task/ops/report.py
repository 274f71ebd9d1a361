"""``lifecycle report``: write TASK/<name>/.report.md from the module's files and its
ai-cli-task commits, then record the report."""

from __future__ import annotations

from pathlib import Path

from loopwright.modes.task import gitops, taskdir
from loopwright.modes.task.ops.taskmodule import Module, TaskError, index_of, locate
from loopwright.modes.task.ops.transition import apply
from loopwright.state import store


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*") if p.is_file() and p.name != ".gitkeep") if d.is_dir() else []


def _excerpt(path: Path, lines: int = 12) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return "\n".join(text[:lines]) + ("\n…" if len(text) > lines else "")


def report(project: Path, name: str, fmt: str = "full") -> dict:
    if fmt not in ("full", "summary"):
        raise TaskError("--format must be full or summary")
    mod = locate(project, name)
    meta = index_of(mod).meta
    d = mod.state_dir
    commits = gitops.history(mod.project, name) if gitops.is_repo(mod.project) else []
    summary = d / ".summary.md"
    lines = [
        f"# Task Report: {meta.get('title') or name}",
        "",
        f"**Status**: {meta['status']} | **Phase**: {meta.get('phase') or '-'}"
        f" | **Completed steps**: {meta.get('completed_steps', 0)} | **Branch**: {meta.get('branch')}"
        f" | **Created**: {meta.get('created')} | **Updated**: {meta.get('updated')}",
        "",
        "## Summary",
        "",
        _excerpt(summary, 40) if summary.exists() else f"The task is {meta['status']}.",
        "",
    ]
    if fmt == "full":
        lines += _plan_sections(d)
    lines += _changes_section(commits)
    if fmt == "full":
        lines += _outcome_sections(mod, meta)
    lines.append("")
    store.write_text(d / ".report.md", "\n".join(lines))
    result = apply(project, name, "report")
    return {
        "module": name,
        "report": str(d / ".report.md"),
        "commits": len(commits),
        "commit": result["commit"],
    }


def _first_heading(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return next((ln.lstrip("# ").strip() for ln in lines if ln.strip()), "")


def _plan_sections(d: Path) -> list[str]:
    target = d / ".target.md"
    plans = [p for p in _files(d) if not p.name.startswith(".") and p.suffix == ".md"]
    return (
        ["## Objective", "", _excerpt(target, 40) if target.exists() else "(no .target.md)", ""]
        + ["## Plan", ""]
        + ([f"- `{p.name}`: {_first_heading(p)}" for p in plans] or ["(no plan files)"])
        + [""]
    )


def _changes_section(commits: list[dict]) -> list[str]:
    if not commits:
        return ["## Changes", "", "(no ai-cli-task commits found)", ""]
    rows = [f"| {c['short']} | {c['date'][:10]} | {c['type']} | {c['description']} |" for c in commits]
    return ["## Changes", "", "| commit | date | type | description |", "|---|---|---|---|", *rows, ""]


def _outcome_sections(mod: Module, meta: dict) -> list[str]:
    """Verification, issues, dependencies and lessons, from the module's state folders."""
    d = mod.state_dir
    lines = ["## Verification", ""]
    lines += [f"- `.test/{p.name}`" for p in _files(d / ".test")] or ["(no test records)"]
    lines += [f"- `.analysis/{p.name}`" for p in _files(d / ".analysis")]
    lines += ["", "## Issues", ""]
    lines += [f"- `.bugfix/{p.name}`: " + _excerpt(p, 1) for p in _files(d / ".bugfix")] or [
        "(none recorded)"
    ]
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
    return lines
