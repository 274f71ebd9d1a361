"""`loopwright serve`: this machine's monitor of headless runs, with a REST API. Imported
only by that command: the web stack never loads on a hook's path."""
