"""Which of the package's modules each module needs before its first line runs: read from the
sources (the imports at module level, in class bodies and in top-level ``if``/``try`` blocks,
never those inside functions), with each module's parent packages.

The code archive (state/codearchive.py) stores, for every module, the order in which all it
needs is loaded, so that a hook can load a module's whole tree at once instead of asking
Python's import system for each module in turn. Cycles are refused by tests/core/test_layers.py;
here a cycle only stops the walk where it closes.
"""

from __future__ import annotations

import ast


def _top_level(body: list) -> list:
    """The import statements that run when the module runs."""
    found = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.ClassDef):
            found += _top_level(node.body)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for part in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, part, []) or []:
                    found += _top_level(child.body if isinstance(child, ast.ExceptHandler) else [child])
    return found


def _named(node, known: set) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif node.level == 0 and node.module:
        names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    else:
        return []
    out = []
    for name in names:
        parts = name.split(".")
        out += [".".join(parts[: i + 1]) for i in range(len(parts))]
    return [n for n in out if n in known]


def direct(name: str, source: bytes, known: set) -> list[str]:
    """The package's modules ``name`` imports as it runs, and its parent packages."""
    parts = name.split(".")
    needs = [".".join(parts[:i]) for i in range(1, len(parts))]
    for node in _top_level(ast.parse(source).body):
        needs += _named(node, known)
    seen, out = {name}, []
    for n in needs:
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


def load_orders(graph: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    """For each module, every module it needs, each after what it needs in turn (itself
    excluded): the order Python's own imports would finish them in."""
    orders = {}
    for name in graph:
        order, done, stack = [], set(), [(name, iter(graph[name]))]
        visiting = {name}
        while stack:
            node, deps = stack[-1]
            for dep in deps:
                if dep not in done and dep not in visiting and dep in graph:
                    visiting.add(dep)
                    stack.append((dep, iter(graph[dep])))
                    break
            else:
                stack.pop()
                visiting.discard(node)
                done.add(node)
                if node != name:
                    order.append(node)
        orders[name] = tuple(order)
    return orders
