"""Where loopwright's processes read their bytecode: a private cache in the plugin's data
directory (``<data>/pycache``), never the plugin directory.

Python keeps a module's bytecode beside its source (``__pycache__``) only when it can
write there. A plugin directory that is read-only (a marketplace copy, another user's
install) therefore had every Stop compile the package from source again, about four
interpreter starts of work. The hooks and ``bin/loopwright`` call :func:`use` before they
import anything else of loopwright's; from then on every import reads (and, for a module
changed since, writes) its bytecode in the cache. The SessionStart bootstrap fills it ahead
(see :func:`install`), so not even the first Stop compiles.

Python checks each cached file against its source (size and modification time) as it does
in ``__pycache__``: an edited module is compiled once and cached again.

Bytecode is code: a cache another user can write would run their code in every hook. So it
is used only when the cache is this user's own directory that nobody else can enter (0700)
and its data directory is this user's and nobody else's to change; anything else (a
symlink, another owner, a mode that lets others in, a data directory inside the project)
and the process runs without it, as before. Only ``os`` and ``stat`` (loaded with the
interpreter) are used here: nothing is imported before the cache is chosen.
"""

from __future__ import annotations

import os
import stat
import sys

CACHE = "pycache"


def cache_dir(environ=os.environ) -> str | None:
    """The bytecode cache of the plugin data directory named by the environment
    (``CLAUDE_PLUGIN_DATA`` in hooks, ``LOOPWRIGHT_DATA`` in the agent's shell), made
    when missing; None when there is none this process may trust."""
    data = environ.get("CLAUDE_PLUGIN_DATA") or environ.get("LOOPWRIGHT_DATA")
    if not data or not os.path.isabs(data) or "\0" in data:
        return None
    data = os.path.normpath(data)
    project = environ.get("CLAUDE_PROJECT_DIR")
    if project and (data + os.sep).startswith(os.path.normpath(project) + os.sep):
        return None  # a project's files are data, never code
    me = os.geteuid()
    try:
        top = os.stat(data)
        if not stat.S_ISDIR(top.st_mode) or top.st_uid != me or top.st_mode & 0o022:
            return None
        path = os.path.join(data, CACHE)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path, 0o700)  # the first process of a data directory the bootstrap never filled
            st = os.lstat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != me or st.st_mode & 0o077:
        return None
    return path


def use(environ=os.environ) -> str | None:
    """Read and write bytecode in the cache from now on, when there is one to trust."""
    path = cache_dir(environ)
    if path is not None:
        sys.pycache_prefix = path
    return path


def imported_names(lib: str) -> list[str]:
    """Every module outside loopwright that its code imports, at the top of a module or
    inside a function (a Stop imports most of its standard modules lazily)."""
    import ast

    names = set()
    for folder, dirs, files in os.walk(os.path.join(lib, "loopwright")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith(".py"):
                continue
            with open(os.path.join(folder, name), "rb") as fh:
                tree = ast.parse(fh.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module)
    return sorted(n for n in names if n.split(".")[0] not in ("loopwright", "__future__"))


def build(lib: str, cache: str) -> bool:
    """Compile the package under ``lib`` into ``cache``, and the standard modules and
    dependencies it imports (their own ``__pycache__`` is not read under a cache either).
    Run in a fresh ``python -I -S``, as the hooks run; whether everything compiled."""
    sys.pycache_prefix = cache
    import compileall
    import importlib
    import site

    ok = compileall.compile_dir(lib, quiet=1, workers=1)
    site.main()  # the plugin's virtual environment, as state/lock.py adds it when a Stop needs psutil
    for name in imported_names(lib):
        try:
            importlib.import_module(name)
        except BaseException:  # a module of another platform, an optional dependency: not needed
            pass
    return bool(ok)


def install(lib: str, data: str, built_for: str, manifest: str) -> int:
    """The bootstrap's step (hooks/session-start): a new cache for ``data``, built aside and
    put in place whole, with what it was built for (``built_for``, a copy of ``manifest``).
    A hook started meanwhile finds the old cache, or none and makes its own."""
    import shutil

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
