"""What every run registry offers, whichever database holds it, and its errors.

The monitor, the runner and the fleet's workers speak to a :class:`Registry` only; which
database is behind it (the embedded SQLite file, or a PostgreSQL shared by many machines) is
decided once, by :func:`loopwright.registry.open_registry`, and asked nowhere else.
"""

from __future__ import annotations

try:
    from typing import Protocol
except ImportError:  # pragma: no cover - Python < 3.8
    Protocol = object


class RegistryError(Exception):
    """The registry cannot be used: one line naming the problem and the fix."""


class Busy(Exception):
    """A live run already holds this session or task directory."""


class LeaseLost(Exception):
    """A worker's write was refused: its claim on the loop was taken over (fencing)."""


class Registry(Protocol):
    """The monitor's runs (one row per headless run it started)."""

    path: str | None  # the SQLite file, None for a server database
    shown: str  # where it is, for messages (a password never shown)

    def add(self, session: str, project: str, task_dir: str | None = None, **limits) -> dict: ...

    def update(self, run_id: str, **fields) -> None: ...

    def get(self, run_id: str) -> dict | None: ...

    def live_for(self, *, session: str | None = None, task_dir: str | None = None) -> dict | None: ...

    def waiting_run(self, project: str, loop: str) -> dict | None: ...

    def live(self) -> list[dict]: ...

    def all(self, limit: int = 200) -> list[dict]: ...

    def notify_since(self) -> str: ...

    def first_notice(self, key: str) -> bool: ...

    def schema_status(self) -> dict: ...

    def close(self) -> None: ...
