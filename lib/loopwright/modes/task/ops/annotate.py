"""``lifecycle annotate``: apply the annotation panel's ``.tmp-annotations.json`` (insert,
delete, replace, comment) to a plan file, then delete it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from loopwright.modes.task import lifecycle
from loopwright.modes.task.ops.taskmodule import TaskError, index_of, locate
from loopwright.state import store

ANNOTATION_KINDS = {
    "Insert Annotations": 3,
    "Delete Annotations": 3,
    "Replace Annotations": 4,
    "Comment Annotations": 4,
}
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
            if (
                not isinstance(item, list)
                or len(item) != ANNOTATION_KINDS[key]
                or not all(isinstance(x, str) for x in item)
            ):
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
    if index_of(mod).meta["status"] in lifecycle.TERMINAL:
        raise TaskError(f"TASK/{name} is {index_of(mod).meta['status']}; annotations are rejected")
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
    return {
        "module": name,
        "file": plan_file,
        "applied": [{"kind": k.split()[0].lower(), "line": ln} for _, _, _, k, ln in edits],
    }
