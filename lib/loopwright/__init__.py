"""loopwright: unattended, budgeted loops for Claude Code, driven by the Stop hook."""

__version__ = "0.1.0"
