"""The throwaway PostgreSQL of the test suite (tests/pgcluster.py): each test gets its own
empty database on one session cluster, the server keeps committed data across a restart,
registry_url gives a usable SQLite path and PostgreSQL URL, and the cluster is removed
even when the session's teardown never runs."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import pgcluster
from conftest import TESTS
from pgcluster import PgCluster
from waiting import wait_for

psycopg = pytest.importorskip("psycopg", reason=pgcluster.NO_PSYCOPG)

SEEN: list[str] = []  # the databases earlier tests of this module were given


def test_a_test_gets_a_database_of_its_own_to_create_tables_in(pg_url: str):
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("select current_database(), current_user, host(inet_server_addr())")
        name, user, addr = row.fetchone()
        assert (user, addr) == ("postgres", "127.0.0.1")
        assert name.startswith("t_") and pg_url.endswith(f"/{name}")
        conn.execute("create table t (id int primary key, v text)")
        conn.execute("insert into t values (1, 'one'), (2, 'two')")
        conn.commit()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("select v from t order by id").fetchall() == [("one",), ("two",)]


@pytest.mark.parametrize("turn", [1, 2])
def test_two_tests_get_different_empty_databases_and_each_is_dropped_after(pg_url: str, turn: int):
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("select table_name from information_schema.tables where table_schema='public'")
        assert tables.fetchall() == [], "a database used before"
        conn.execute("create table marker (turn int)")
        conn.commit()
        name = conn.execute("select current_database()").fetchone()[0]
        left = conn.execute("select datname from pg_database where datname = any(%s)", [SEEN]).fetchall()
    assert name not in SEEN
    assert left == [], "an earlier test's database was not dropped"
    SEEN.append(name)


def test_drop_database_removes_it_even_with_a_connection_left_open(pg_cluster: PgCluster):
    name = pg_cluster.create_database()
    leaked = psycopg.connect(pg_cluster.url(name))
    try:
        pg_cluster.drop_database(name)
        with psycopg.connect(pg_cluster.url()) as conn:
            assert conn.execute("select 1 from pg_database where datname=%s", [name]).fetchall() == []
    finally:
        leaked.close()


def test_the_server_runs_with_the_test_settings_on_its_own_socket(pg_cluster: PgCluster, pg_url: str):
    with psycopg.connect(pg_url) as conn:
        shown = {k: conn.execute(f"show {k}").fetchone()[0] for k in pgcluster.SETTINGS}
    assert shown == {k: v.strip("'") for k, v in pgcluster.SETTINGS.items()}
    sock = pg_cluster.root / "sock"
    dbname = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(host=str(sock), port=pg_cluster.port, user="postgres", dbname=dbname) as conn:
        assert conn.execute("select inet_server_addr()").fetchone() == (None,)  # a unix socket
    pid = int((pg_cluster.data / "postmaster.pid").read_text().split()[0])
    user = pgcluster.server_user()  # as root, the postgres user; else ourselves
    owner = psutil.Process(pid).uids().real
    assert owner == (user.pw_uid if user else os.getuid()) and owner != 0


def test_committed_data_survives_a_restart_and_a_stopped_server_refuses(pg_cluster: PgCluster, pg_url: str):
    with psycopg.connect(pg_url) as conn:
        conn.execute("create table kept (v text)")
        conn.execute("insert into kept values ('before the restart')")
        conn.commit()
        started = conn.execute("select pg_postmaster_start_time()").fetchone()[0]
    pg_cluster.restart()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("select v from kept").fetchall() == [("before the restart",)]
        assert conn.execute("select pg_postmaster_start_time()").fetchone()[0] != started
    pg_cluster.stop()
    try:
        assert not pg_cluster.running()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(pg_url, connect_timeout=10)
    finally:
        pg_cluster.start()
    with psycopg.connect(pg_url) as conn:  # same URL: the port is kept
        assert conn.execute("select count(*) from kept").fetchone() == (1,)


def test_registry_url_is_a_usable_sqlite_path_or_postgresql_url(registry_url: str, request, tmp_path: Path):
    if request.node.callspec.params["registry_url"] == "sqlite":
        path = Path(registry_url)
        assert path.parent == tmp_path and not path.exists()
        with sqlite3.connect(path) as db:
            db.execute("create table runs (id text)")
            db.execute("insert into runs values ('r1')")
        assert sqlite3.connect(path).execute("select id from runs").fetchall() == [("r1",)]
    else:
        assert registry_url.startswith("postgresql://postgres@127.0.0.1:")
        with psycopg.connect(registry_url) as conn:
            conn.execute("create table runs (id text)")
            conn.execute("insert into runs values ('r1')")
            assert conn.execute("select id from runs").fetchall() == [("r1",)]


def test_without_binaries_every_postgresql_test_skips_with_one_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(pgcluster, "glob", lambda pattern: [])  # as if Debian's package were absent
    with pytest.raises(pytest.skip.Exception, match=r"no initdb/pg_ctl found \(apt-get install postgresql\)"):
        pgcluster.make_cluster()


SKIPPING_CONFTEST = """
import sys
sys.path.insert(0, {tests!r})
import pgcluster
pgcluster.glob = lambda pattern: []  # as if Debian's package were absent (PATH is empty too)
from pgcluster import pg_cluster, pg_url, pytest_collection_modifyitems, registry_url
"""
SKIPPING_TESTS = """
def test_on_a_database(pg_url): pass
def test_on_the_cluster(pg_cluster): pass
def test_on_either(registry_url): pass
"""


def test_without_binaries_pytest_shows_the_reason_once_and_runs_the_sqlite_variant(tmp_path):
    (tmp_path / "conftest.py").write_text(SKIPPING_CONFTEST.format(tests=str(TESTS)))
    (tmp_path / "test_pg.py").write_text(SKIPPING_TESTS)
    (tmp_path / "empty").mkdir()
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    skipped = [line for line in out.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and skipped[0].endswith(pgcluster.NO_BINARIES), out.stdout
    assert "SKIPPED [3]" in skipped[0] and "1 passed, 3 skipped" in out.stdout, out.stdout


def test_binaries_are_found_through_symlinks_on_path(tmp_path, monkeypatch):
    real = pgcluster.find_bindir()
    if real is None:
        pytest.skip(pgcluster.NO_BINARIES)
    for tool in pgcluster.TOOLS:
        (tmp_path / tool).symlink_to(real / tool)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert pgcluster.find_bindir() == real.resolve()


SCRIPT = """
import json, os, signal, sys
sys.path[:0] = [sys.argv[1]]
import pgcluster
c = pgcluster.make_cluster()
pid = int((c.data / "postmaster.pid").read_text().split()[0])
print(json.dumps({"root": str(c.root), "pid": pid}), flush=True)
if sys.argv[2] == "killed":
    os.kill(os.getpid(), signal.SIGKILL)  # no atexit either: the watchdog must clean up
sys.exit(0)  # no teardown: the atexit fallback must stop the server and remove the directory
"""


@pytest.mark.parametrize("how", ["exits", "killed"])
def test_a_session_that_ends_without_teardown_still_stops_and_removes_its_cluster(pg_cluster, how: str):
    # pg_cluster: only so that this skips, as every PostgreSQL test, without the binaries.
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(TESTS), how], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == (-9 if how == "killed" else 0), out.stderr
    made = json.loads(out.stdout)

    def gone() -> bool:
        try:
            alive = psutil.Process(made["pid"]).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        return not alive and not Path(made["root"]).exists()

    wait_for(gone, f"the postmaster of {made['root']} to exit and its directory to go")
