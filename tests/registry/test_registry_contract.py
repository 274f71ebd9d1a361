"""The registry itself, the same assertions on SQLite and PostgreSQL: which database a URL
picks, the numbered migrations and their status, a schema newer than this loopwright refused,
and the monitor's runs. On PostgreSQL: two processes migrating one fresh database at once
migrate it once (the advisory lock)."""

from __future__ import annotations

import pytest

import racers
from loopwright.registry import ENV, Busy, RegistryError, migrate, open_registry
from loopwright.registry.url import shown
from waiting import wait_for


def test_a_new_registry_has_every_step_and_reopening_applies_none(reg, registry_url):
    status = reg.schema_status()
    kind = "postgres" if registry_url.startswith("postgresql://") else "sqlite"
    assert (status["database"], status["version"], status["latest"]) == (
        kind,
        migrate.latest(),
        migrate.latest(),
    )
    assert [(s["version"], s["name"]) for s in status["steps"]] == [
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
    assert all(s["applied_at"] > 0 for s in status["steps"])
    assert migrate.apply(reg.backend) == []
    again = open_registry(registry_url)
    try:
        assert again.schema_status() == status
    finally:
        again.close()


def test_a_registry_newer_than_this_loopwright_is_refused_in_one_line(reg, registry_url):
    with reg.backend.tx() as tx:
        record = "INSERT INTO schema_version (version, name, applied_at) VALUES (%s, 'future', {now})"
        tx.run(record, (migrate.latest() + 1,))
    with pytest.raises(RegistryError) as err:
        open_registry(registry_url)
    message = str(err.value)
    assert "\n" not in message and f"schema version {migrate.latest() + 1}" in message
    assert "upgrade loopwright" in message


def test_the_url_picks_the_database_explicit_first_then_the_environment_then_the_default(
    registry_url, tmp_path, monkeypatch
):
    default = tmp_path / "default.sqlite"
    monkeypatch.delenv(ENV, raising=False)
    fallback = open_registry(None, default=str(default))
    assert (fallback.backend.dialect, fallback.path) == ("sqlite", str(default))
    fallback.close()
    monkeypatch.setenv(ENV, registry_url)
    chosen = open_registry(None, default=str(tmp_path / "unused.sqlite"))
    writer = open_registry(registry_url)
    try:
        run = writer.add("S1", "/p")
        assert chosen.get(run["id"])["session"] == "S1"  # one database behind both
        assert not (tmp_path / "unused.sqlite").exists()
        explicit = open_registry(str(tmp_path / "explicit.sqlite"))
        assert explicit.path == str(tmp_path / "explicit.sqlite") and explicit.get(run["id"]) is None
        explicit.close()
    finally:
        chosen.close()
        writer.close()
    if registry_url.startswith("postgresql://"):
        alias = open_registry("postgres://" + registry_url.split("://", 1)[1])
        assert alias.path is None and alias.get(run["id"]) is not None
        alias.close()
    else:
        prefixed = open_registry("sqlite:" + registry_url)
        assert prefixed.path == registry_url and prefixed.get(run["id"]) is not None
        prefixed.close()


def test_an_unknown_scheme_is_one_line_naming_the_fix_and_a_password_is_never_shown(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    for url in ("mysql://u@h/db", "sqlite://x"):
        with pytest.raises(RegistryError, match=r"postgresql://.*file path"):
            open_registry(url)
    with pytest.raises(RegistryError, match="--db"):
        open_registry(None)
    assert (
        shown("postgresql://lw:s3cret@db.example:5432/fleet") == "postgresql://lw:***@db.example:5432/fleet"
    )
    assert shown("postgres://lw@db.example/fleet") == "postgres://lw@db.example/fleet"


def test_runs_one_live_run_per_session_and_task_directory(reg):
    run = reg.add("S1", "/proj", task_dir="/proj/tasks/a", max_iterations=5, max_minutes=2.5)
    assert (run["status"], run["iteration"], run["max_iterations"], run["max_minutes"]) == (
        "starting",
        0,
        5,
        2.5,
    )
    with pytest.raises(Busy):
        reg.add("S1", "/proj")
    with pytest.raises(Busy):
        reg.add("S2", "/proj", task_dir="/proj/tasks/a")
    reg.update(run["id"], status="running", iteration=3, pid=4242, loop="main", nonsense="ignored")
    got = reg.get(run["id"])
    assert (got["status"], got["iteration"], got["pid"], got["loop"]) == ("running", 3, 4242, "main")
    assert "nonsense" not in got
    assert reg.live_for(session="S1")["id"] == run["id"]
    assert reg.live_for(task_dir="/proj/tasks/a")["id"] == run["id"]
    assert [r["id"] for r in reg.live()] == [run["id"]]
    reg.update(run["id"], status="waiting_gate")
    assert reg.live_for(session="S1") is None and reg.live() == []
    assert reg.waiting_run("/proj", "main")["id"] == run["id"]
    assert reg.waiting_run("/proj", "other") is None
    second = reg.add("S1", "/proj")  # the session is free again
    # Newest first by created_at, which counts seconds: within one second either order.
    assert sorted(r["id"] for r in reg.all()) == sorted([second["id"], run["id"]])
    assert len(reg.all(limit=1)) == 1
    assert reg.get("missing") is None


def test_runs_notices_are_told_once(reg):
    since = reg.notify_since()
    assert reg.notify_since() == since
    assert reg.first_notice("loop-a:ended") is True
    assert reg.first_notice("loop-a:ended") is False
    assert reg.first_notice("loop-b:ended") is True


def _migrate(url: str, out) -> None:
    from loopwright.registry.postgres import PostgresBackend

    backend = PostgresBackend(url, max_size=1)
    try:
        out.put(migrate.apply(backend))
    except Exception as exc:  # the test shows what went wrong
        out.put(repr(exc))
    finally:
        backend.close()


def test_two_processes_migrating_one_fresh_database_at_once_migrate_it_once(pg_url):
    import psycopg

    racing = racers.context(__name__)
    out = racing.Queue()
    holder = psycopg.connect(pg_url)
    # Hold the migrations' lock until both processes wait for it: they then start together.
    holder.execute("SELECT pg_advisory_xact_lock(%s)", (migrate.LOCK_KEY,))
    procs = [racing.Process(target=_migrate, args=(pg_url, out)) for _ in range(2)]
    for p in procs:
        p.start()
    waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    with psycopg.connect(pg_url, autocommit=True) as watch:

        def both_wait() -> bool:
            assert all(p.is_alive() for p in procs), "a process migrated without waiting for the lock"
            return watch.execute(waiting).fetchone()[0] == 2

        wait_for(both_wait, "both processes to wait for the lock")
    holder.commit()
    holder.close()
    results = sorted((out.get(timeout=120) for _ in procs), key=len)
    for p in procs:
        p.join(timeout=120)
    assert results == [[], list(range(1, migrate.latest() + 1))]
    with psycopg.connect(pg_url) as conn:
        versions = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert versions == [(v,) for v in range(1, migrate.latest() + 1)]
