"""What a half-done ``init`` has to take back, step by step, newest first."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from loopwright.state import store


class Undo:
    """What a half-done init has to take back. Each step is registered before the
    change it undoes is made (guarded, so it is harmless if that change never
    happened) and the steps run newest first."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Callable[[], object]]] = []

    def add(self, what: str, step: Callable[[], object]) -> None:
        self.steps.append((what, step))

    def keep_file(self, path: Path) -> None:
        """Put ``path`` back as it is now, or remove it if it does not exist yet."""
        data = path.read_bytes() if path.is_file() else None

        def restore() -> None:
            if data is None:
                path.unlink(missing_ok=True)
            else:
                store.write_bytes_atomic(path, data)

        self.add(f"restore {path}", restore)

    def make_dir(self, path: Path) -> None:
        """Create ``path`` with its missing parents; undoing removes the topmost one made."""
        top = path
        while not top.parent.exists():
            top = top.parent
        if not top.exists():
            self.add(f"remove {top}", lambda: shutil.rmtree(top) if top.exists() else None)
        path.mkdir(parents=True, exist_ok=True)

    def run(self) -> list[str]:
        """Undo every step; what could not be undone, one phrase each."""
        failed = []
        for what, step in reversed(self.steps):
            try:
                step()
            except Exception as exc:  # keep undoing the rest
                failed.append(f"{what} ({exc})")
        self.steps.clear()
        return failed
