"""The connector: one pool, autocommit reads, a statement timeout, errors that say the fix."""

import logging
import math
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from outbox_monitor import grants
from outbox_monitor.config import Settings
from outbox_monitor.errors import (
    DatabaseUnavailable,
    LoginRefused,
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
READ_DSN_SETTING = "OUTBOX_MONITOR_DSN"
ACTIONS_DSN_SETTING = "OUTBOX_MONITOR_ACTIONS_DSN"
Purpose = Literal["read", "actions"]
"""What a ``Database`` is for: reads (``OUTBOX_MONITOR_DSN``) or operator actions
(``OUTBOX_MONITOR_ACTIONS_DSN``, else the read DSN)."""
PRINT_GRANTS = "outbox-monitor init-db --print-grants"

# Postgres' "permission denied for <kind> <name>" (aclchk.c) and the privilege each kind
# needs when the statement does not say more (relations: see _table_privileges).
_DENIED = re.compile(
    r"^permission denied for (?P<kind>table|view|materialized view|foreign table|sequence|"
    r"schema|function|procedure|routine) (?P<name>\S+)$"
)
_RELATION_KINDS = {
    "table": "rpvmf",
    "view": "rpvmf",
    "materialized view": "rpvmf",
    "foreign table": "rpvmf",
    "sequence": "S",
}
_PRIVILEGE_OF_KIND = {
    "sequence": "USAGE",
    "schema": "USAGE",
    "function": "EXECUTE",
    "procedure": "EXECUTE",
    "routine": "EXECUTE",
}
_TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
_NAME = r'(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)'
_QUALIFIED_NAME = re.compile(rf"({_NAME})\s*\.\s*({_NAME})")
_NOT_CODE = re.compile(r"--[^\n]*|'(?:[^']|'')*'|\$\$.*?\$\$", re.S)
AUTHENTICATION_FAILED = ("28P01", "28000")
"""SQLSTATEs of a refused login: invalid_password, invalid_authorization_specification."""
# libpq reports a refused login of a connection attempt without a SQLSTATE: the server's
# messages for 28P01/28000 (auth.c, postinit.c) and libpq's own "no password supplied".
_AUTHENTICATION_FAILED = re.compile(
    r"authentication failed for user|no pg_hba\.conf entry|role \".*\" does not exist|"
    r"is not permitted to log in|no password supplied"
)
_TARGET_ENV = {
    "host": ("PGHOST", "PGHOSTADDR"),
    "port": ("PGPORT",),
    "user": ("PGUSER",),
    "dbname": ("PGDATABASE",),
}
"""The libpq variables that fill a part missing from a DSN, in order (never PGPASSWORD)."""


def describe_target(dsn: str | None) -> str:
    """Where a DSN points, without its password: ``user@host:port/dbname``.

    A part the DSN leaves out is taken, as libpq does, from ``PGHOST`` (else
    ``PGHOSTADDR``), ``PGPORT``, ``PGUSER``, ``PGDATABASE`` of ``os.environ`` (never
    ``PGPASSWORD``).

    Args:
        dsn: a libpq connection string or URI, or ``None`` (libpq ``PG*`` variables).

    Returns:
        A short description safe for logs, pages and error messages.
    """
    try:
        parts = conninfo_to_dict(dsn or "")
    except psycopg.ProgrammingError:
        return "an unparsable DSN"
    for part, names in _TARGET_ENV.items():
        if not parts.get(part) and not (part == "host" and parts.get("hostaddr")):
            parts[part] = next(filter(None, (os.environ.get(name) for name in names)), None)
    host = parts.get("host") or parts.get("hostaddr") or "local socket"
    port = parts.get("port") or "5432"
    return f"{parts.get('user') or 'default user'}@{host}:{port}/{parts.get('dbname') or '?'}"


class MonitorConnection(psycopg.Connection):
    """A psycopg connection that remembers the statement it ran last (``last_statement``),
    so that a "permission denied" can name the privilege that statement needed."""

    last_statement: Any = None


class _RecordingCursor(psycopg.Cursor):
    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> "_RecordingCursor":
        if isinstance(self.connection, MonitorConnection):
            self.connection.last_statement = query
        return super().execute(query, params, **kwargs)


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
        # Whole milliseconds, rounded up (after a µs rounding, so 1.1 s stays 1100 ms):
        # Postgres reads 0 as "no timeout", so 0.4 ms must become 1 ms, never 0.
        ms = max(1, math.ceil(round(statement_timeout * 1000, 3)))
        kwargs["options"] = f"-c statement_timeout={ms}"
    return kwargs


@contextmanager
def mapped_errors(
    settings: Settings,
    *,
    conn: psycopg.Connection | None = None,
    dsn_setting: str = READ_DSN_SETTING,
    acting: bool = False,
) -> Iterator[None]:
    """Translate psycopg errors raised inside the block into the package's own errors.

    Args:
        settings: for the table name and DSN target shown in messages.
        conn: the connection the block uses, if any: a missing privilege is then named
            precisely (the statement's privilege that the role lacks, checked with
            ``has_table_privilege``) and the object schema-qualified.
        dsn_setting: the setting (or option) whose login the connection uses, named in
            hints: ``OUTBOX_MONITOR_DSN`` or ``OUTBOX_MONITOR_ACTIONS_DSN``.
        acting: the connection runs operator actions (changes the hint of a missing
            privilege when ``OUTBOX_MONITOR_ACTIONS_DSN`` is unset).

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
        raise permission_denied(
            error, settings, conn=conn, dsn_setting=dsn_setting, acting=acting
        ) from error
    except psycopg.OperationalError as error:
        # Only connection loss and server shutdown (SQLSTATE 08xxx, 57P0x, or none at all);
        # deadlocks, lock timeouts and the like pass through unchanged.
        if error.sqlstate and not error.sqlstate.startswith(("08", "57P")):
            raise
        raise DatabaseUnavailable(
            f"lost the database at {describe_target(settings.dsn)}: {_first_line(error)}",
            hint="Is the database server up and reachable from here? The monitor "
            f"reconnects by itself once it is; check {dsn_setting} only if it changed.",
        ) from error


@dataclass(frozen=True)
class MissingPrivilege:
    """What a "permission denied" error lacked: ``privileges`` (e.g. ``("UPDATE",)``;
    empty when unknown) on the object ``kind`` (``table``, ``sequence``, ``schema``,
    ``function``) named ``name`` (schema-qualified when it could be found)."""

    privileges: tuple[str, ...]
    kind: str
    name: str

    def describe(self) -> str:
        """``UPDATE on table public.integration_outbox`` (``a privilege on …`` if unknown)."""
        privileges = " and ".join(self.privileges) or "a privilege"
        return f"{privileges} on {self.kind} {self.name}"


def permission_denied(
    error: pg_errors.InsufficientPrivilege,
    settings: Settings,
    *,
    conn: psycopg.Connection | None = None,
    dsn_setting: str = READ_DSN_SETTING,
    acting: bool = False,
) -> PermissionDenied:
    """The ``PermissionDenied`` of a Postgres "permission denied" error (SQLSTATE 42501).

    The message names the login, the privilege and the object (``the database role
    "monitor_read" lacks UPDATE on table public.integration_outbox (permission denied
    for table integration_outbox)``); the hint names the DSN setting of that login, the
    outbox-monitor role that holds the privilege, and ``init-db --print-grants``. When the
    read login (``OUTBOX_MONITOR_DSN``) lacks an operator privilege (``acting``, or a
    privilege only the operator role holds: an action run while
    ``OUTBOX_MONITOR_ACTIONS_DSN`` is unset), the hint first says to point
    ``OUTBOX_MONITOR_ACTIONS_DSN`` at an operator login (least privilege).

    Args:
        error: the psycopg error.
        settings: for the outbox table (to qualify its name and find the granting role).
        conn: the connection that failed (its last statement says which privilege the
            statement needed; then ``has_table_privilege`` says which one is missing);
            ``None`` names the object only.
        dsn_setting, acting: as ``mapped_errors``.

    Returns:
        The error to raise (``from error``).
    """
    primary = error.diag.message_primary or _first_line(error)
    user = _current_user(conn)
    who = f'the database role "{user}"' if user else "the database role"
    missing = _missing_privilege(primary, conn)
    if missing is None:
        message = f"{who} lacks a privilege: {primary}"
        role = None
    else:
        message = f"{who} lacks {missing.describe()} ({primary})"
        role = next(
            filter(
                None,
                (
                    grants.role_granting(settings, p, missing.kind, missing.name)
                    for p in missing.privileges
                ),
            ),
            None,
        )
    login = f"the role that {dsn_setting} logs in as"
    fix = (
        f"Make {login} a member of {role} (`GRANT {role} TO <that role>`)"
        if role
        else f"Grant it to {login}"
    )
    operator_privilege = role == grants.DEFAULT_OPERATOR_ROLE
    if (acting or operator_privilege) and dsn_setting == READ_DSN_SETTING:
        # Least privilege first: a separate operator login, the read login left a viewer.
        operators = f" (a member of {role})" if role else ""
        fix = (
            f"Point {ACTIONS_DSN_SETTING} at an operator login{operators}: actions use "
            f"{READ_DSN_SETTING} while {ACTIONS_DSN_SETTING} is unset, and the read login "
            f"had best keep read-only grants (least privilege). Otherwise "
            f"{fix[0].lower()}{fix[1:]}"
        )
    return PermissionDenied(
        message,
        hint=f"{fix}. `{PRINT_GRANTS}` prints every grant of outbox-monitor's roles.",
    )


def _current_user(conn: psycopg.Connection | None) -> str | None:
    try:
        return conn.info.user if conn is not None else None
    except psycopg.Error:
        return None


def _missing_privilege(primary: str, conn: psycopg.Connection | None) -> MissingPrivilege | None:
    match = _DENIED.match(primary)
    if match is None:
        return None
    kind, name = match["kind"], match["name"]
    statement = _last_statement(conn)
    name = _qualify(name, kind, statement, conn)
    if kind in _PRIVILEGE_OF_KIND:
        return MissingPrivilege((_PRIVILEGE_OF_KIND[kind],), kind, name)
    needed = _table_privileges(statement)
    candidates = tuple(dict.fromkeys((*needed, "SELECT"))) if needed else _TABLE_PRIVILEGES
    lacking = _lacking_table_privileges(conn, name, candidates)
    if lacking is None:  # no connection to ask: the statement's writes, else its read
        writes = tuple(p for p in needed if p != "SELECT")
        lacking = writes or needed
    return MissingPrivilege(lacking, "table" if kind in ("view", "foreign table") else kind, name)


def _last_statement(conn: psycopg.Connection | None) -> str:
    """The text of the statement ``conn`` ran last ("" when unknown)."""
    query = getattr(conn, "last_statement", None)
    try:
        if isinstance(query, sql.Composable):
            return query.as_string(conn)
        if isinstance(query, bytes):
            return query.decode("utf-8", "replace")
        return query if isinstance(query, str) else ""
    except (psycopg.Error, ValueError):
        return ""


def _table_privileges(statement: str) -> tuple[str, ...]:
    """The table privileges a statement's commands need, in order of appearance
    (``FOR UPDATE``/``FOR SHARE`` locks need UPDATE; comments and literals ignored)."""
    code = _NOT_CODE.sub(" ", statement).upper()
    code = re.sub(r"\bFOR\s+(NO\s+KEY\s+UPDATE|KEY\s+SHARE|SHARE)\b", "UPDATE", code)
    code = re.sub(r"\bRETURNING\b", "SELECT", code)
    found = re.findall(r"\b(" + "|".join(_TABLE_PRIVILEGES) + r")\b", code)
    return tuple(dict.fromkeys(found))


def _qualify(name: str, kind: str, statement: str, conn: psycopg.Connection | None) -> str:
    """``schema.name`` for the bare name of an error message: from the statement's own
    qualified names, else from the catalog when exactly one schema has it."""
    if kind == "schema":
        return name
    for schema, found in _QUALIFIED_NAME.findall(_NOT_CODE.sub(" ", statement)):
        if _unquote(found) == name:
            return f"{_unquote(schema)}.{name}"
    if conn is None or kind not in _RELATION_KINDS or not _idle(conn):
        return name
    try:
        rows = conn.execute(
            compose("relation_schemas"), {"name": name, "kinds": list(_RELATION_KINDS[kind])}
        ).fetchall()
    except psycopg.Error:
        return name
    schemas = [row["schema"] if isinstance(row, dict) else row[0] for row in rows]
    return f"{schemas[0]}.{name}" if len(schemas) == 1 else name


def _lacking_table_privileges(
    conn: psycopg.Connection | None, name: str, privileges: tuple[str, ...]
) -> tuple[str, ...] | None:
    """Which of ``privileges`` the current role lacks on the relation ``schema.name``;
    ``None`` when that cannot be asked (no connection, unqualified name, failed query)."""
    schema, _, table = name.rpartition(".")
    if conn is None or not schema or not privileges or not _idle(conn):
        return None
    try:
        row = conn.execute(
            compose("missing_table_privileges"),
            {"privileges": list(privileges), "schema": schema, "name": table},
        ).fetchone()
    except psycopg.Error:
        return None
    missing = row["missing"] if isinstance(row, dict) else row[0]
    return tuple(missing) or None


def _idle(conn: psycopg.Connection) -> bool:
    """The connection can run a query now (not in a failed transaction, not closed)."""
    return not conn.closed and conn.info.transaction_status in (
        psycopg.pq.TransactionStatus.IDLE,
        psycopg.pq.TransactionStatus.INTRANS,
    )


def _unquote(name: str) -> str:
    return name[1:-1].replace('""', '"') if name.startswith('"') else name.lower()


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


class Database:
    """The one pool of a process, and every way the package talks to Postgres.

    Reads run on autocommit connections (never "idle in transaction") with
    ``statement_timeout`` and ``application_name=outbox-monitor``; rows are dicts.
    ``table`` and ``ledger`` are ``psycopg.sql.Identifier`` of the configured tables.

    ``purpose`` says which login it uses: ``"read"`` connects with ``settings.dsn``
    (``OUTBOX_MONITOR_DSN``); ``"actions"`` with ``settings.actions_target``
    (``OUTBOX_MONITOR_ACTIONS_DSN``, else the read DSN), and ``db.settings.dsn`` is then
    that DSN. Left out, it is ``"actions"`` for settings whose ``dsn`` is their
    ``actions_dsn`` (as ``ui.state.actions_database`` makes them), else ``"read"``.
    ``dsn_setting`` is the setting named in hints (a missing privilege, a wrong DSN).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        purpose: Purpose | None = None,
        dsn_setting: str | None = None,
        max_size: int = POOL_MAX_SIZE,
    ) -> None:
        if purpose is None:
            same = settings.actions_dsn is not None and settings.actions_dsn == settings.dsn
            purpose = "actions" if same else "read"
        if purpose == "actions" and settings.dsn != settings.actions_target:
            settings = settings.model_copy(update={"dsn": settings.actions_target})
        self.settings = settings
        self.purpose: Purpose = purpose
        self.dsn_setting = dsn_setting or (
            ACTIONS_DSN_SETTING
            if purpose == "actions" and settings.actions_dsn
            else READ_DSN_SETTING
        )
        self.table = sql.Identifier(*settings.table_parts)
        self.ledger = sql.Identifier(*settings.ledger_parts)
        self.table_name = ".".join(settings.table_parts)
        self._pool = ConnectionPool(
            settings.dsn or "",
            connection_class=MonitorConnection,
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
        self._pinned = threading.local()

    def _mapped_errors(self, conn: psycopg.Connection | None) -> Any:
        return mapped_errors(
            self.settings,
            conn=conn,
            dsn_setting=self.dsn_setting,
            acting=self.purpose == "actions",
        )

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
        """A pooled autocommit connection with the statement timeout (inside ``session()``:
        the session's connection).

        Raises:
            DatabaseUnavailable: no connection within the connect timeout; the message
                carries libpq's reason (wrong host, password, database) without secrets.
        """
        pinned = getattr(self._pinned, "conn", None)
        if pinned is not None:
            with self._mapped_errors(pinned):
                yield pinned
            return
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
            raise self._unreachable(error) from None
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
        if error.sqlstate in AUTHENTICATION_FAILED or _AUTHENTICATION_FAILED.search(reason):
            return LoginRefused(
                f"the login or password of {self.dsn_setting} was refused by "
                f"{describe_target(self.settings.dsn)}: {reason}",
                hint=f"Check the user and password of {self.dsn_setting}"
                + (
                    " (or DATABASE_URL / PG* variables, ~/.pgpass)"
                    if self.dsn_setting == READ_DSN_SETTING
                    else ""
                )
                + ", and that the server's pg_hba.conf lets that login connect to this "
                "database.",
            )
        refused = "Connection refused" in reason or "No such file" in reason
        return DatabaseUnavailable(
            f"cannot connect to {describe_target(self.settings.dsn)}: {reason}",
            hint=(
                "Is the database server up? The monitor reconnects by itself once it is. "
                if refused
                else ""
            )
            + f"Otherwise set {self.dsn_setting}"
            + (" (or DATABASE_URL / PG* variables)" if self.dsn_setting == READ_DSN_SETTING else "")
            + " to a reachable database, e.g. postgresql://user:password@localhost:5432/app",
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
