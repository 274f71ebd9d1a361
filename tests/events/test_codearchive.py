"""The package's bytecode in one file (lib/loopwright/state/codearchive.py): a Stop reads its
modules from it with no path search, never runs a module whose source changed since, and never
reads an archive that someone else could have written or that was built for something else.

Each process here runs the hook's own launch sequence (hooks/stop.py, or bytecode.use() and
codearchive.install() as the other launchers do) and reports which loader served a module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, lw_env

OTHER_UID = 4242

# Print, as JSON, the loader and file of each module named, after installing the archive of the
# cache named (argv: lib, cache, module...).
PROBE = r"""
import importlib, json, sys
lib, cache, names = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, lib)
from loopwright.state import codearchive
used = codearchive.install(cache, lib)
out = {"used": used}
for name in names:
    module = importlib.import_module(name)
    out[name] = [type(module.__spec__.loader).__name__, module.__file__, getattr(module, "MARK", None)]
print(json.dumps(out))
"""


def copy_lib(dest: Path) -> Path:
    shutil.copytree(REPO / "lib", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def private_cache(root: Path) -> Path:
    cache = root / "data" / "pycache"
    cache.mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    return cache


def build(lib: Path, cache: Path) -> Path:
    code = "import sys; sys.path.insert(0, sys.argv[1]); from loopwright.state import codearchive; "
    code += "print(codearchive.build(sys.argv[1], sys.argv[2]))"
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(lib), str(cache)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return Path(out.stdout.strip())


def probe(lib: Path, cache: Path, *names: str) -> dict:
    argv = [sys.executable, "-I", "-S", "-B", "-c", PROBE, str(lib), str(cache), *names]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def built(tmp_path):
    lib = copy_lib(tmp_path / "lib")
    cache = private_cache(tmp_path)
    return lib, cache, build(lib, cache)


def test_the_package_is_served_from_the_archive(built):
    lib, cache, archive = built
    assert archive == cache / "loopwright.code" and archive.stat().st_mode & 0o777 == 0o600
    seen = probe(lib, cache, "loopwright.events.entry", "loopwright.state")
    assert seen["used"] is True
    loader, path, _ = seen["loopwright.events.entry"]
    assert loader == "ArchiveFinder" and path == str(lib / "loopwright" / "events" / "entry.py")
    assert seen["loopwright.state"][1] == str(lib / "loopwright" / "state" / "__init__.py")


def test_a_module_edited_since_is_read_from_its_source(built):
    lib, cache, _ = built
    source = lib / "loopwright" / "core" / "clock.py"
    source.write_text(source.read_text() + "\nMARK = 'edited'\n")
    seen = probe(lib, cache, "loopwright.core.clock", "loopwright.core.turn")
    assert seen["loopwright.core.clock"][0] == "SourceFileLoader"
    assert seen["loopwright.core.clock"][2] == "edited"
    assert seen["loopwright.core.turn"][0] == "ArchiveFinder"  # the others still come from it


def test_a_module_added_since_is_found_on_the_path(built):
    lib, cache, _ = built
    (lib / "loopwright" / "core" / "added.py").write_text("MARK = 'new'\n")
    seen = probe(lib, cache, "loopwright.core.added")
    assert seen["loopwright.core.added"][0] == "SourceFileLoader"
    assert seen["loopwright.core.added"][2] == "new"


def test_an_archive_built_for_another_copy_of_the_package_is_not_used(built, tmp_path):
    lib, cache, _ = built
    other = copy_lib(tmp_path / "other-lib")
    seen = probe(other, cache, "loopwright.events.entry")
    assert seen["used"] is False and seen["loopwright.events.entry"][0] == "SourceFileLoader"


def _symlinked(archive: Path) -> None:
    real = archive.with_name("real.code")
    archive.rename(real)
    archive.symlink_to(real)


def _writable_by_others(archive: Path) -> None:
    archive.chmod(0o646)


def _of_another_user(archive: Path) -> None:
    os.chown(archive, OTHER_UID, OTHER_UID)


def _other_interpreter(archive: Path) -> None:
    data = bytearray(archive.read_bytes())
    data[0] ^= 0xFF  # another bytecode version's magic
    archive.write_bytes(bytes(data))


def _truncated(archive: Path) -> None:
    with open(archive, "r+b") as fh:
        fh.truncate(40)


@pytest.mark.parametrize(
    "damage",
    [
        _symlinked,
        _writable_by_others,
        pytest.param(
            _of_another_user,
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="handing a file to another uid needs root"),
        ),
        _other_interpreter,
        _truncated,
    ],
)
def test_an_archive_not_to_trust_is_not_read(built, damage):
    lib, cache, archive = built
    damage(archive)
    seen = probe(lib, cache, "loopwright.events.entry")
    assert seen["used"] is False and seen["loopwright.events.entry"][0] == "SourceFileLoader"


# --- through the Stop hook's own launch (hooks/stop.py reads the archive without the package) ---

# The archive's copy of loopwright.events.entry, swapped for code that leaves a mark and then
# runs the real module: argv = lib, cache, mark.
PLANT = r"""
import marshal, os, sys
lib, cache, mark = sys.argv[1:4]
path = os.path.join(cache, "loopwright.code")
data = open(path, "rb").read()
boot = 12 + int.from_bytes(data[4:12], "little")
size = int.from_bytes(data[boot:boot + 8], "little")
fmt, built_for, index = marshal.loads(data[boot + 8:boot + 8 + size])
source = os.path.join(lib, "loopwright", "events", "entry.py")
text = (
    "import os as _o\n"
    f"_o.write(_o.open({mark!r}, _o.O_WRONLY | _o.O_CREAT | _o.O_APPEND, 0o600), b'ran\\n')\n"
    "exec(compile(open(__file__).read(), __file__, 'exec'))\n"
)
blobs = data[boot + 8 + size:]
planted = marshal.dumps(compile(text, source, "exec"))
entry = list(index["loopwright.events.entry"])
entry[4:6] = [len(blobs), len(planted)]
index["loopwright.events.entry"] = tuple(entry)
head = marshal.dumps((fmt, built_for, index))
with open(path, "wb") as fh:
    fh.write(data[:boot] + len(head).to_bytes(8, "little") + head + blobs + planted)
"""


def plant(lib: Path, cache: Path, mark: Path) -> None:
    argv = [sys.executable, "-I", "-c", PLANT, str(lib), str(cache), str(mark)]
    subprocess.run(argv, check=True, timeout=60)


def stop_hook(lib: Path, data: Path, project: Path) -> subprocess.CompletedProcess:
    """One Stop through hooks/stop.py of a plugin whose lib/ is ``lib``: Python decides it (a
    state directory that is not laid out as loopwright lays it out)."""
    hooks = lib.parent / "hooks"
    if not hooks.exists():
        shutil.copytree(REPO / "hooks", hooks, ignore=shutil.ignore_patterns("__pycache__"))
    (project / ".loopwright" / "active").mkdir(parents=True, exist_ok=True)
    (project / ".loopwright" / "active" / "junk").touch()
    event = {"session_id": "S1", "transcript_path": str(project / "none.jsonl"), "cwd": str(project)}
    env = lw_env(CLAUDE_PROJECT_DIR=str(project), CLAUDE_PLUGIN_DATA=str(data))
    out = subprocess.run(
        [str(hooks / "stop")], input=json.dumps(event), capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out


def test_the_stop_hook_runs_the_archives_code(project, tmp_path):
    lib = copy_lib(tmp_path / "plugin" / "lib")
    cache, mark = private_cache(tmp_path), tmp_path / "ran"
    build(lib, cache)
    plant(lib, cache, mark)
    stop_hook(lib, cache.parent, project)
    assert mark.read_text() == "ran\n"  # so the cases below could fail


@pytest.mark.parametrize("damage", [_symlinked, _writable_by_others, _other_interpreter, _truncated])
def test_the_stop_hook_never_runs_an_archive_not_to_trust(project, tmp_path, damage):
    lib = copy_lib(tmp_path / "plugin" / "lib")
    cache, mark = private_cache(tmp_path), tmp_path / "ran"
    archive = build(lib, cache)
    plant(lib, cache, mark)
    damage(archive)
    out = stop_hook(lib, cache.parent, project)
    assert not mark.exists(), "code from an archive not to trust ran"
    assert "systemMessage" in out.stdout or out.stdout == ""  # the hook still answered as before


def test_the_stop_hook_runs_no_planted_archive_in_a_cache_others_can_enter(project, tmp_path):
    lib = copy_lib(tmp_path / "plugin" / "lib")
    cache, mark = private_cache(tmp_path), tmp_path / "ran"
    build(lib, cache)
    plant(lib, cache, mark)
    cache.chmod(0o755)
    stop_hook(lib, cache.parent, project)
    assert not mark.exists()


def test_the_bootstrap_builds_the_archive(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    script = REPO / "lib" / "loopwright" / "state" / "precompile.py"
    argv = [sys.executable, "-I", "-S", str(script), str(REPO / "lib"), str(data), "test", os.devnull]
    subprocess.run(argv, check=True, timeout=300, capture_output=True)
    archive = data / "pycache" / "loopwright.code"
    assert archive.is_file()
    seen = probe(REPO / "lib", data / "pycache", "loopwright.core.router")
    assert seen["loopwright.core.router"][0] == "ArchiveFinder"


# --- the Stop hook loads a module's whole tree of imports at once (preload) --------------------


def test_the_stop_hook_preloads_from_the_archive_and_an_edited_module_from_its_source(project, tmp_path):
    """Every module the Stop's router needs comes from the archive in one go, except one edited
    since the archive was built: that one is Python's own import, and runs its new source."""
    lib = copy_lib(tmp_path / "plugin" / "lib")
    cache, mark = private_cache(tmp_path), tmp_path / "ran"
    build(lib, cache)
    clock = lib / "loopwright" / "core" / "clock.py"
    flags = "_o.O_WRONLY | _o.O_CREAT | _o.O_APPEND"
    marker = f"\nimport os as _o\n_o.write(_o.open({str(mark)!r}, {flags}), b'src\\n')\n"
    clock.write_text(clock.read_text() + marker)
    stop_hook(lib, cache.parent, project)
    assert mark.read_text() == "src\n"  # imported once, from its source, by what needs it


def test_load_orders_put_each_module_after_what_it_needs():
    from loopwright.state import codedeps

    known = {"p", "p.a", "p.b", "p.c", "p.d"}
    src = {
        "p": b"",
        "p.a": b"from p import b\nclass K:\n    from p import c\ndef f():\n    from p import d\n",
        "p.b": b"import p.c\n",
        "p.c": b"try:\n    import p.d\nexcept ImportError:\n    pass\n",
        "p.d": b"",
    }
    graph = {n: codedeps.direct(n, s, known) for n, s in src.items()}
    assert graph["p.a"] == ["p", "p.b", "p.c"]  # the import inside f() is not needed to run p.a
    orders = codedeps.load_orders(graph)
    assert orders["p.a"] == ("p", "p.d", "p.c", "p.b")
    assert orders["p.d"] == ("p",) and orders["p"] == ()


def test_a_cycle_stops_the_walk_where_it_closes():
    from loopwright.state import codedeps

    orders = codedeps.load_orders({"x": ["y"], "y": ["x"]})
    assert orders == {"x": ("y",), "y": ("x",)}


# Boot as hooks/stop_local.py does (its own boot(): the archive served with preload), then import each
# module named; print the loader of each (argv: hooks/stop_local.py, lib, cache, module...).
PRELOAD_PROBE = r"""
import importlib, json, sys
stop, lib, cache, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
head = open(stop).read().split("# --- the launch")[0]
launcher = {"__file__": stop, "__name__": "probe"}
exec(compile(head, stop, "exec"), launcher)
launcher["boot"](cache, lib)
sys.path.insert(0, lib)
print(json.dumps({n: type(importlib.import_module(n).__spec__.loader).__name__ for n in names}))
"""


def test_preloading_imports_every_mode_whose_package_imports_its_own_modules(tmp_path):
    """A mode's package __init__ imports its mode module, which imports the package's other
    modules through the package (work mode: `from loopwright.modes.work import fleet`): a
    preload that ran those before the package existed would find its __init__ half done."""
    from loopwright import modes

    lib = copy_lib(tmp_path / "plugin" / "lib")
    cache = private_cache(tmp_path)
    build(lib, cache)
    names = [f"loopwright.modes.{m}" for m in modes.names()]
    assert "loopwright.modes.work" in names
    for name in names:  # each in a process of its own: the first import of its package
        argv = [sys.executable, "-I", "-S", "-B", "-c", PRELOAD_PROBE, str(REPO / "hooks" / "stop_local.py")]
        out = subprocess.run([*argv, str(lib), str(cache), name], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {name: "ArchiveFinder"}
