"""The connector: one pool, autocommit reads, a statement timeout, errors that say the fix."""

import logging
import math
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from outbox_monitor.config.settings import Settings
from outbox_monitor.errors import (
    DatabaseUnavailable,
    OutboxMonitorError,
)
from outbox_monitor.store.borrowed_pool import borrowed, pool_conninfo
from outbox_monitor.store.db_errors import (
    ACTIONS_DSN_SETTING,
    PRIMARY_DSN_SETTING,
    READ_DSN_SETTING,
    connect_error,
    describe_target,
    mapped_errors,
)
from outbox_monitor.store.queries import compose

# the logger keeps its name from before the move into a package (log filters use it)
log = logging.getLogger("outbox_monitor.db")

APPLICATION_NAME = "outbox-monitor"
CONNECT_TIMEOUT_SECONDS = 5
POOL_MAX_SIZE = 4
POOL_WORKERS = 3
"""Background threads of a ``Database``'s own pool (psycopg_pool's default; a fleet's
scheduler, with a pool per outbox, uses 1)."""
Purpose = Literal["read", "actions", "primary"]
"""What a ``Database`` is for: reads (``OUTBOX_MONITOR_DSN``, possibly a hot standby),
operator actions (``OUTBOX_MONITOR_ACTIONS_DSN``, else the read DSN) or the scheduler's
writes (``OUTBOX_MONITOR_PRIMARY_DSN``, else the read DSN)."""


class MonitorConnection(psycopg.Connection):
    """A psycopg connection that remembers the statement it ran last (``last_statement``),
    so that a "permission denied" can name the privilege that statement needed."""

    last_statement: Any = None


class _RecordingCursor(psycopg.Cursor):
    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> "_RecordingCursor":
        # On a MonitorConnection, or a caller's connection while we use it (borrowed_pool
        # gives back its own last_statement, or none, when we return it).
        with suppress(AttributeError):
            self.connection.last_statement = query  # type: ignore[attr-defined]
        return super().execute(query, params, **kwargs)


def _timeout_ms(seconds: float) -> int:
    """Whole milliseconds, rounded up (after a µs rounding, so 1.1 s stays 1100 ms):
    Postgres reads 0 as "no timeout", so 0.4 ms must become 1 ms, never 0."""
    return max(1, math.ceil(round(seconds * 1000, 3)))


def _connection_kwargs(statement_timeout: float | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "row_factory": dict_row,
        "cursor_factory": _RecordingCursor,
        "application_name": APPLICATION_NAME,
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        # Text as UTF-8 whatever the database's encoding: on a SQL_ASCII database psycopg
        # would otherwise refuse non-ASCII parameters and return text columns as bytes.
        "client_encoding": "UTF8",
        # No server-side prepared statements: a generic plan cached before an index
        # existed (or for one event-type pattern) must not stick to a monitor query.
        "prepare_threshold": None,
    }
    if statement_timeout is not None:
        kwargs["options"] = f"-c statement_timeout={_timeout_ms(statement_timeout)}"
    return kwargs


def _own_pool(settings: Settings, max_size: int, workers: int) -> ConnectionPool[MonitorConnection]:
    """The pool a ``Database`` opens (on first use) and closes itself; ``workers`` are its
    background threads (connecting, growing)."""
    return ConnectionPool(
        settings.dsn or "",
        connection_class=MonitorConnection,
        kwargs=_connection_kwargs(settings.statement_timeout),
        min_size=1,
        max_size=max_size,
        num_workers=workers,
        open=False,
        check=ConnectionPool.check_connection,
        name=APPLICATION_NAME,
        reconnect_timeout=0,
    )


class Database:
    """The one pool of a process, and every way the package talks to Postgres.

    Reads run on autocommit connections (never "idle in transaction") with
    ``statement_timeout`` and ``application_name=outbox-monitor``; rows are dicts.
    ``table`` and ``ledger`` are ``psycopg.sql.Identifier`` of the configured tables;
    ``table_regclass`` is the table as quoted SQL text, for a ``%(x)s::regclass`` parameter.

    ``purpose`` says which login it uses: ``"read"`` connects with ``settings.dsn``
    (``OUTBOX_MONITOR_DSN``); ``"actions"`` with ``settings.actions_target``
    (``OUTBOX_MONITOR_ACTIONS_DSN``, else the read DSN); ``"primary"`` with
    ``settings.primary_target`` (``OUTBOX_MONITOR_PRIMARY_DSN``, else the read DSN: the
    scheduler's writes); ``db.settings.dsn`` is then that DSN. Left out, it is
    ``"actions"`` for settings whose ``dsn`` is their ``actions_dsn`` (as
    ``ui.state.actions_database`` makes them), else ``"read"``.
    ``dsn_setting`` is the setting named in hints (a missing privilege, a wrong DSN).

    ``pool``: a ``psycopg_pool.ConnectionPool`` of the caller's, opened and closed by the
    caller (``close()`` leaves it open; ``max_size`` and ``pool_workers`` are then unused).
    Each connection taken from it has, while the monitor uses it, the session above
    (autocommit, dict rows, the statement timeout in ms, UTF8, no server-side prepared
    statements, the recording cursor), and its own settings back afterwards (``borrowed_pool``). Its
    ``application_name`` and type adapters stay the caller's. ``settings.dsn`` (or the
    actions DSN) should point where the pool does: it is only used to diagnose a
    connection failure and for ``direct_connection``; when it is ``None`` it is the
    pool's ``conninfo`` with the libpq parameters of its ``kwargs`` (``pool_conninfo``).
    A pool timing out is diagnosed with that DSN, but never skipped: the next use waits
    for the pool again, whose reconnection is the caller's.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        purpose: Purpose | None = None,
        dsn_setting: str | None = None,
        max_size: int = POOL_MAX_SIZE,
        pool: ConnectionPool[Any] | None = None,
        pool_workers: int = POOL_WORKERS,
    ) -> None:
        if purpose is None:
            same = settings.actions_dsn is not None and settings.actions_dsn == settings.dsn
            purpose = "actions" if same else "read"
        target = {"actions": settings.actions_target, "primary": settings.primary_target}
        if purpose in target and settings.dsn != target[purpose]:
            settings = settings.model_copy(update={"dsn": target[purpose]})
        if pool is not None and settings.dsn is None:
            settings = settings.model_copy(update={"dsn": pool_conninfo(pool)})
        self.settings = settings
        self.purpose: Purpose = purpose
        self.dsn_setting = dsn_setting or (
            ACTIONS_DSN_SETTING
            if purpose == "actions" and settings.actions_dsn
            else PRIMARY_DSN_SETTING
            if purpose == "primary" and settings.primary_dsn
            else READ_DSN_SETTING
        )
        self.table = sql.Identifier(*settings.table_parts)
        self.ledger = sql.Identifier(*settings.ledger_parts)
        self.table_name = ".".join(settings.table_parts)
        self.table_regclass = self.table.as_string()
        self._owns_pool = pool is None
        self._pool = pool if pool is not None else _own_pool(settings, max_size, pool_workers)
        self._opened = False
        self._failing = False
        self._pinned = threading.local()

    def _mapped_errors(self, conn: psycopg.Connection | None) -> Any:
        return mapped_errors(
            self.settings,
            conn=conn,
            dsn_setting=self.dsn_setting,
            acting=self.purpose == "actions",
        )

    def _adopted(self, conn: psycopg.Connection) -> AbstractContextManager[Any]:
        """Our session on a connection of the caller's pool for the block (ours: as is)."""
        if self._owns_pool:
            return nullcontext()
        return borrowed(
            conn,
            statement_timeout_ms=_timeout_ms(self.settings.statement_timeout),
            cursor_factory=_RecordingCursor,
            errors=self._mapped_errors,
        )

    def close(self) -> None:
        """Close the pool and its connections; the object may not be used afterwards.
        A caller's pool (``pool=``) is left open, its connections returned."""
        if self._owns_pool and self._opened:
            self._pool.close()
            self._opened = False

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled autocommit connection with the statement timeout (inside ``session()``:
        the session's connection).

        Raises:
            DatabaseUnavailable: no connection within the connect timeout; the message
                carries libpq's reason (wrong host, password, database) without secrets.
            psycopg_pool.PoolClosed: a caller's pool is not open (it is never opened
                here).
        """
        pinned = getattr(self._pinned, "conn", None)
        if pinned is not None:
            with self._mapped_errors(pinned):
                yield pinned
            return
        if self._owns_pool and (not self._opened or self._failing):
            # First use, or the last attempt failed: a direct connect says at once (and
            # why) whether the server is back, instead of waiting out the pool timeout.
            self._check_reachable()
        if self._owns_pool and not self._opened:
            self._pool.open(wait=False)
            self._opened = True
        try:
            with (
                self._pool.connection(timeout=CONNECT_TIMEOUT_SECONDS + 1) as conn,
                self._adopted(conn),
                self._mapped_errors(conn),
            ):
                yield conn
        except PoolTimeout:
            self._failing = True
            raise self._diagnose_unreachable() from None
        except DatabaseUnavailable:
            self._failing = True
            raise
        self._failing = False

    @contextmanager
    def session(self) -> Iterator[None]:
        """Run every query of the block, in this thread, on one pooled connection: one
        checkout (and one liveness check) for a group of reads, such as the dozen
        statements of ``metrics.status``, instead of one per statement. Nested sessions
        share the outer one's connection.

        Raises:
            The errors of ``connection``.
        """
        if getattr(self._pinned, "conn", None) is not None:
            yield
            return
        with self.connection() as conn:
            self._pinned.conn = conn
            try:
                yield
            finally:
                self._pinned.conn = None

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """A pooled connection inside one transaction, committed when the block ends.

        Raises:
            DatabaseUnavailable and the errors of ``mapped_errors``; an exception in the
            block rolls the transaction back and propagates.
        """
        with self.connection() as conn, conn.transaction():
            yield conn

    @contextmanager
    def direct_connection(self, *, statement_timeout: float | None) -> Iterator[psycopg.Connection]:
        """A connection outside the pool (for ``CREATE INDEX CONCURRENTLY``, long admin work).

        Args:
            statement_timeout: seconds, or ``None`` for no timeout.
        """
        try:
            conn = MonitorConnection.connect(
                self.settings.dsn or "", **_connection_kwargs(statement_timeout)
            )
        except psycopg.OperationalError as error:
            raise connect_error(error, self.settings, self.dsn_setting) from None
        with conn, self._mapped_errors(conn):
            yield conn

    def _check_reachable(self) -> None:
        """Fail fast, with libpq's reason, before the pool starts retrying in the background."""
        try:
            psycopg.connect(
                self.settings.dsn or "",
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                application_name=APPLICATION_NAME,
            ).close()
        except psycopg.OperationalError as error:
            self._failing = True
            raise connect_error(error, self.settings, self.dsn_setting) from None

    def _diagnose_unreachable(self) -> OutboxMonitorError:
        try:
            self._check_reachable()
        except DatabaseUnavailable as error:
            return error
        return DatabaseUnavailable(
            f"timed out waiting for a pooled connection to {describe_target(self.settings.dsn)}",
            hint="The database is slow or at max_connections; the monitor retries."
            if self._owns_pool
            else "The pool given to the monitor had no free connection (all in use, or "
            "reconnecting); the monitor retries.",
        )

    @property
    def alert_outbox(self) -> str:
        """The key of this outbox's alert state (``settings.fleet_outbox``: its name in the
        fleet file, ``""`` without one): the ``outbox`` column of ``alert_instances``,
        ``alert_transitions`` and ``notifications`` (migration 017)."""
        return self.settings.fleet_outbox

    def compose(self, name: str, **fragments: sql.Composable) -> sql.Composed:
        """A named query with ``{table}`` and ``{ledger}`` bound to the configured tables."""
        return compose(name, table=self.table, ledger=self.ledger, **fragments)

    def fetch_all(
        self, name: str, params: dict[str, Any] | None = None, **fragments: sql.Composable
    ) -> list[dict[str, Any]]:
        """Run a named read query and return every row.

        Args:
            name: block name in ``sql/queries.sql``.
            params: its ``%(named)s`` parameters.
            **fragments: extra placeholders (e.g. ``and_filters``).

        Returns:
            A list of dict rows (column → value).

        Raises:
            The errors of ``connection`` and ``mapped_errors``.
        """
        with self.connection() as conn:
            return conn.execute(self.compose(name, **fragments), params or {}).fetchall()

    def fetch_one(
        self, name: str, params: dict[str, Any] | None = None, **fragments: sql.Composable
    ) -> dict[str, Any] | None:
        """Like ``fetch_all`` but returns the first row, or ``None`` when there is none."""
        with self.connection() as conn:
            return conn.execute(self.compose(name, **fragments), params or {}).fetchone()


def database_now(db: Database) -> datetime:
    """The database clock (``now()``), the reference for relative time filters (SPEC §2).

    Raises:
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    return db.fetch_one("db_now")["now"]


@contextmanager
def lock_timeout(
    conn: psycopg.Connection, seconds: float, *, local: bool = False
) -> Iterator[None]:
    """Run the block with a ``lock_timeout`` of ``seconds``: DDL on the outbox then waits at
    most that long for its lock and fails with ``psycopg.errors.LockNotAvailable`` rather than
    queue the workers' statements behind it. For the session (none again after the block) or,
    with ``local``, for the rest of the caller's transaction."""
    milliseconds = str(max(1, round(seconds * 1000)))
    conn.execute(compose("set_lock_timeout"), {"milliseconds": milliseconds, "local": local})
    try:
        yield
    finally:
        if not local and not conn.closed:
            conn.execute(compose("set_lock_timeout"), {"milliseconds": "0", "local": False})
