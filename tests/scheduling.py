"""The order tests start in: the long ones first. pytest-xdist hands tests to its workers in
collection order, so a long test collected last would run alone at the end while the other
workers sit idle; started first, the short tests fill the gaps around it. Slow tests (the
``slow`` mark) go first, then the end-to-end ones (the ``e2e`` mark, tests/e2e/, or the
``claude`` fixture), then the rest; each group keeps its collection order, the same in every
worker (xdist requires it). Registered by tests/conftest.py."""

from __future__ import annotations

import pytest


def rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow"):
        return 0
    if item.get_closest_marker("e2e") or item.path.parent.name == "e2e":
        return 1
    if "claude" in getattr(item, "fixturenames", ()):  # the real Claude Code CLI, outside tests/e2e
        return 1
    return 2


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=rank)  # a stable sort: each group keeps its order
