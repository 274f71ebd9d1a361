"""`loopwright db status` through bin/loopwright as a process: the database (a password never
shown), its schema version, the latest known and each step; --json; and one line with exit
code 1, no traceback, for a database that is down or newer than this loopwright."""

from __future__ import annotations

import json
import subprocess

from conftest import REPO, lw_env, one_line_error
from loopwright.registry import migrate, open_registry
from pgcluster import free_port


def db_status(tmp_path, *args, **env):
    return subprocess.run(
        [str(REPO / "bin" / "loopwright"), "db", "status", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=lw_env(XDG_DATA_HOME=str(tmp_path / "data"), **env),
        timeout=120,
    )


def test_status_shows_the_database_its_version_and_each_step(registry_url, tmp_path):
    out = db_status(tmp_path, "--db", registry_url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    kind = "PostgreSQL" if registry_url.startswith("postgresql://") else "SQLite"
    assert lines[0] == f"database: {registry_url} ({kind})"
    latest = migrate.latest()
    assert lines[1] == f"schema version: {latest} (the latest this loopwright knows: {latest})"
    assert [line.split()[:3] for line in lines[2:]] == [
        ["1", "runs", "applied"],
        ["2", "fleet", "applied"],
        ["3", "limits", "applied"],
        ["4", "items", "applied"],
        ["5", "worker_policy", "applied"],
        ["6", "claims", "applied"],
        ["7", "reservations", "applied"],
        ["8", "worker_stopped", "applied"],
        ["9", "causes", "applied"],
    ]
    assert len({line.index(" applied ") for line in lines[2:]}) == 1  # a column, whatever the names
    data = json.loads(db_status(tmp_path, "--json", LOOPWRIGHT_DATABASE_URL=registry_url).stdout)
    assert (data["where"], data["version"], data["latest"]) == (registry_url, 9, 9)
    assert [(s["version"], s["name"]) for s in data["steps"]] == [
        (1, "runs"),
        (2, "fleet"),
        (3, "limits"),
        (4, "items"),
        (5, "worker_policy"),
        (6, "claims"),
        (7, "reservations"),
        (8, "worker_stopped"),
        (9, "causes"),
    ]


def test_without_a_url_it_is_the_monitors_own_file(tmp_path):
    out = db_status(tmp_path, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["where"] == str(tmp_path / "data" / "loopwright" / "serve" / "runs.sqlite")


def test_a_password_in_the_url_is_never_shown(pg_url, tmp_path):
    url = pg_url.replace("postgresql://postgres@", "postgresql://postgres:s3cret-pw@")
    out = db_status(tmp_path, "--db", url)
    assert out.returncode == 0, out.stderr
    assert "postgres:***@" in out.stdout and "s3cret-pw" not in out.stdout + out.stderr
    down = db_status(tmp_path, "--db", f"postgresql://lw:s3cret-pw@127.0.0.1:{free_port()}/fleet")
    line = one_line_error(down)
    assert "cannot reach the database postgresql://lw:***@127.0.0.1" in line and "s3cret-pw" not in line


def test_a_schema_newer_than_this_loopwright_is_one_line(registry_url, tmp_path):
    reg = open_registry(registry_url)
    with reg.backend.tx() as tx:
        tx.run("INSERT INTO schema_version (version, name, applied_at) VALUES (%s, 'future', 0)", (99,))
    reg.close()
    line = one_line_error(db_status(tmp_path, "--db", registry_url))
    assert "schema version 99, newer than this loopwright knows" in line


def test_a_bad_url_is_one_line(tmp_path):
    line = one_line_error(db_status(tmp_path, "--db", "mysql://u:pw@h/db"))
    assert "postgresql://" in line
