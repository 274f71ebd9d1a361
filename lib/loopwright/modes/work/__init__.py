"""Work mode: grind a backlog, one item per iteration (sdd SPEC-0020)."""

from loopwright.modes.work.mode import MODE

__all__ = ["MODE"]
