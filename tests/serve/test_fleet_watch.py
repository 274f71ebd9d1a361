"""The monitor's fleet watcher (serve/fleetwatch.py): on PostgreSQL a worker's iteration reaches
it by NOTIFY (with its slow poll an hour away), on SQLite its poll of the registry's mark sees
the same; one snapshot is built per change, whoever asks."""

from __future__ import annotations

from loopwright.registry import open_registry
from loopwright.serve.fleetwatch import FleetWatch
from waiting import wait_for


def submit(reg, name):
    return reg.submit(kind="prompt", spec={"goal": "g"}, repo="https://example.com/r.git", name=name)


def listening(url: str) -> bool:
    """Whether a session on this database is LISTENing on the progress channel."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN %%loopwright_progress%%'"
        ).fetchone()
    return row[0] > 0


def test_an_iteration_reaches_the_watch_by_notify_on_postgresql(pg_url):
    reg = open_registry(pg_url)
    watch = FleetWatch(reg, poll=3600.0)  # one look at the mark at start, then only notifications
    try:
        submit(reg, "a")
        row = reg.claim("w", "h", lease=60)
        watch.start()
        wait_for(lambda: listening(pg_url), "the watch to listen")
        seen = wait_for(lambda: watch.version, "the watch's first look")
        reg.progress(row["id"], row["generation"], iteration=1)
        wait_for(lambda: watch.version > seen, "the iteration's notification")
        _, text = watch.current()
        assert '"iteration":1' in text.replace(" ", "")
    finally:
        watch.stop()
        reg.close()


def test_the_slow_poll_sees_what_notifies_nobody(reg):
    submit(reg, "a")
    watch = FleetWatch(reg, poll=0.1)
    try:
        watch.start()
        seen = wait_for(lambda: watch.version, "the watch's first look")
        reg.claim("w", "h", lease=60)  # a claim notifies nobody
        wait_for(lambda: watch.version > seen, "the poll to see the claim")
        assert '"status":"running"' in watch.current()[1].replace(" ", "")
    finally:
        watch.stop()


def test_one_snapshot_per_change(tmp_path):
    reg = open_registry(str(tmp_path / "runs.sqlite"))  # no notifications: no change but ours
    submit(reg, "a")
    watch = FleetWatch(reg, poll=3600.0)
    try:
        watch.start()
        wait_for(lambda: watch.version, "the watch's first look")
        first = watch.current()
        assert watch.current() is first  # asked again, nothing changed: the same text
        submit(reg, "b")
        watch.changed()
        second = watch.current()
        assert second[0] > first[0] and '"b"' in second[1] and '"b"' not in first[1]
    finally:
        watch.stop()
        reg.close()
