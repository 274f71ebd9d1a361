"""The package's bytecode in one file of the bytecode cache (``<data>/pycache/loopwright.code``),
so that a hook imports its fifty-odd modules without fifty path searches.

Each import through Python's own finder costs a directory listing, two or three stats and an
open, read and close of a ``.pyc``: about a tenth of a millisecond a module, a third of what a
Stop spends importing. The SessionStart bootstrap (state/precompile.py) writes every module of
the package here; a launcher opens the file once, reads its index, and then reads each module's
code with one ``pread`` when it is imported, so a module the hook never imports costs nothing.

The file: this interpreter's bytecode magic (4 bytes), the length of this module's own code (8
bytes, little-endian) and that code, then the length of the index and the index, then each
module's code. This module comes first so that a launcher needs no copy of it: hooks/stop.py
checks the file and the magic, runs this code and calls :func:`serve` (its own source is
parsed at every Stop, so it stays a few lines); other launchers call :func:`install`.

A module is served from here only while its source is the one compiled: the same size and
modification time, asked with one ``stat`` (a ``.pyc`` is checked the same way). A module
edited, added or removed since is found by Python as usual, so an archive never runs stale
code. The file is trusted as the cache around it is (state/bytecode.py chose a directory only
this user can write), and is refused besides when it is a symlink, not a regular file, not
this user's, writable by others, built for another interpreter or for another copy of the
package. Only ``os``, ``stat``, ``marshal`` and modules every interpreter has loaded before its
first line are used here.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys

NAME = "loopwright.code"
FORMAT = 3
_LEN = 8  # bytes of each length field


def _magic() -> bytes:
    """The bytecode version of this interpreter (what a ``.pyc`` header starts with)."""
    import _frozen_importlib_external  # loaded by every interpreter before its first line

    return _frozen_importlib_external.MAGIC_NUMBER


def _modules(lib: str):
    """(name, source path, is a package) for every module of the package under ``lib``."""
    top = os.path.join(lib, "loopwright")
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        parts = os.path.relpath(folder, lib).split(os.sep)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            if name == "__init__.py":
                yield ".".join(parts), path, True
            else:
                yield ".".join([*parts, name[:-3]]), path, False


def _compiled(path: str) -> tuple[bytes, os.stat_result, bytes]:
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        source = fh.read()
    return marshal.dumps(compile(source, path, "exec", dont_inherit=True)), st, source


def build(lib: str, cache: str) -> str:
    """Write the archive of the package under ``lib`` into ``cache`` (put in place whole);
    its path."""
    from loopwright.state import codedeps

    lib = os.path.abspath(lib)
    index, blobs, offset, sources = {}, [], 0, {}
    for name, path, package in _modules(lib):
        blob, st, sources[name] = _compiled(path)
        index[name] = (path, package, st.st_mtime_ns, st.st_size, offset, len(blob))
        blobs.append(blob)
        offset += len(blob)
    known = set(index)
    orders = codedeps.load_orders({n: codedeps.direct(n, src, known) for n, src in sources.items()})
    index = {n: (*entry, orders[n]) for n, entry in index.items()}
    boot = _compiled(os.path.join(lib, "loopwright", "state", "codearchive.py"))[0]
    head = marshal.dumps((FORMAT, lib, index))
    target = os.path.join(cache, NAME)
    tmp = f"{target}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            for part in (_magic(), len(boot).to_bytes(_LEN, "little"), boot):
                fh.write(part)
            for part in (len(head).to_bytes(_LEN, "little"), head, *blobs):
                fh.write(part)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return target


def _parents_in(name: str, modules) -> bool:
    """Whether every package above ``name`` is imported already (or being imported)."""
    dot = name.rfind(".")
    while dot > 0:
        if name[:dot] not in modules:
            return False
        dot = name.rfind(".", 0, dot)
    return True


class ArchiveFinder:
    """A meta path finder and loader for the modules of one archive. With ``preload`` (for a
    hook's single thread only: it takes no import locks), a module's whole tree of imports is
    loaded before it, straight from the archive, each module after the ones it needs: the
    order Python's own imports would run them in, without their search and bookkeeping
    (about 20 µs a module)."""

    def __init__(self, fd: int, base: int, index: dict, preload: bool = False) -> None:
        self.fd, self.base, self.index, self.preload = fd, base, index, preload

    def _current(self, entry) -> bool:
        """Whether the module's source is the one compiled: an edited one is Python's to load."""
        try:
            st = os.stat(entry[0])
        except OSError:
            return False
        return st.st_mtime_ns == entry[2] and st.st_size == entry[3]

    def _spec(self, name: str, entry):
        import _frozen_importlib  # importlib's bootstrap, loaded before any line runs

        spec = _frozen_importlib.ModuleSpec(name, self, origin=entry[0], is_package=entry[1])
        if entry[1]:
            spec.submodule_search_locations = [os.path.dirname(entry[0])]
        return spec

    def find_spec(self, name, path=None, target=None):
        entry = self.index.get(name)
        if entry is None or not self._current(entry):
            return None
        if self.preload:
            for needed in entry[6]:
                # A module runs only once its packages exist, as Python's imports would have it: a
                # package whose __init__ imports its own modules (modes/work) is listed after them,
                # and they are left to load when that __init__ asks for them.
                if needed not in sys.modules and _parents_in(needed, sys.modules):
                    self._load(needed)
        return self._spec(name, entry)

    def _load(self, name: str) -> None:
        entry = self.index[name]
        if not self._current(entry):
            return  # edited: imported the usual way by the first module that needs it
        import _frozen_importlib

        module = _frozen_importlib.module_from_spec(self._spec(name, entry))
        sys.modules[name] = module
        try:
            self.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, module)

    def create_module(self, spec):
        return None  # a plain module object

    def exec_module(self, module) -> None:
        entry = self.index[module.__spec__.name]
        module.__file__ = entry[0]  # the source, so tracebacks show its lines
        offset, length = entry[4:6]
        blob = os.pread(self.fd, length, self.base + offset)
        if len(blob) != length:
            raise ImportError(f"loopwright: the code archive ends early at {module.__spec__.name}")
        exec(marshal.loads(blob), module.__dict__)


def trusted(fd: int) -> bool:
    """Whether the open archive is a regular file of this user's that nobody else can write."""
    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def serve(fd: int, at: int, lib: str, preload: bool = False) -> bool:
    """Serve the package's modules from the open archive ``fd``, whose index starts at ``at``
    (after this module's code), when it was built for the package under ``lib``; the finder
    keeps ``fd``. Whether it is used (``fd`` is closed when not)."""
    try:
        size = int.from_bytes(os.pread(fd, _LEN, at), "little")
        head = marshal.loads(os.pread(fd, size, at + _LEN)) if 0 < size <= os.fstat(fd).st_size else None
    except (OSError, ValueError, EOFError, TypeError):
        head = None
    ok = isinstance(head, tuple) and len(head) == 3 and head[0] == FORMAT and isinstance(head[2], dict)
    if not ok or head[1] != os.path.abspath(lib):
        os.close(fd)
        return False
    sys.meta_path.insert(0, ArchiveFinder(fd, at + _LEN + size, head[2], preload))
    return True


def install(cache: str | None, lib: str) -> bool:
    """Serve the package's modules from the archive in ``cache`` (a directory
    state/bytecode.py chose), when there is one to use; whether it is used."""
    if cache is None:
        return False
    try:
        fd = os.open(os.path.join(cache, NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        magic = os.pread(fd, 4 + _LEN, 0)
        if not trusted(fd) or magic[:4] != _magic():
            raise ValueError
        at = 4 + _LEN + int.from_bytes(magic[4:], "little")
    except (OSError, ValueError):
        os.close(fd)
        return False
    return serve(fd, at, lib)
