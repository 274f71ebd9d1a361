"""Review mode: watch one pull request through review-response rounds (sdd SPEC-0020)."""

from loopwright.modes.review.mode import MODE

__all__ = ["MODE"]
