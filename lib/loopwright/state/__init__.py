"""The I/O model: atomic JSON, locked JSONL, the loop lock, the transcript reader, the
task registry and the loop directories, each file checked against its schema; and the
completion check's process, run with a time limit and bounded output."""
