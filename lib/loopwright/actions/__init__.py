"""What a user does to a loop (start, cancel, resume, adopt, answer a gate), shared by the
CLI, the slash commands and the monitor's API."""
