"""Which process answered a Stop, read from the outside: each hook process's imports
(`python -X importtime` through a LOOPWRIGHT_PYTHON wrapper), and whether the resident Stop
server (lib/loopwright/events/resident.py) takes connections."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path


def traced_python(tmp_path: Path) -> tuple[Path, Path]:
    """A LOOPWRIGHT_PYTHON that logs each process's imports to a file of its own in the
    traces folder; (the wrapper, the traces folder)."""
    traces = tmp_path / "traces"
    traces.mkdir(exist_ok=True)
    wrapper = tmp_path / "python-traced"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -X importtime "$@" 2>>"{traces}/$$.log"\n')
    wrapper.chmod(0o755)
    return wrapper, traces


def imported(log: Path) -> set[str]:
    """The modules one traced process imported."""
    lines = log.read_text().splitlines()
    return {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}


def in_dir(path: Path, call):
    """``call(name)`` from within ``path``'s folder: a socket address holds ~105 bytes at most,
    less than a test's temporary paths (the launcher and the server do the same)."""
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        return call(path.name)
    finally:
        os.chdir(here)


def listening(sock: Path) -> bool:
    """Whether a server takes connections at ``sock``."""
    if not sock.exists():
        return False
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            in_dir(sock, probe.connect)
        except OSError:
            return False
    return True
