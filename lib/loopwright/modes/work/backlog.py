"""The backlog as work mode sees it, as pure functions: which items are workable, which
are skipped and why, dependency cycles, drift since the last pick, and acceptance
criteria too vague to check (sdd SPEC-0020's work-mode contract).

An item is a dict: ``id`` ("#12" or "task-3"), ``title``, ``body``, ``depends_on``
(ids), ``in_progress`` (why someone else has it, or None) and ``url``; a GitHub issue
also ``blocks`` (ids), ``open_deps`` (ids GitHub says are open: blockers and
sub-issues) and ``unread_deps`` (how many more GitHub counts that were not listed).
"""

from __future__ import annotations

import re

CRITERIA_RE = re.compile(r"^\s{0,3}#{1,6}\s*acceptance criteria\s*#*\s*$", re.IGNORECASE | re.MULTILINE)
HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s", re.MULTILINE)
MARKER_RE = re.compile(r"\b(TBD|TODO)\b")
DEPENDS_RE = re.compile(
    r"^\s*[-*]?\s*(depends on|blocked by|blocks)\s*:?\s*((?:#\d+[\s,]*(?:and\s+)?)+)",
    re.IGNORECASE | re.MULTILINE,
)
CLOSES_RE = re.compile(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#(\d+)", re.IGNORECASE)


def issue_links(body: str) -> tuple[list[str], list[str]]:
    """From an issue body: the issues it depends on, and those it blocks."""
    after: list[str] = []
    blocks: list[str] = []
    for m in DEPENDS_RE.finditer(body or ""):
        ids = [f"#{n}" for n in re.findall(r"#(\d+)", m.group(2))]
        (blocks if m.group(1).lower() == "blocks" else after).extend(ids)
    return after, blocks


def closes(text: str) -> list[str]:
    """Issues a pull request's title or body says it closes."""
    return [f"#{n}" for n in CLOSES_RE.findall(text or "")]


def edges(items: list[dict]) -> dict[str, set[str]]:
    """item -> the open items it waits for (``depends_on``, and ``Blocks:`` turned around)."""
    ids = {i["id"] for i in items}
    graph: dict[str, set[str]] = {i["id"]: set() for i in items}
    for item in items:
        for dep in item.get("depends_on") or []:
            if dep in ids and dep != item["id"]:
                graph[item["id"]].add(dep)
        for other in item.get("blocks") or []:
            if other in ids and other != item["id"]:
                graph[other].add(item["id"])
    return graph


def cycle(items: list[dict]) -> list[str] | None:
    """A dependency cycle among the open items, as the ids around it (first repeated last)."""
    graph = edges(items)
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node], key=order_key):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt, path)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph, key=order_key):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def describe_cycle(ids: list[str]) -> str:
    """``#50 ↔ #51`` for two, ``#1 → #2 → #3 → #1`` for more."""
    if len(ids) == 3 and ids[0] == ids[-1]:
        return f"{ids[0]} ↔ {ids[1]}"
    return " → ".join(ids)


def order_key(item_id: str) -> tuple:
    digits = "".join(c for c in item_id if c.isdigit())
    return (int(digits) if digits else 0, item_id)


def split(items: list[dict], skipped: list[str]) -> tuple[list[dict], list[tuple[str, str]]]:
    """The workable items in order, and (id, why) for each open item that is not."""
    graph = edges(items)
    workable, passed = [], []
    for item in sorted(items, key=lambda i: order_key(i["id"])):
        # GitHub's open blockers and sub-issues hold an item even when the backlog's filter leaves them out.
        waits = sorted(graph[item["id"]] | set(item.get("open_deps") or []), key=order_key)
        unread = int(item.get("unread_deps") or 0)
        if item["id"] in skipped:
            passed.append((item["id"], "skipped at a gate in this loop"))
        elif item.get("in_progress"):
            passed.append((item["id"], f"in progress ({item['in_progress']})"))
        elif waits or unread:
            passed.append((item["id"], f"waits for {_waiting(waits, unread)}"))
        else:
            workable.append(item)
    return workable, passed


def _waiting(waits: list[str], unread: int) -> str:
    """``#5, #7``; the open issues GitHub counts but the loop did not list this time, by number."""
    if not unread:
        return ", ".join(waits)
    more = f"{unread} open issue{'s' if unread != 1 else ''} linked on GitHub (blocked-by or sub-issues)"
    return ", ".join(waits + [more]) if waits else more


def drift(snapshot: list[str] | None, current: list[str], handled: list[str]) -> tuple[list[str], list[str]]:
    """Items added to and removed from the workable set since the last pick, leaving out
    what the loop itself took (its items leave the set as it works on them)."""
    if snapshot is None:
        return [], []
    before, now = set(snapshot), set(current)
    added = sorted(now - before, key=order_key)
    removed = sorted(before - now - set(handled), key=order_key)
    return added, removed


def ambiguous(item: dict, needs_section: bool) -> str | None:
    """Why the item's acceptance criteria cannot be checked, or None when they can.
    An issue needs an "Acceptance Criteria" section with no TBD/TODO in it; a task's
    text is its criteria, vague only when it carries such a marker."""
    body = item.get("body") or ""
    if not needs_section:
        return "its text is marked TBD/TODO" if MARKER_RE.search(body) else None
    m = CRITERIA_RE.search(body)
    if m is None:
        return "it has no Acceptance Criteria section"
    rest = body[m.end() :]
    nxt = HEADING_RE.search(rest)
    section = rest[: nxt.start()] if nxt else rest
    if not section.strip():
        return "its Acceptance Criteria section is empty"
    if MARKER_RE.search(section):
        return "its Acceptance Criteria section says TBD/TODO"
    return None


def pick(workable: list[dict], current: str | None, keep_order: list[str] | None) -> dict | None:
    """The item to work on: the one in hand while it is still workable, else the first in
    ``keep_order`` (the order proposed before, when the user chose to keep it), else the first."""
    by_id = {i["id"]: i for i in workable}
    if current in by_id:
        return by_id[current]
    for item_id in keep_order or []:
        if item_id in by_id:
            return by_id[item_id]
    return workable[0] if workable else None


def excerpt(text: str, limit: int = 4000) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"
