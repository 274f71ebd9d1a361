"""The hooks and the command line read loopwright's bytecode from a private cache in the
plugin data directory (lib/loopwright/state/bytecode.py), which the SessionStart bootstrap fills
(lib/loopwright/state/precompile.py): a Stop never compiles the package from source, whether the
plugin directory can hold __pycache__ or not, with or without PYTHONDONTWRITEBYTECODE.

A plugin directory that cannot hold bytecode is played by a copy in which a file named
__pycache__ stands where each package's directory of that name would go: Python can neither
read nor write bytecode there, even as root (for whom a read-only mode changes nothing).

Bytecode is code: a cache that someone else could have written is never used. Each attack
plants, in a cache of that kind, bytecode for loopwright/events/entry.py that Python would
accept as current (its header carries the source's size and date) and that leaves a mark
when it runs. The mark must not appear, and the hook must work as before; in a private cache
of the user's own the same plant does run (so each test could fail).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, lw_env

OTHER_UID = 4242
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another uid needs root")

# Runs a hook's script as the launcher would (the same -I -S), logging each file Python
# compiles from source, then the script itself; the log is the file named first.
AUDIT = r"""
import os, sys

log, script = sys.argv[1], sys.argv[-1]
sys.argv = [script]


def _audit(event, args):
    if event == "compile" and isinstance(args[1], str) and args[1].endswith(".py"):
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(fd, (args[1] + "\n").encode())
        os.close(fd)


sys.addaudithook(_audit)
exec(compile(open(script, "rb").read(), script, "exec"), {"__name__": "__main__", "__file__": script})
"""

# Bytecode for a source file that Python takes for current, which appends to a mark file
# and then runs the real module: argv = source, cache, mark.
PLANT = r"""
import importlib._bootstrap_external as bx, importlib.util, os, sys

source, cache, mark = sys.argv[1:4]
text = (
    "import os as _o\n"
    f"_o.write(_o.open({mark!r}, _o.O_WRONLY | _o.O_CREAT | _o.O_APPEND, 0o600), b'ran\\n')\n"
    "exec(compile(open(__file__).read(), __file__, 'exec'))\n"
)
st = os.stat(source)
data = bx._code_to_timestamp_pyc(compile(text, source, "exec"), st.st_mtime, st.st_size)
sys.pycache_prefix = cache
target = importlib.util.cache_from_source(source)
os.makedirs(os.path.dirname(target), exist_ok=True)
with open(target, "wb") as fh:
    fh.write(data)
"""


def copy_plugin(dest: Path, *, blocked: bool) -> Path:
    for part in ("hooks", "lib", "bin", ".claude-plugin"):
        shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "requirements.txt").write_text("")  # the bootstrap builds its venv without the network
    if blocked:
        for folder, _, _ in os.walk(dest / "lib"):
            (Path(folder) / "__pycache__").write_text("")
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A plugin that cannot hold bytecode, bootstrapped by the real SessionStart hook into a
    new data directory (a virtual environment and the bytecode cache)."""
    root = tmp_path_factory.mktemp("bytecode")
    plugin = copy_plugin(root / "plugin", blocked=True)
    data = root / "data"
    env = lw_env(CLAUDE_PLUGIN_DATA=str(data))
    del env["LOOPWRIGHT_PYTHON"]
    start = [str(plugin / "hooks" / "session-start")]
    out = subprocess.run(start, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    log = (data / "install.log").read_text() if (data / "install.log").exists() else ""
    assert "installed its Python packages" in out.stdout, out.stdout + log
    assert (data / "pycache" / ".built-for").is_file(), log
    return plugin, data


def compiled_by_stop(plugin: Path, data: Path | None, project: Path, tmp_path: Path, python=None, **env):
    """One owner's Stop through the plugin's launcher (the data directory's interpreter, by
    default); its answer and the files of the package that were compiled from source."""
    python = python or (data / "venv" / "bin" / "python" if data else sys.executable)
    log, audit, wrapper = tmp_path / "compiled.log", tmp_path / "audit.py", tmp_path / "python"
    log.unlink(missing_ok=True)
    audit.write_text(AUDIT)
    wrapper.write_text(f"#!/bin/sh\nexec '{python}' -I -S '{audit}' '{log}' \"$@\"\n")
    wrapper.chmod(0o755)
    extra = {"CLAUDE_PROJECT_DIR": str(project), "LOOPWRIGHT_PYTHON": str(wrapper), **env}
    if data:
        extra["CLAUDE_PLUGIN_DATA"] = str(data)
    event = {"session_id": "S1", "transcript_path": str(project / "none.jsonl"), "cwd": str(project)}
    out = subprocess.run(
        [str(plugin / "hooks" / "stop")],
        input=json.dumps(dict(event, stop_hook_active=True)),
        capture_output=True,
        text=True,
        env=lw_env(**extra),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lib = str(plugin / "lib") + "/"
    names = log.read_text().split() if log.exists() else []
    return json.loads(out.stdout), {n[len(lib) :] for n in names if n.startswith(lib)}


@pytest.fixture
def looping(project):
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), "start", "--session", "S1", "goal"],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return project


@pytest.mark.slow  # with the module's bootstrapped plugin (installed)
@pytest.mark.parametrize("dont_write", [None, "1"], ids=["default", "PYTHONDONTWRITEBYTECODE=1"])
def test_a_stop_compiles_nothing_of_the_package_where_the_plugin_holds_no_bytecode(
    installed, looping, tmp_path, dont_write
):
    plugin, data = installed
    env = {"PYTHONDONTWRITEBYTECODE": dont_write} if dont_write else {}
    for _ in range(2):
        answer, compiled = compiled_by_stop(plugin, data, looping, tmp_path, **env)
        assert answer["decision"] == "block"
        assert compiled == set(), sorted(compiled)
    # Without the cache (no data directory named) every Stop compiles the package again.
    answer, compiled = compiled_by_stop(plugin, None, looping, tmp_path, **env)
    assert answer["decision"] == "block"
    assert {"loopwright/events/stop.py", "loopwright/core/router.py"} <= compiled


def test_a_data_directory_the_bootstrap_never_filled_gets_a_private_cache(looping, tmp_path):
    plugin = copy_plugin(tmp_path / "plugin", blocked=True)
    data = tmp_path / "data"
    data.mkdir()
    _, first = compiled_by_stop(plugin, data, looping, tmp_path, python=sys.executable)
    assert "loopwright/events/stop.py" in first  # the first Stop compiles, into the cache
    assert (data / "pycache").stat().st_mode & 0o777 == 0o700
    _, second = compiled_by_stop(plugin, data, looping, tmp_path, python=sys.executable)
    assert second == set(), sorted(second)


def test_the_stop_hook_chooses_the_cache_as_every_other_launcher_does():
    """hooks/stop_local.py holds a copy of the check (nothing of the package is read before it)."""
    from loopwright.state import bytecode

    assert inspect.getsource(bytecode.cache_dir) in (REPO / "hooks" / "stop_local.py").read_text()


@pytest.mark.slow  # a virtual environment made by the bootstrap
def test_the_bootstrap_rebuilds_the_cache_only_when_the_plugin_changed(installed, tmp_path):
    plugin, data = installed
    env = lw_env(CLAUDE_PLUGIN_DATA=str(data))
    del env["LOOPWRIGHT_PYTHON"]
    start = [str(plugin / "hooks" / "session-start")]

    def session_start() -> int:
        out = subprocess.run(start, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr
        return (data / "pycache").stat().st_ino

    cache = data / "pycache"
    assert cache.stat().st_mode & 0o777 == 0o700
    before = cache.stat().st_ino
    assert session_start() == before  # nothing changed: nothing rebuilt
    manifest = plugin / ".claude-plugin" / "plugin.json"
    saved = manifest.read_text()
    try:
        manifest.write_text(json.dumps({**json.loads(saved), "version": "99.0.0"}))
        rebuilt = session_start()
        assert rebuilt != before
        mirror = cache / str(plugin / "lib").lstrip(os.sep) / "loopwright" / "events"  # paths mirrored
        assert [n for n in os.listdir(mirror) if n.startswith("stop.")], os.listdir(mirror)
        assert json.loads((cache / ".plugin.json").read_text())["version"] == "99.0.0"
        assert session_start() == rebuilt
    finally:
        manifest.write_text(saved)
    assert [n for n in os.listdir(data) if n.startswith("pycache.")] == []  # nothing left aside


# --- attacks: a cache that anyone else could have written --------------------------------------


def plant(python: str, source: Path, cache: Path, mark: Path) -> None:
    subprocess.run([python, "-I", "-c", PLANT, str(source), str(cache), str(mark)], check=True, timeout=60)


def python_stop(plugin: Path, project: Path, **env: str) -> subprocess.CompletedProcess:
    """A Stop that Python decides (the state directory is not laid out as loopwright lays it out)."""
    (project / ".loopwright" / "active").mkdir(parents=True, exist_ok=True)
    (project / ".loopwright" / "active" / "junk").touch()
    event = {"session_id": "S1", "transcript_path": str(project / "none.jsonl"), "cwd": str(project)}
    out = subprocess.run(
        [str(plugin / "hooks" / "stop")],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project), **env),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out


def _private(data, cache, project):
    return data


def _other_users(data, cache, project):
    os.chown(cache, OTHER_UID, OTHER_UID)
    return data


def _mode(mode):
    def damage(data, cache, project):
        cache.chmod(mode)
        return data

    damage.__name__ = f"_mode_{mode:o}"
    return damage


def _symlink(data, cache, project):
    real = data / "elsewhere"
    cache.rename(real)
    cache.symlink_to(real)
    return data


def _data_others_can_write(data, cache, project):
    data.chmod(0o777)
    return data


def _data_of_another_user(data, cache, project):
    os.chown(data, OTHER_UID, OTHER_UID)
    return data


def _data_in_the_project(data, cache, project):
    inside = project / "plugin-data"
    data.rename(inside)
    return inside


ATTACKS = [
    pytest.param(_other_users, marks=as_root, id="cache of another user"),
    pytest.param(_mode(0o777), id="cache anyone can write"),
    pytest.param(_mode(0o770), id="cache the group can write"),
    pytest.param(_mode(0o755), id="cache others can enter"),
    pytest.param(_symlink, id="cache is a symlink"),
    pytest.param(_data_others_can_write, id="data directory anyone can write"),
    pytest.param(_data_of_another_user, marks=as_root, id="data directory of another user"),
    pytest.param(_data_in_the_project, id="data directory inside the project"),
]


@pytest.mark.parametrize("damage", [_private, *ATTACKS])
def test_bytecode_someone_else_could_have_written_never_runs(project, tmp_path, damage):
    plugin = copy_plugin(tmp_path / "plugin", blocked=False)
    data, mark = tmp_path / "data", tmp_path / "ran"
    cache = data / "pycache"
    data.mkdir(mode=0o755)
    cache.mkdir(mode=0o700)
    plant(sys.executable, plugin / "lib" / "loopwright" / "events" / "entry.py", cache, mark)
    data = damage(data, cache, project)
    python_stop(plugin, project, CLAUDE_PLUGIN_DATA=str(data))
    if damage is _private:
        assert mark.read_text() == "ran\n"  # the plant does run from a cache of the user's own
    else:
        assert not mark.exists(), "bytecode from a cache others could write ran"


def test_every_launcher_reads_the_cache(project, tmp_path):
    plugin = copy_plugin(tmp_path / "plugin", blocked=False)
    data = tmp_path / "data"
    cache = data / "pycache"
    data.mkdir(mode=0o755)
    cache.mkdir(mode=0o700)
    marks = {}
    for module in ("events/entry.py", "cli/main.py"):
        marks[module] = tmp_path / module.replace("/", "-")
        plant(sys.executable, plugin / "lib" / "loopwright" / module, cache, marks[module])

    def ran(module: str) -> int:
        mark = marks[module]
        return len(mark.read_text().splitlines()) if mark.exists() else 0

    python_stop(plugin, project, CLAUDE_PLUGIN_DATA=str(data))
    assert ran("events/entry.py") == 1
    hook_env = lw_env(CLAUDE_PROJECT_DIR=str(project), CLAUDE_PLUGIN_DATA=str(data))
    prompt = {"session_id": "S1", "cwd": str(project), "prompt": "/loopwright:status"}
    for hook, payload in (("prompt", prompt), ("tool-failure", {"session_id": "S1", "cwd": str(project)})):
        launcher = str(plugin / "hooks" / hook)
        out = subprocess.run(
            launcher, input=json.dumps(payload), env=hook_env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
    assert ran("events/entry.py") == 3
    cli_env = lw_env(LOOPWRIGHT_DATA=str(data))
    line = {"session_id": "S1", "cwd": str(project)}
    for args, stdin in ((["statusline"], json.dumps(line)), (["--help"], None)):
        cmd = [str(plugin / "bin" / "loopwright"), *args]
        out = subprocess.run(cmd, input=stdin, env=cli_env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
    assert ran("events/entry.py") == 4 and ran("cli/main.py") == 1


def test_a_command_keeps_only_the_packages_bytecode_in_the_cache(tmp_path):
    """A command started with a new data directory compiles the package into the cache and
    nothing else: the standard library's and click's bytecode are read beside their sources,
    where they were compiled when Python and the virtualenv were installed. (Every module
    under the cache made such a start compile the standard library and click again.)"""
    plugin = copy_plugin(tmp_path / "plugin", blocked=True)
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    cmd = [str(plugin / "bin" / "loopwright"), "fleet", "--help"]
    env = lw_env(LOOPWRIGHT_DATA=str(data))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    cached = [p.relative_to(data / "pycache") for p in (data / "pycache").rglob("*.pyc")]
    lib = (plugin / "lib").relative_to("/")
    ours = [p for p in cached if p.is_relative_to(lib / "loopwright")]
    tag = sys.implementation.cache_tag
    assert lib / "loopwright" / "cli" / f"main.{tag}.pyc" in ours, cached
    assert ours == cached, [str(p) for p in cached if p not in ours][:5]
