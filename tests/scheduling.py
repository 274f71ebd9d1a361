"""The order tests start in: the long ones first. pytest-xdist hands tests to its workers in
collection order, so a long test collected last would run alone at the end while the other
workers sit idle; started first, the short tests fill the gaps around it. Slow tests (the
``slow`` mark) go first, then the end-to-end ones (the ``e2e`` mark or tests/e2e/), then the
rest; each group keeps its collection order, the same in every worker (xdist requires it).
Registered by tests/conftest.py."""

from __future__ import annotations

import pytest


def rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow"):
        return 0
    if item.get_closest_marker("e2e") or "e2e" in item.path.parent.name:
        return 1
    return 2


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=rank)  # a stable sort: each group keeps its order
