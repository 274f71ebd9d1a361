"""The bootstrap compiles every module the package imports (state/precompile.py): the names it
reads from the source text are exactly those Python's own parser finds, imports inside
functions included, and prose that only looks like an import names nothing."""

from __future__ import annotations

import ast
import os
import sys

from conftest import LIB

sys.path.insert(0, str(LIB / "loopwright" / "state"))
import precompile  # noqa: E402  (a script the bootstrap runs, not a module of the package)


def parsed_names(lib: str) -> set[str]:
    names = set()
    for folder, dirs, files in os.walk(os.path.join(lib, "loopwright")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as fh:
                    tree = ast.parse(fh.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        names.update(a.name for a in node.names)
                    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        names.add(node.module)
    return {n for n in names if n.split(".")[0] not in ("loopwright", "__future__")}


def test_the_names_read_from_the_text_are_the_parsers():
    assert set(precompile.imported_names(str(LIB))) == parsed_names(str(LIB))


def test_lines_of_every_form_and_prose_that_looks_like_one(tmp_path):
    package = tmp_path / "loopwright"
    package.mkdir()
    (package / "m.py").write_text(
        '"""Docs: import the file first, then\nfrom here on, import a copy."""\n'
        "import json, os.path as p\n"
        "from collections import abc\n"
        "from . import sibling\n"
        "from loopwright.core import x\n"
        "def f():\n"
        "    import sqlite3  # lazily\n"
        "    from email.message import EmailMessage\n"
    )
    found = set(precompile.imported_names(str(tmp_path)))
    assert found == parsed_names(str(tmp_path))
    assert found == {"json", "os.path", "collections", "sqlite3", "email.message"}
