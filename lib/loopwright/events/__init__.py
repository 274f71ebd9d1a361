"""Claude Code's events (Stop, UserPromptSubmit, PostToolUseFailure, the status line):
JSON in, JSON out, a few lines each over the layers below."""
