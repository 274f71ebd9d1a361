"""A `submit work --parallel N` loop's share of the backlog it works with the N-1 others, kept by
its slot (fleet/slot.py).

The N loops of one submit carry one backlog key (their spec's ``backlog``), and each item of that
backlog is claimed by one of them in the fleet's database (registry/items.py), never by a label on
GitHub. The loop's Stop hook never talks to the database, so its worker does it: it reads the
backlog with the mode's own reader (``Mode.fleet_share``, on the loop's own loop.json), marks the
items the loop took, reserves the next one ahead, and writes the items the loop holds to a file of
the worker's, outside the clone, which the loop's signed loop.json names (`run --fleet-items`).
The mode picks only from that list (modes/work/fleet.py).

It acts after every Stop (the loop's state changes) and holds SPARE items ahead of the one in
hand, so that when the loop finishes an item its next is most often its own already; when it is
not yet, the loop waits a turn while this catches up. On a failover the next worker writes the
loop's items (found by the loop's id) before its runner starts: the loop keeps its item. When the
loop ends, the items it held but never took go back to the backlog.
"""

from __future__ import annotations

import time

from loopwright.core import jsoncodec
from loopwright.core.clock import now_iso
from loopwright.core.errors import LoopError
from loopwright.fleet import spec
from loopwright.registry import LeaseLost, RegistryError
from loopwright.state import store

SPARE = 1  # items held ahead of the one the loop works on
RETRY_SECONDS = 5.0  # after a backlog or database that could not be read
MAX_TAKEN = 10_000  # items marked taken at a time (the registry's bound)


def split(held: dict[str, str], loop_id: str) -> tuple[list[str], list[str]]:
    """The loop's items and the other loops', from ``held`` (item -> loop id)."""
    mine = [item for item, holder in held.items() if holder == loop_id]
    return mine, [item for item, holder in held.items() if holder != loop_id]


class Share:
    """The share of one claimed loop; ``of`` gives None for a loop that shares no backlog."""

    def __init__(self, slot, backlog: str) -> None:
        self.slot, self.backlog = slot, backlog
        self.path = slot.w.data / "items" / f"{slot.id}.json"
        self.seen: bytes | None = None  # the loop state last acted on
        self.retry_at = 0.0

    @classmethod
    def of(cls, slot) -> Share | None:
        backlog = spec.backlog_of(slot.row["kind"], slot.row["spec"])
        return cls(slot, backlog) if backlog else None

    def argv(self) -> list[str]:
        """The runner's option naming the list (before the mode's words)."""
        return ["--fleet-items", str(self.path)]

    def start(self) -> None:
        """Before the runner starts: the items the loop holds already, from an earlier claim."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._write(self.slot._read(self.slot.w.registry.held, self.backlog))

    def poll(self, final: bool = False) -> None:
        """When the loop's state changed (a Stop): mark what it took, reserve ahead, write the list.
        ``final``: once more after the runner exited, even while waiting to retry: what the loop
        took at its last Stop is marked before its row ends and its reserved items go back."""
        if time.monotonic() < self.retry_at and not final:
            return
        state = self.slot._budget().get("mode_state")
        seen = jsoncodec.dumps(state)
        loop = self.slot._local_config() if isinstance(state, dict) and seen != self.seen else None
        if loop is None:
            return
        reg, me = self.slot.w.registry, self.slot.id
        try:
            candidates, taken = self._mode(loop).fleet_share(loop, state)
            if taken:
                reg.mark_done(me, self.slot.gen, self.backlog, taken[-MAX_TAKEN:])
            reg.reserve(me, self.slot.gen, self.backlog, candidates, want=SPARE)
            held = reg.held(self.backlog)
        except LeaseLost:
            raise
        except (
            RegistryError,
            LoopError,
            ValueError,
            OSError,
        ) as exc:  # the next Stop, or a retry, catches up
            self.retry_at = time.monotonic() + RETRY_SECONDS
            self.slot.w.log("items", loop=self.slot.name, error=str(exc)[:500])
            return
        self._write(held)
        self.seen = seen

    @staticmethod
    def _mode(loop: dict):
        from loopwright import modes

        return modes.get(loop.get("mode"))

    def _write(self, held: dict[str, str]) -> None:
        mine, others = split(held, self.slot.id)
        record = {
            "backlog": self.backlog,
            "loop": self.slot.id,
            "mine": mine,
            "others": others,
            "at": now_iso(),
        }
        store.write_json(self.path, record)

    def end(self) -> None:
        """The loop's run on this worker is over. Its reserved items go back when it ended (the
        database refuses while it has not); the list goes."""
        try:
            back = self.slot.w.registry.release_items(self.slot.id)
            if back:
                self.slot.w.log("items_released", loop=self.slot.name, items=back)
        except RegistryError as exc:  # the next reserver takes them over (registry/items.py)
            self.slot.w.log("items", loop=self.slot.name, error=str(exc)[:500])
        self.path.unlink(missing_ok=True)
