"""A work loop's share of a backlog that several fleet loops work together (`loopwright submit
work --parallel N`). The loop's worker claims items for it in the fleet's database and writes
the ones the loop holds to a file of the worker's, outside the clone, whose path the loop's
signed loop.json names (``work.fleet_items``); no file a clone ships can say it.

At every Stop the mode reads that file with the backlog: an item another loop holds is in
progress elsewhere, an item nobody holds yet waits for the worker to reserve it (the loop waits
a turn rather than end while such an item is left), and only the loop's own items are picked.
A file that is missing or not as the worker writes it gives no item at all: the backlog counts
as unreadable, and the loop stops as it does when GitHub cannot be reached.
"""

from __future__ import annotations

from loopwright.core import jsoncodec
from loopwright.modes.work import backlog

MAX_BYTES = 1 << 20
MAX_ITEMS = 10_000
ELSEWHERE = "claimed by another fleet loop"
NOT_YET = "not reserved for this loop yet"


def read_share(path: str) -> tuple[dict | None, str | None]:
    """``{"mine": [...], "others": [...]}`` from the worker's file, or (None, the problem)."""
    what = f"the fleet's list of this loop's items ({path})"
    try:
        with open(path, "rb") as fh:
            data = jsoncodec.loads(fh.read(MAX_BYTES + 1))
    except FileNotFoundError:
        return None, f"{what} is missing"
    except (OSError, ValueError) as exc:
        return None, f"{what} cannot be read: {exc}"
    if not isinstance(data, dict) or not all(_ids(data.get(k)) for k in ("mine", "others")):
        return None, f'{what} is not the worker\'s list ("mine" and "others", lists of item ids)'
    return {"mine": list(data["mine"]), "others": list(data["others"])}, None


def _ids(value) -> bool:
    return isinstance(value, list) and len(value) <= MAX_ITEMS and all(isinstance(i, str) for i in value)


def apply(items: list[dict], share: dict) -> None:
    """Marks the items that are not this loop's: held by another loop, or not reserved yet."""
    mine, others = set(share["mine"]), set(share["others"])
    for item in items:
        if item["id"] in mine or item.get("in_progress"):
            continue
        if item["id"] in others:
            item["in_progress"] = ELSEWHERE
        else:
            item["in_progress"], item["fleet_unreserved"] = NOT_YET, True


def unreserved_workable(items: list[dict], skipped: list[str]) -> list[str]:
    """The items that would be workable but for the worker not having reserved them yet."""
    freed = [dict(i, in_progress=None) if i.get("fleet_unreserved") else i for i in items]
    workable, _ = backlog.split(freed, skipped)
    return [i["id"] for i in workable if i.get("fleet_unreserved")]


def unshared(loop: dict) -> dict:
    """``loop`` reading the whole backlog, as its worker does to choose what to reserve."""
    return dict(loop, work=dict(loop.get("work") or {}, fleet_items=None))
