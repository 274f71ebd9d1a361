"""The root command imports a command's module only when that command runs: its table of
where each command lives (cli/main.py's WHERE) matches what the modules define, and a command
run imports no other command's module."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import import_module

from conftest import LIB
from loopwright import modes
from loopwright.cli import main as root


def test_the_table_names_every_engine_command_where_it_is_defined():
    for name, module in root.WHERE.items():
        defined = {c.name for c in import_module(f"loopwright.cli.{module}").COMMANDS}
        assert name in defined, f"{name} is not defined in loopwright.cli.{module}"
    places = set(root.WHERE.values())
    every = {c.name for m in places for c in import_module(f"loopwright.cli.{m}").COMMANDS}
    assert every == set(root.WHERE)  # no command of those modules left out of the table


def test_a_modes_commands_are_found_and_never_shadow_the_engines():
    found = {}
    for name in modes.names():
        part = modes.part(name, "cli")
        found.update({c.name: c for c in getattr(part, "COMMANDS", ())})
    assert found and not set(found) & set(root.WHERE)
    every = root.main.every()
    assert set(every) == set(root.WHERE) | set(found)
    assert all(every[n] is c for n, c in found.items())


def modules_after(*argv: str) -> set[str]:
    """The loopwright.cli and mode modules a fresh interpreter imported to resolve ``argv``."""
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); from loopwright.cli.main import main\n"
        "ctx = main.make_context('loopwright', sys.argv[2:], resilient_parsing=True)\n"
        "main.resolve_command(ctx, list(ctx.protected_args) + list(ctx.args))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('loopwright.'))))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, str(LIB), *argv], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout))


def test_a_command_imports_only_its_own_module():
    loaded = modules_after("report", "--outcome", "done")
    assert "loopwright.cli.iteration" in loaded
    others = {f"loopwright.cli.{m}" for m in root.WHERE.values()} - {"loopwright.cli.iteration"}
    assert not loaded & others
    assert not any(m.endswith(".cli") and m.startswith("loopwright.modes.") for m in loaded)


def test_a_modes_command_is_found_in_its_mode():
    loaded = modules_after("signal", "--help")
    assert any(m.startswith("loopwright.modes.") and m.endswith(".cli") for m in loaded)
    assert "loopwright.cli.fleet" not in loaded and "loopwright.cli.serve" not in loaded
