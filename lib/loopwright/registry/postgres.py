"""A registry in PostgreSQL, shared by the machines of a fleet (psycopg 3 with a pool).

Imported only when a ``postgresql://`` URL is given: never by a hook, never for the embedded
default. Connections that break (a restarted server, a network blip) are replaced by the pool;
the caller's transaction fails with RegistryError and is retried by whoever owns the work.

Round trips are much of what a claim costs (bench/bench_fleet.py): a connection is checked
before use only when it sat idle a while or one just failed, and :meth:`PostgresBackend.once`
runs one statement without BEGIN and COMMIT around it. Nothing the database answers is cached.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import weakref

from loopwright.registry.api import RegistryError
from loopwright.registry.backend import Backend, Tx
from loopwright.registry.url import shown

CONNECT_SECONDS = 10.0
IDLE_CHECK_SECONDS = 5.0  # a connection idle longer is checked (one round trip) before use
# A session that sits in a transaction this long is ended by the server: a worker stopped in the
# middle of one (a paused VM, SIGSTOP, a machine cut off) must not keep a loop's row locked, or
# no other worker could take the loop over once its lease ran out. Every transaction here is a
# few statements with no waiting in between.
IDLE_IN_TRANSACTION_MS = 15_000
_QUIET = logging.NullHandler()


def _modules():
    try:
        import psycopg
        import psycopg_pool
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise RegistryError(
            f"a PostgreSQL registry needs the fleet packages ({exc.name} is missing): pip install "
            "'/path/to/loopwright[fleet]' from a checkout (it is not on PyPI), or in the plugin set "
            "LOOPWRIGHT_DATABASE_URL and start a new session"
        ) from None
    # The pool's own warnings (each failed reconnection, on stderr, several lines each) are not
    # printed: every caller reports a database that went away as one line of its own.
    logging.getLogger("psycopg").addHandler(_QUIET)  # once: the same handler is not added twice
    return psycopg, psycopg_pool, dict_row


class PostgresBackend(Backend):
    dialect = "postgres"
    NOW = "extract(epoch from clock_timestamp())::double precision"

    def __init__(self, url: str, max_size: int = 8) -> None:
        self.psycopg, pool_mod, self.dict_row = _modules()
        self.tuples_ok = self.psycopg.pq.ExecStatus.TUPLES_OK
        self.url, self.shown, self.path = url, shown(url), None
        self._check(url)
        self._used: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> last use
        self.pool = pool_mod.ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            timeout=CONNECT_SECONDS,
            check=self._check_idle,
            configure=self._configure,
            # Autocommit: a statement of once() is a transaction of its own; tx() opens one.
            # Every statement is prepared the first time a connection runs it (psycopg's default
            # waits for the fifth): the claim's statement costs more to plan than to run, and a
            # worker that starts claiming at once would otherwise plan it anew five times.
            kwargs={"autocommit": True, "connect_timeout": int(CONNECT_SECONDS), "prepare_threshold": 0},
            open=True,
            name="loopwright",
        )

    @staticmethod
    def _configure(conn) -> None:
        conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")

    def _check_idle(self, conn) -> None:
        """The pool's check before handing out ``conn``: a round trip, so only for a connection
        that sat idle a while (the server may have restarted meanwhile). When one in use fails,
        :meth:`_connection` has the pool check all the idle ones at once."""
        if time.monotonic() - self._used.get(conn, 0.0) > IDLE_CHECK_SECONDS:
            self.pool.check_connection(conn)

    def _check(self, url: str) -> None:
        """One connection first, so that a wrong URL or a server that is down is one clear line."""
        try:
            self.psycopg.connect(url, connect_timeout=int(CONNECT_SECONDS)).close()
        except self.psycopg.Error as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            fix = "start it, or fix --db / $LOOPWRIGHT_DATABASE_URL"
            if "password" in why or "authentication" in why:
                fix = "give the role's password in ~/.pgpass (or $PGPASSFILE, $PGPASSWORD), never in the URL"
            raise RegistryError(f"cannot reach the database {self.shown}: {why}; {fix}") from None

    @contextlib.contextmanager
    def _connection(self):
        conn = None
        try:
            with self.pool.connection() as conn:
                yield conn
                self._used[conn] = time.monotonic()
        except self.psycopg.Error as exc:
            # The connection is gone (the server restarted, or ended a session left idle in a
            # transaction: an InternalError, not an OperationalError); other errors are the caller's.
            if not isinstance(exc, self.psycopg.OperationalError) and not (conn is not None and conn.closed):
                raise
            with contextlib.suppress(self.psycopg.Error):  # the others are likely broken too:
                self.pool.check()  # replace them now rather than one failed transaction each
            raise RegistryError(f"the database {self.shown} went away: {str(exc).strip()[:200]}") from None

    def _tx_on(self, conn) -> Tx:
        return PgTx(conn.cursor(row_factory=self.dict_row), self.render, self.tuples_ok)

    @contextlib.contextmanager
    def tx(self):
        with self._connection() as conn, conn.transaction():
            yield self._tx_on(conn)

    def once(self, sql: str, args: tuple = ()) -> list[dict]:
        with self._connection() as conn:
            return self._tx_on(conn).rows(sql, args)

    def row_fault(self, exc: BaseException) -> str | None:
        # A data exception (numeric overflow, invalid text) or an integrity one (a check or
        # not-null constraint): SQLSTATE classes 22 and 23, the row's, never the connection's.
        if isinstance(exc, (self.psycopg.DataError, self.psycopg.IntegrityError)):
            text = str(exc).strip().splitlines()
            return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
        return None

    def notify(self, tx: Tx, channel: str, payload: str = "") -> None:
        tx.rows("SELECT pg_notify(%s, %s)", (channel, payload))

    def listener(self, channels: tuple[str, ...]):
        return _Listener(self, channels)

    def close(self) -> None:
        self.pool.close()


class PgTx(Tx):
    """Rows come as dicts from the cursor itself."""

    def __init__(self, cursor, render, tuples_ok) -> None:
        super().__init__(cursor, render)
        self._tuples_ok = tuples_ok

    def rows(self, sql: str, args: tuple = ()) -> list[dict]:
        self._cur.execute(self._render(sql), args)
        # The result's status, not cursor.description: that builds a description of every column.
        return self._cur.fetchall() if self._cur.pgresult.status == self._tuples_ok else []


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
