"""The pure core: the engine's decision, budgets, gates, rates, completion and prompt text.

Nothing here reads or writes a file, starts a process or looks at the clock; a test
fails if a module here imports from any other layer."""
