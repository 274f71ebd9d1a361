"""A throwaway PostgreSQL cluster for the tests: initdb + pg_ctl into a temporary directory,
one per test session, and a fresh database per test on it.

Fixtures (registered by tests/conftest.py):
  - ``pg_cluster`` (session): the running cluster (a ``PgCluster``); ``stop()``, ``start()``
    and ``restart()`` for tests that take the server away mid-test.
  - ``pg_url`` (function): a fresh database's ``postgresql://`` URL, dropped after the test.
  - ``registry_url`` (function, params ``sqlite`` and ``postgres``): a SQLite file path in
    tmp_path, or ``pg_url``; contract tests take it and assert the same things on both.
  - ``reg`` (function): the registry at ``registry_url``, opened, and closed after the test.

Without initdb/pg_ctl every PostgreSQL test is skipped with one reason line (``-ra``). As root
the server runs as the ``postgres`` user (initdb refuses root). The settings trade durability
for speed (fsync, synchronous_commit and full_page_writes off): a throwaway cluster only."""

from __future__ import annotations

import atexit
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path

import pytest

from waiting import wait_for

NO_BINARIES = "PostgreSQL tests skipped: no initdb/pg_ctl found (apt-get install postgresql)"
NO_USER = "PostgreSQL tests skipped: running as root and there is no 'postgres' user to run the server as"
NO_PSYCOPG = "PostgreSQL tests skipped: psycopg is not installed (pip install -r requirements-dev.txt)"

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
}
# Trust, but only over the cluster's own socket directory and loopback.
HBA = "local all all trust\nhost all all 127.0.0.1/32 trust\n"
TOOLS = ("initdb", "pg_ctl", "postgres")
# A test's database is copied from template0: measured on PostgreSQL 15 as fast as template1
# (about 35 ms either way, WAL_LOG or FILE_COPY alike), and nobody ever connects to it, whereas a
# session connected to template1 makes CREATE DATABASE fail.
TEMPLATE = "template0"


def find_bindir() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres: PATH first, then Debian's
    /usr/lib/postgresql/<version>/bin, the highest version. pg_ctl runs the postgres next
    to its own real path, so that is the directory (PATH may hold symlinks to it)."""
    pg_ctl = shutil.which("pg_ctl")
    dirs = [str(Path(pg_ctl).resolve().parent)] if pg_ctl and shutil.which("initdb") else []

    def version(d: str) -> tuple:
        return tuple(int(p) if p.isdigit() else 0 for p in Path(d).parent.name.split("."))

    dirs += sorted(glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for d in dirs:
        if all(os.access(Path(d) / t, os.X_OK) for t in TOOLS):
            return Path(d)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env() -> dict[str, str]:
    """The environment for the server's tools: no PG* variable of the developer's steers them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


@dataclass
class PgCluster:
    """One initdb'd cluster in ``root`` (data/, sock/, log), served on 127.0.0.1:``port``."""

    bindir: Path
    root: Path
    user: pwd.struct_passwd | None  # who runs the server when we are root; None: ourselves
    port: int = 0
    host: str = "127.0.0.1"
    closed: bool = field(default=False, repr=False)
    watchdog: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{dbname}"

    def _as_server_user(self) -> dict:
        """subprocess arguments that run a tool as the server's user (cwd: that user may
        not be allowed into ours)."""
        kw = {"cwd": self.root, "env": _clean_env()}
        if self.user is not None:
            kw.update(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        return kw

    def _run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **self._as_server_user())

    def watch(self) -> None:
        """A watchdog that outlives this process: when it ends however it ends (SIGKILL
        included, which no atexit handler survives) the pipe's write end closes, and the
        watchdog stops the server and removes the directory. Its own session: a Ctrl-C
        sent to the terminal's process group does not end it before it acts."""
        script = 'cat >/dev/null; "$0" -D "$1" -m immediate -w -t 60 stop; rm -rf "$2"'
        argv = ["sh", "-c", script, str(self.bindir / "pg_ctl"), str(self.data), str(self.root)]
        self.watchdog = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            **self._as_server_user(),
        )

    def init(self) -> None:
        # --no-sync: a throwaway cluster; C locale: no dependence on the machine's locales.
        args = ["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]
        out = self._run("initdb", "-D", str(self.data), *args)
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed in {self.data}:\n{out.stdout}{out.stderr}")
        (self.data / "pg_hba.conf").write_text(HBA)
        self._own(self.data / "pg_hba.conf")

    def _own(self, path: Path) -> None:
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def _configure(self) -> None:
        conf = dict(SETTINGS, port=str(self.port), unix_socket_directories=f"'{self.root / 'sock'}'")
        # postgresql.auto.conf is read last: these win over initdb's defaults.
        (self.data / "postgresql.auto.conf").write_text("".join(f"{k} = {v}\n" for k, v in conf.items()))
        self._own(self.data / "postgresql.auto.conf")

    def start(self, attempts: int = 5) -> None:
        """Start the server (same port as before if it had one), waiting until it takes
        connections. Another process may take a free port between our probe and the
        server's bind: then a new port, a few times."""
        for _ in range(attempts):
            if not self.port:
                self.port = free_port()
            self._configure()
            seen = len(self.log())
            out = self._run(
                "pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-t", "120", "start"
            )
            if out.returncode == 0:
                wait_for(self.accepts, "the PostgreSQL test server to accept connections")
                return
            if "already in use" not in self.log()[seen:]:
                break
            self.port = 0
        raise RuntimeError(f"PostgreSQL did not start:\n{out.stdout}{out.stderr}\n{self.log()[-3000:]}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server. ``fast`` (the default) checkpoints: every commit survives.
        ``immediate`` is a crash; with synchronous_commit=off the last commits may be lost."""
        out = self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "120", "stop")
        if out.returncode != 0 and self.running():
            raise RuntimeError(f"pg_ctl stop failed:\n{out.stdout}{out.stderr}")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status").returncode == 0

    def accepts(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url(), connect_timeout=10) as conn:
                return conn.execute("select 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    def log(self) -> str:
        try:
            return (self.root / "log").read_text(errors="replace")
        except OSError:
            return ""

    def admin(self, sql: str) -> None:
        """Run one statement outside a transaction (CREATE/DROP DATABASE need that)."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=30) as conn:
            conn.execute(sql)

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return name

    def drop_database(self, name: str) -> None:
        # FORCE: a pool or listener the test left open must not keep the database alive.
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        """Stop the server as a crash would (nothing to keep) and remove its directory."""
        if self.closed:
            return
        self.closed = True
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        if self.watchdog is not None:
            self.watchdog.stdin.close()  # nothing left for it to do: let it end
            self.watchdog.wait(timeout=120)


def server_user() -> pwd.struct_passwd | None:
    """Who runs the server when we are root: the ``postgres`` user (Debian's package makes
    it); None when we are not root, or there is no such user."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return None


def unavailable() -> str | None:
    """Why no cluster can be started here (the skip reason), or None."""
    if find_bindir() is None:
        return NO_BINARIES
    if importlib.util.find_spec("psycopg") is None:
        return NO_PSYCOPG
    if os.geteuid() == 0 and server_user() is None:
        return NO_USER
    return None


def _needs_cluster(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "pg_cluster" in getattr(item, "fixturenames", ()) or params.get("registry_url") == "postgres"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Without a cluster to start, the PostgreSQL tests are marked skipped at collection:
    a skip raised by the fixture would be reported once per test, a mark once per file.
    (A test reaching the cluster through another getfixturevalue still skips in the fixture.)"""
    needs = [item for item in items if _needs_cluster(item)]
    reason = unavailable() if needs else None
    for item in needs if reason else ():
        item.add_marker(pytest.mark.skip(reason=reason))


def make_cluster() -> PgCluster:
    """A started cluster in a new temporary directory (removed at exit even when the
    session's teardown does not run)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    bindir, user = find_bindir(), server_user()
    root = Path(tempfile.mkdtemp(prefix="lw-pg-"))
    (root / "sock").mkdir()
    cluster = PgCluster(bindir=bindir, root=root, user=user)
    atexit.register(cluster.close)
    for path in (root, root / "sock"):
        cluster._own(path)
    cluster.watch()
    try:
        cluster.init()
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster


@pytest.fixture(scope="session")
def pg_cluster():
    cluster = make_cluster()
    yield cluster
    cluster.close()


# Registries the tests' helpers keep open on a database to read it again and again (a test
# polls the fleet's rows): opening one costs two connections and a pool's thread.
_readers: dict[str, object] = {}


def reader(url: str):
    """A registry on ``url`` kept open for the next read; ``forget(url)`` closes it."""
    from loopwright.registry import open_registry

    if url not in _readers:
        _readers[url] = open_registry(url)
    return _readers[url]


def forget(url: str) -> None:
    reg = _readers.pop(url, None)
    if reg is not None:
        reg.close()


atexit.register(lambda: [forget(url) for url in list(_readers)])


@pytest.fixture
def pg_url(pg_cluster: PgCluster):
    """A fresh, empty database on the session's cluster; dropped after the test."""
    name = pg_cluster.create_database()
    yield pg_cluster.url(name)
    forget(pg_cluster.url(name))
    if not pg_cluster.running():
        pg_cluster.start()  # a test that stopped the server leaves it running for the next
    pg_cluster.drop_database(name)


@pytest.fixture(params=["sqlite", "postgres"])
def registry_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a registry lives: a SQLite file path, or a fresh PostgreSQL database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "registry.sqlite")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def reg(registry_url: str):
    """The registry at ``registry_url``, opened for the test and closed after it."""
    from loopwright.registry import open_registry

    r = open_registry(registry_url)
    yield r
    r.close()
