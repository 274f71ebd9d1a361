"""Loop modes, each a folder behind one interface (``loopwright.core.modeapi.Mode``).

The registry maps a mode's name to the module that holds it; a mode is imported only
when a loop of that mode is touched, so a prompt loop's Stop never loads task mode.
Callers look a mode up here and never compare names: adding a mode is one folder,
one line below, its command, its skill and its tests.
"""

from __future__ import annotations

import sys

from loopwright.core import schema
from loopwright.core.errors import LoopError

DEFAULT = "prompt"  # what /loopwright:loop and `loopwright start` run
REGISTRY = {
    "prompt": "loopwright.modes.prompt",
    "task": "loopwright.modes.task",
    "work": "loopwright.modes.work",
    "review": "loopwright.modes.review",
}


class UnknownMode(LoopError):
    pass


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name: object):
    """The mode called ``name``; UnknownMode (one line, naming the known modes) otherwise."""
    target = REGISTRY.get(name) if isinstance(name, str) else None
    if target is None:
        raise UnknownMode(f"unknown mode {name!r}; the modes are {', '.join(REGISTRY)}")
    return _module(target).MODE if isinstance(target, str) else target


def _module(name: str):
    """The module ``name``, imported (importlib's import_module, without importing importlib)."""
    __import__(name)
    return sys.modules[name]


def register(name: str, mode) -> None:
    """Add a mode: the name of a module whose ``MODE`` it is, or the mode object itself."""
    REGISTRY[name] = mode


def part(name: str, what: str):
    """A mode's optional shell part: ``slash`` (its /loopwright:<name> command, a module
    with ``command(state, session, args, transcript_path)``) or ``cli`` (a module with a
    click ``group``). None when the mode has no such part."""
    target = REGISTRY.get(name)
    if target is None:
        return None
    if not isinstance(target, str):
        return getattr(target, what, None)
    wanted = f"{target}.{what}"
    try:
        return _module(wanted)
    except ModuleNotFoundError as exc:
        if exc.name == wanted:
            return None
        raise


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def for_loop(loop: dict):
    """The mode of ``loop``, with the mode's own loop.json keys checked against its specs
    (SchemaError names the first bad one; UnknownMode for a mode this version lacks)."""
    mode = get(loop.get("mode"))
    for key, spec in mode.config_fields.items():
        if key in loop:
            schema.check(spec, loop[key], f"loop.json.{key}")
    return mode


def check_state(mode, budget: dict) -> None:
    """The mode's persisted state in budget.json, checked against the mode's spec."""
    if mode.state_spec is not None and budget.get("mode_state") is not None:
        schema.check(mode.state_spec, budget["mode_state"], "budget.json.mode_state")
