"""The connector: one pool, autocommit reads, a statement timeout, errors that say the fix."""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from outbox_monitor.config import Settings
from outbox_monitor.errors import (
    DatabaseUnavailable,
    OutboxMonitorError,
    PermissionDenied,
    QueryTimeout,
    SchemaNotInitialised,
    TableMissing,
)
from outbox_monitor.queries import compose

log = logging.getLogger(__name__)

APPLICATION_NAME = "outbox-monitor"
CONNECT_TIMEOUT_SECONDS = 5
POOL_MAX_SIZE = 4


def describe_target(dsn: str | None) -> str:
    """Where a DSN points, without its password: ``user@host:port/dbname``.

    Args:
        dsn: a libpq connection string or URI, or ``None`` (libpq ``PG*`` variables).

    Returns:
        A short description safe for logs, pages and error messages.
    """
    try:
        parts = conninfo_to_dict(dsn or "")
    except psycopg.ProgrammingError:
        return "an unparsable DSN"
    host = parts.get("host") or parts.get("hostaddr") or "local socket"
    port = parts.get("port") or "5432"
    return f"{parts.get('user') or 'default user'}@{host}:{port}/{parts.get('dbname') or '?'}"


def _connection_kwargs(statement_timeout: float | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "row_factory": dict_row,
        "application_name": APPLICATION_NAME,
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        # No server-side prepared statements: a generic plan cached before an index
        # existed (or for one event-type pattern) must not stick to a monitor query.
        "prepare_threshold": None,
    }
    if statement_timeout is not None:
        kwargs["options"] = f"-c statement_timeout={round(statement_timeout * 1000)}"
    return kwargs


@contextmanager
def mapped_errors(settings: Settings) -> Iterator[None]:
    """Translate psycopg errors raised inside the block into the package's own errors.

    Args:
        settings: for the table name and DSN target shown in messages.

    Raises:
        QueryTimeout, TableMissing, SchemaNotInitialised, PermissionDenied,
        DatabaseUnavailable: with a message that says what to do. Other psycopg errors
        pass through unchanged.
    """
    try:
        yield
    except pg_errors.QueryCanceled as error:
        raise QueryTimeout(
            f"a monitor query was cancelled after the statement timeout "
            f"({settings.statement_timeout:g} s): {error.diag.message_primary}",
            hint="Another session may hold a lock on the table (see pg_locks / "
            "pg_stat_activity), or the table lacks the recommended indexes (run "
            "`outbox-monitor init-db`); OUTBOX_MONITOR_STATEMENT_TIMEOUT raises the limit.",
        ) from error
    except pg_errors.UndefinedTable as error:
        message = error.diag.message_primary or str(error)
        if "outbox_monitor." in message:
            raise SchemaNotInitialised(
                f"outbox-monitor's own schema is missing: {message}",
                hint="Run `outbox-monitor init-db` once against this database.",
            ) from error
        raise TableMissing(
            f"{message} (outbox table {settings.table})",
            hint="Run `outbox-monitor init-db`, or set OUTBOX_MONITOR_TABLE to your table.",
        ) from error
    except (pg_errors.UndefinedFunction, pg_errors.InvalidSchemaName) as error:
        raise SchemaNotInitialised(
            f"outbox-monitor's SQL functions are missing: {error.diag.message_primary}",
            hint="Run `outbox-monitor init-db` once against this database.",
        ) from error
    except pg_errors.InsufficientPrivilege as error:
        raise PermissionDenied(
            f"the database role lacks a privilege: {error.diag.message_primary}",
            hint="Grant it to the role in OUTBOX_MONITOR_DSN (see README, Configuration).",
        ) from error
    except psycopg.OperationalError as error:
        # Only connection loss and server shutdown (SQLSTATE 08xxx, 57P0x, or none at all);
        # deadlocks, lock timeouts and the like pass through unchanged.
        if error.sqlstate and not error.sqlstate.startswith(("08", "57P")):
            raise
        raise DatabaseUnavailable(
            f"lost the database at {describe_target(settings.dsn)}: {_first_line(error)}",
            hint="Is the database server up and reachable from here? The monitor "
            "reconnects by itself once it is; check OUTBOX_MONITOR_DSN only if it changed.",
        ) from error


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


class Database:
    """The one pool of a process, and every way the package talks to Postgres.

    Reads run on autocommit connections (never "idle in transaction") with
    ``statement_timeout`` and ``application_name=outbox-monitor``; rows are dicts.
    ``table`` and ``ledger`` are ``psycopg.sql.Identifier`` of the configured tables.
    """

    def __init__(self, settings: Settings, *, max_size: int = POOL_MAX_SIZE) -> None:
        self.settings = settings
        self.table = sql.Identifier(*settings.table_parts)
        self.ledger = sql.Identifier(*settings.ledger_parts)
        self.table_name = ".".join(settings.table_parts)
        self._pool = ConnectionPool(
            settings.dsn or "",
            kwargs=_connection_kwargs(settings.statement_timeout),
            min_size=1,
            max_size=max_size,
            open=False,
            check=ConnectionPool.check_connection,
            name=APPLICATION_NAME,
            reconnect_timeout=0,
        )
        self._opened = False
        self._failing = False

    def close(self) -> None:
        """Close the pool and its connections; the object may not be used afterwards."""
        if self._opened:
            self._pool.close()
            self._opened = False

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled autocommit connection with the statement timeout.

        Raises:
            DatabaseUnavailable: no connection within the connect timeout; the message
                carries libpq's reason (wrong host, password, database) without secrets.
        """
        if not self._opened or self._failing:
            # First use, or the last attempt failed: a direct connect says at once (and
            # why) whether the server is back, instead of waiting out the pool timeout.
            self._check_reachable()
        if not self._opened:
            self._pool.open(wait=False)
            self._opened = True
        try:
            with (
                self._pool.connection(timeout=CONNECT_TIMEOUT_SECONDS + 1) as conn,
                mapped_errors(self.settings),
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
            conn = psycopg.connect(self.settings.dsn or "", **_connection_kwargs(statement_timeout))
        except psycopg.OperationalError as error:
            raise self._unreachable(error) from None
        with conn, mapped_errors(self.settings):
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
            raise self._unreachable(error) from None

    def _diagnose_unreachable(self) -> OutboxMonitorError:
        try:
            self._check_reachable()
        except DatabaseUnavailable as error:
            return error
        return DatabaseUnavailable(
            f"timed out waiting for a pooled connection to {describe_target(self.settings.dsn)}",
            hint="The database is slow or at max_connections; the monitor retries.",
        )

    def _unreachable(self, error: psycopg.OperationalError) -> DatabaseUnavailable:
        reason = _first_line(error)
        refused = "Connection refused" in reason or "No such file" in reason
        return DatabaseUnavailable(
            f"cannot connect to {describe_target(self.settings.dsn)}: {reason}",
            hint=(
                "Is the database server up? The monitor reconnects by itself once it is. "
                if refused
                else ""
            )
            + "Otherwise set OUTBOX_MONITOR_DSN (or DATABASE_URL / PG* variables) to a "
            "reachable database, e.g. postgresql://user:password@localhost:5432/app",
        )

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
