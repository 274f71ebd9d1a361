"""Fill the bytecode cache of the plugin data directory (state/bytecode.py), run by the
SessionStart bootstrap (hooks/session-start) as a script, in a fresh ``python -I -S`` as the
hooks run: ``precompile.py LIB DATA BUILT_FOR MANIFEST``.

The package is compiled whole, into ``.pyc`` files and into one archive the hooks read
(state/codearchive.py), and every standard module and dependency it imports is
compiled too: under a cache Python reads no ``__pycache__`` at all, the standard library's
included, so a module missing from the cache would be compiled by the first hook that needs it.
"""

import os
import re
import shutil
import sys

CACHE = "pycache"  # state/bytecode.py looks for it under this name


# A line that imports: `import a, b.c as d` or `from a.b import c` (relative imports are the
# package's own). Read from the source text, not from a syntax tree: walking the trees of the
# whole package took the bootstrap 1.7 s, a third of its time. A line that only looks like an
# import (in a docstring) names a module at worst, which is tried and skipped.
_IMPORT = re.compile(r"^[ \t]*(?:import[ \t]+([^#\n;]+)|from[ \t]+([A-Za-z_][\w.]*)[ \t]+import\b)", re.M)


def _listed(text):
    """The modules of `import a, b.c as d` (the text after `import`); none when the text is
    not such a list (prose in a docstring: "import the file")."""
    parts = [part.split() for part in text.split(",")]
    if not all(len(p) == 1 or (len(p) == 3 and p[1] == "as") for p in parts):
        return []
    return [p[0] for p in parts if re.fullmatch(r"[A-Za-z_][\w.]*", p[0])]


def imported_names(lib):
    """Every module outside loopwright that its code imports, at the top of a module or
    inside a function (a Stop imports most of its standard modules lazily)."""
    names = set()
    for folder, dirs, files in os.walk(os.path.join(lib, "loopwright")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith(".py"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                text = fh.read()
            for listed, module in _IMPORT.findall(text):
                names.update([module] if module else _listed(listed))
    return sorted(n for n in names if n.split(".")[0] not in ("loopwright", "__future__"))


def build(lib, cache):
    """Compile the package under ``lib`` into ``cache``, and the standard modules and
    dependencies it imports (their own ``__pycache__`` is not read under a cache either).
    Run in a fresh ``python -I -S``, as the hooks run; whether everything compiled."""
    sys.pycache_prefix = cache
    import compileall
    import importlib
    import site

    ok = compileall.compile_dir(lib, quiet=1, workers=1)
    sys.path.insert(0, lib)
    from loopwright.state import codearchive

    codearchive.build(lib, cache)  # what the hooks read: every module of the package in one file
    site.main()  # the plugin's virtual environment, as state/lock.py adds it when a Stop needs psutil
    for name in imported_names(lib):
        try:
            importlib.import_module(name)
        except BaseException:  # a module of another platform, an optional dependency: not needed
            pass
    return bool(ok)


def install(lib, data, built_for, manifest):
    """The bootstrap's step (hooks/session-start): a new cache for ``data``, built aside and
    put in place whole, with what it was built for (``built_for``, a copy of ``manifest``).
    A hook started meanwhile finds the old cache, or none and makes its own."""
    cache, new = os.path.join(data, CACHE), os.path.join(data, f"{CACHE}.new.{os.getpid()}")
    os.mkdir(new, 0o700)
    try:
        if not build(lib, new):
            return 1
        shutil.copyfile(manifest, os.path.join(new, ".plugin.json"))
        with open(os.path.join(new, ".built-for"), "w") as fh:
            fh.write(built_for + "\n")
        for attempt in range(3):  # a hook may make an empty cache between the two renames
            old = os.path.join(data, f"{CACHE}.old.{os.getpid()}.{attempt}")
            try:
                os.rename(cache, old)
            except FileNotFoundError:
                old = None
            try:
                os.rename(new, cache)  # over nothing, or over an empty directory a hook just made
                return 0
            except OSError:
                continue
            finally:
                if old:
                    shutil.rmtree(old, ignore_errors=True)
        return 1
    finally:
        shutil.rmtree(new, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(install(*sys.argv[1:5]))
