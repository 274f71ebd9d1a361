"""Where loopwright's Claude Code plugin is: the directory with ``.claude-plugin/plugin.json``,
``hooks/``, ``bin/loopwright``, ``commands/`` and ``skills/`` that `run`, the fleet's workers,
`serve` and `doctor` load, start or check.

A checkout is the plugin itself, with the package in its ``lib/``. An installed package (pip,
pipx) holds a copy of the plugin as package data in ``loopwright/plugin/`` (setup.py's build
step puts it there), laid out as a checkout with the package again in its ``lib/``: the hooks
import the package from ``<plugin>/lib``, a path they find relative to themselves, so code
that runs from that copy (a hook, ``bin/loopwright``) finds the copy the first way.
"""

from __future__ import annotations

import functools
from pathlib import Path

MANIFEST = Path(".claude-plugin") / "plugin.json"


def _own() -> Path | None:
    """The plugin directory this copy of the package sits in (``<root>/lib/loopwright``);
    None when it sits anywhere else (site-packages)."""
    package = Path(__file__).resolve().parents[1]  # <root>/lib/loopwright/state/plugindir.py
    if package.parent.name != "lib":
        return None
    root = package.parent.parent
    return root if (root / MANIFEST).is_file() else None


@functools.cache
def root() -> Path:
    """The plugin directory: this checkout's (or plugin copy's), else the installed package's."""
    own = _own()
    if own is not None:
        return own
    from importlib import resources  # only here: importing it takes milliseconds

    return Path(str(resources.files("loopwright"))) / "plugin"


def packaged() -> bool:
    """Whether this process runs the package as pip or pipx installed it (its plugin is the
    package data's copy), rather than from a plugin directory."""
    return _own() is None


def launcher() -> Path:
    """``bin/loopwright`` of the plugin: the command line with the plugin's own interpreter
    choice (hooks/lib.sh) and its package on the path."""
    return root() / "bin" / "loopwright"
