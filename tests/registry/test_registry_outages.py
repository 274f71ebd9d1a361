"""A registry when its database misbehaves: PostgreSQL restarted under an open registry (the
pool hands out live connections again, the LISTEN connection comes back), a session left in
a transaction by a stopped process (the server ends it, so its row lock cannot block a
failover), and a timeline write retried after its commit went in (not added twice)."""

from __future__ import annotations

import pytest

from loopwright.registry import RegistryError, open_registry
from waiting import wait_for


def test_a_timeline_write_made_twice_is_recorded_once(reg):
    loop = reg.submit(kind="prompt", spec={"goal": "g"}, repo="https://example.com/r.git")
    reg.claim("w1", "a")
    line = {"iteration": 1, "session": "s", "ended_at": "2026-01-01T00:00:00Z"}
    reg.add_event(loop["id"], 1, "iteration", line)
    reg.add_event(loop["id"], 1, "iteration", line)  # a retry of a write whose answer was lost
    reg.add_event(loop["id"], 1, "iteration", dict(line, iteration=2))
    assert [e["data"]["iteration"] for e in reg.events(loop["id"]) if e["kind"] == "iteration"] == [1, 2]


def _works(reg) -> bool:
    try:
        return reg.fleet_loops() == []
    except RegistryError:
        return False  # a connection that broke: the caller tries again


def test_after_a_restart_the_pool_and_the_listener_come_back(pg_cluster, pg_url):
    reg = open_registry(pg_url)
    listener = reg.backend.listener(("loopwright_queue",))
    try:
        wait_for(lambda: ("", "listening") in listener.wait(0.2), "the listener to listen")
        assert reg.fleet_loops() == []
        pg_cluster.restart()
        wait_for(lambda: _works(reg), "the registry to work again", every=0.2)
        wait_for(lambda: ("", "listening") in listener.wait(0.2), "the listener to listen again")
        loop = reg.submit(kind="prompt", spec={"goal": "g"}, repo="https://example.com/r.git")
        assert listener.wait(60) == [("loopwright_queue", loop["id"])]
    finally:
        listener.close()
        reg.close()


def test_a_session_left_in_a_transaction_is_ended_and_lets_go_of_its_row(pg_url, monkeypatch):
    from loopwright.registry import postgres

    monkeypatch.setattr(postgres, "IDLE_IN_TRANSACTION_MS", 300)  # 15 s in use: a test waits less
    stuck, other = open_registry(pg_url), open_registry(pg_url)
    try:
        loop = other.submit(kind="prompt", spec={"goal": "g"}, repo="https://example.com/r.git")
        held = stuck.backend.tx()
        tx = held.__enter__()
        tx.rows("SELECT id FROM fleet_loops WHERE id = %s FOR UPDATE", (loop["id"],))
        # Its process stops here (SIGSTOP, a paused VM): the row stays locked until the server
        # ends the session, and then another worker can claim the loop.
        assert wait_for(lambda: other.claim("w2", "b"), "the row to be let go", every=0.1)["id"] == loop["id"]
        with pytest.raises(RegistryError):
            held.__exit__(None, None, None)  # the stopped process, back: its transaction is gone
        with stuck.backend.tx() as tx:  # and its registry goes on with a new connection
            assert tx.one("SHOW idle_in_transaction_session_timeout") == {
                "idle_in_transaction_session_timeout": "300ms"
            }
    finally:
        stuck.close()
        other.close()
