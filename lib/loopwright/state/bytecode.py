"""Where loopwright's processes read their bytecode: a private cache in the plugin's data
directory (``<data>/pycache``), never the plugin directory.

Python keeps a module's bytecode beside its source (``__pycache__``) only when it can
write there. A plugin directory that is read-only (a marketplace copy, another user's
install) therefore had every Stop compile the package from source again, about four
interpreter starts of work. The hooks and ``bin/loopwright`` call :func:`use` before they
import anything else of loopwright's; from then on every import reads (and, for a module
changed since, writes) its bytecode in the cache. The SessionStart bootstrap fills it ahead
(state/precompile.py), so not even the first Stop compiles. The Stop hook (hooks/stop.py)
holds a copy of :func:`cache_dir`, kept equal by a test, so that nothing of the package is
read before the cache is chosen; the other launchers import this module first.

Python checks each cached file against its source (size and modification time) as it does
in ``__pycache__``: an edited module is compiled once and cached again. The bootstrap also
writes the whole package into one file of the cache (state/codearchive.py), which the
launchers read instead of searching the path for each module.

Bytecode is code: a cache another user can write would run their code in every hook. So it
is used only when the cache is this user's own directory that nobody else can enter (0700)
and its data directory is this user's and nobody else's to change; anything else (a
symlink, another owner, a mode that lets others in, a data directory inside the project)
and the process runs without it, as before. Only ``os`` and ``stat`` are used here: nothing
that could come from the cache is imported before the cache is chosen.

The commands (:func:`use`) keep only the package's own bytecode in the cache: the standard
library's and the virtualenv's are read where Python keeps them, beside their sources. The
Stop hook's launchers put every module under the cache (``sys.pycache_prefix``), which the
bootstrap fills ahead, the standard modules a Stop imports included.
"""

from __future__ import annotations

import os
import stat


def cache_dir(environ=os.environ):
    """The bytecode cache of the plugin data directory named by the environment
    (CLAUDE_PLUGIN_DATA in hooks, LOOPWRIGHT_DATA in the agent's shell), made when
    missing; None when there is none this process may trust."""
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
        path = os.path.join(data, "pycache")
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
    """Read and write bytecode in the cache from now on, when there is one to trust, and
    read the package's modules from its archive (state/codearchive.py) when it has one."""
    path = cache_dir(environ)
    if path is not None:
        lib = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        _package_bytecode_in(path, lib)
        from loopwright.state import codearchive

        codearchive.install(path, lib)
    return path


def _package_bytecode_in(cache: str, lib: str) -> None:
    """The bytecode of the modules under ``lib`` (the package's) read and written in ``cache``,
    laid out as ``sys.pycache_prefix`` lays it (precompile.py fills it that way); every other
    module's (the standard library's, the virtualenv's) where Python keeps it by default,
    compiled when it was installed. With the prefix itself every module went through the
    cache, so the first command run with a new data directory compiled the standard library
    and click from source again: 0.6-1 s of CPU where a warm start takes 0.1 s."""
    import _frozen_importlib_external as external  # frozen: nothing is read from a cache

    # importlib's own, also when use() ran before in this process
    default = getattr(external.cache_from_source, "importlibs", external.cache_from_source)
    under = os.path.join(lib, "")

    def cache_from_source(path, debug_override=None, *, optimization=None):
        found = default(path, debug_override, optimization=optimization)
        source = os.path.abspath(os.fspath(path))
        if not source.startswith(under):
            return found
        return os.path.join(cache, os.path.dirname(source).lstrip(os.sep), os.path.basename(found))

    cache_from_source.importlibs = default
    external.cache_from_source = cache_from_source
