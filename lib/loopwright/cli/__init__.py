"""The `loopwright` command line: click groups over the actions."""
