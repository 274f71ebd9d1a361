"""The headless runner: Claude Code's CLI run unattended for a loop (`loopwright run`)."""
