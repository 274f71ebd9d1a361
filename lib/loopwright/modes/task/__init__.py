"""Task mode: ai-cli-task's TASK/<module>/ lifecycle, driven step by step by the Stop hook."""

from loopwright.modes.task.mode import MODE  # noqa: F401  (the registry looks it up here)
