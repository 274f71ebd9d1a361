"""The package's folders are its layers: each imports only from layers below it, and
the pure core imports nothing that touches a file, a process or the network."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import LIB

PKG = LIB / "loopwright"
# Lowest first: a module may import from its own layer and those before it.
LAYERS = [
    "core",
    "state",
    "registry",
    "modes",
    "tick",
    "actions",
    "events",
    "runner",
    "fleet",
    "serve",
    "cli",
]
# What the pure core may import from the standard library.
# time: gmtime and strftime format a timestamp the engine was handed (as datetime did).
CORE_STDLIB = {"__future__", "_json", "dataclasses", "datetime", "json", "math", "re", "time", "typing"}


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "loopwright":
                found += [(node.lineno, f"loopwright.{a.name}") for a in node.names]
    return found


# A mode's own command and CLI group are shells: they sit with the CLI, at the top.
MODE_SHELLS = ("slash", "cli")


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "loopwright" or parts[1] not in LAYERS:
        return None
    if parts[1] == "modes" and len(parts) == 4 and parts[3] in MODE_SHELLS:
        return "cli"
    return parts[1]


def modules(layer: str) -> list[Path]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        dotted = ".".join(("loopwright", *path.relative_to(PKG).with_suffix("").parts))
        if layer_of(dotted) == layer:
            found.append(path)
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_imports_only_from_below(layer):
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    bad = [
        f"{path.relative_to(LIB)}:{line} imports {mod}"
        for path in modules(layer)
        for line, mod in imports_of(path)
        if layer_of(mod) is not None and layer_of(mod) not in allowed
    ]
    assert not bad, "\n".join(bad)


def test_the_core_is_pure():
    bad = []
    for path in modules("core"):
        for line, mod in imports_of(path):
            top = mod.split(".")[0]
            if top == "loopwright":
                if layer_of(mod) != "core":
                    bad.append(f"{path.relative_to(LIB)}:{line} imports {mod}")
            elif top not in CORE_STDLIB:
                bad.append(f"{path.relative_to(LIB)}:{line} imports {mod} (I/O or a dependency)")
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_violation(tmp_path):
    """The checker itself: a core module importing the disk layer is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom loopwright.state import store\n")
    assert [layer_of(m) for _, m in imports_of(bad)] == [None, "state"]


def test_no_module_lives_outside_a_layer():
    loose = {p.name for p in PKG.glob("*.py")} - {"__init__.py", "__main__.py"}
    assert not loose, f"modules outside the layer folders: {sorted(loose)}"


def test_no_function_is_over_60_lines():
    long = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(LIB)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "\n".join(long)


def _mentions_mode(node: ast.AST) -> bool:
    """Whether an expression reads something called mode (``x.mode``, ``d["mode"]``,
    ``d.get("mode")``, a variable ``mode``): the goal text is also keyed "prompt" and a
    registry entry's type is "task", so only comparisons about a mode count."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and "mode" in sub.id.lower():
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "mode":
            return True
        if isinstance(sub, ast.Constant) and sub.value == "mode":
            return True
    return False


def test_nothing_outside_modes_branches_on_a_mode():
    """The engine, hooks, actions and CLI look a mode up; they never import one's folder,
    compare a value with a mode's name or ask the registry for a mode by name."""
    from loopwright import modes

    names = set(modes.names())
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "modes":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            found = None
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loopwright.modes."):
                found = f"imports {node.module}"
            elif isinstance(node, ast.ImportFrom) and node.module == "loopwright.modes":
                found = next((f"imports {a.name}" for a in node.names if a.name in names), None)
            elif isinstance(node, ast.Compare) and _mentions_mode(node):
                consts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
                found = next((f"compares with {v!r}" for v in consts if v in names), None)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                args = [a.value for a in node.args if isinstance(a, ast.Constant)]
                if isinstance(owner, ast.Name) and owner.id == "modes" and any(a in names for a in args):
                    found = f"looks up {args}"
            if found:
                bad.append(f"{rel}:{node.lineno} {found}")
    assert not bad, "\n".join(bad)


def test_the_check_above_can_fail(tmp_path, monkeypatch):
    """A module that branches on a mode's name is caught (guards the scan itself)."""
    fake = tmp_path / "loopwright"
    (fake / "events").mkdir(parents=True)
    (fake / "events" / "bad.py").write_text('def f(loop):\n    return loop["mode"] == "task"\n')
    monkeypatch.setattr(__import__(__name__), "PKG", fake)
    with pytest.raises(AssertionError, match="compares with 'task'"):
        test_nothing_outside_modes_branches_on_a_mode()


def test_no_module_is_over_500_lines():
    """Rooms a newcomer can find: a module that grows past this is split by verb or phase."""
    big = [
        f"{path.relative_to(LIB)} ({n} lines)"
        for path in sorted(PKG.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > 500
    ]
    assert not big, "\n".join(big)


def _dotted(path: Path) -> str:
    parts = path.relative_to(PKG).with_suffix("").parts
    return ".".join(("loopwright", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    """Which loopwright module imports which, counting imports inside functions too
    (a lazy import still ties two modules together)."""
    known = {_dotted(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith("loopwright")
            ):
                names = [f"{node.module}.{a.name}" for a in node.names]
                names = [n if n in known else node.module for n in names]
            graph[module] |= {
                n for n in names if n in known and n != module and not module.startswith(n + ".")
            }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles: strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    # A package's __init__ importing its own modules is not a circle (they are skipped above).
    assert cycles(import_graph()) == []


def test_the_circle_check_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
