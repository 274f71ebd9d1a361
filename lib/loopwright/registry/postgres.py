"""A registry in PostgreSQL, shared by the machines of a fleet (psycopg 3 with a pool).

Imported only when a ``postgresql://`` URL is given: never by a hook, never for the embedded
default. Connections that break (a restarted server, a network blip) are replaced by the pool;
the caller's transaction fails with RegistryError and is retried by whoever owns the work.
"""

from __future__ import annotations

import contextlib
import queue
import threading

from loopwright.registry.api import RegistryError
from loopwright.registry.backend import Backend, Tx
from loopwright.registry.url import shown

CONNECT_SECONDS = 10.0


def _modules():
    try:
        import psycopg
        import psycopg_pool
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise RegistryError(
            f"a PostgreSQL registry needs the fleet packages ({exc.name} is missing): pip install "
            "'loopwright[fleet]', or in the plugin set LOOPWRIGHT_DATABASE_URL and start a new session"
        ) from None
    return psycopg, psycopg_pool, dict_row


class PostgresBackend(Backend):
    dialect = "postgres"
    NOW = "extract(epoch from clock_timestamp())::double precision"

    def __init__(self, url: str, max_size: int = 8) -> None:
        self.psycopg, pool_mod, self.dict_row = _modules()
        self.url, self.shown, self.path = url, shown(url), None
        self._check(url)
        self.pool = pool_mod.ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            timeout=CONNECT_SECONDS,
            check=pool_mod.ConnectionPool.check_connection,
            kwargs={"autocommit": False, "connect_timeout": int(CONNECT_SECONDS)},
            open=True,
            name="loopwright",
        )

    def _check(self, url: str) -> None:
        """One connection first, so that a wrong URL or a server that is down is one clear line."""
        try:
            self.psycopg.connect(url, connect_timeout=int(CONNECT_SECONDS)).close()
        except self.psycopg.Error as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            fix = "start it, or fix --db / $LOOPWRIGHT_DATABASE_URL"
            raise RegistryError(f"cannot reach the database {self.shown}: {why}; {fix}") from None

    @contextlib.contextmanager
    def tx(self):
        try:
            with self.pool.connection() as conn, conn.transaction():
                yield Tx(conn.cursor(row_factory=self.dict_row), self.render)
        except self.psycopg.OperationalError as exc:
            raise RegistryError(f"the database {self.shown} went away: {str(exc).strip()[:200]}") from None

    def notify(self, tx: Tx, channel: str, payload: str = "") -> None:
        tx.rows("SELECT pg_notify(%s, %s)", (channel, payload))

    def listener(self, channels: tuple[str, ...]):
        return _Listener(self, channels)

    def close(self) -> None:
        self.pool.close()


class _Listener:
    """LISTEN on a connection of its own, read by a thread; reconnects when it breaks."""

    def __init__(self, backend: PostgresBackend, channels: tuple[str, ...]) -> None:
        self.backend, self.channels = backend, channels
        self.inbox: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._conn = None
        self._thread = threading.Thread(target=self._run, name="loopwright-listen", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        psycopg = self.backend.psycopg
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.backend.url, autocommit=True, connect_timeout=10) as conn:
                    self._conn = conn
                    for ch in self.channels:
                        conn.execute(f'LISTEN "{ch}"')
                    self.inbox.put(("", "listening"))  # anything missed while away: callers poll now
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self.inbox.put((note.channel, note.payload))
            except psycopg.Error:
                self._stop.wait(1.0)  # the server went away: try again shortly

    def wait(self, timeout: float) -> list:
        out = []
        try:
            out.append(self.inbox.get(timeout=timeout))
            while True:
                out.append(self.inbox.get_nowait())
        except queue.Empty:
            pass
        return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
