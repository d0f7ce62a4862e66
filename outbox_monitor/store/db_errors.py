"""Postgres errors turned into the package's own, each with the fix: a lost database, a
statement timeout, a missing table or schema, a refused login, and a missing privilege named
precisely (the login, the privilege, the object, the role that holds it, the DSN setting to
change). Also where a DSN points, without its password (``describe_target``)."""

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from outbox_monitor.config.settings import Settings
from outbox_monitor.errors import (
    ConfigError,
    DatabaseUnavailable,
    LoginRefused,
    PermissionDenied,
    QueryTimeout,
    ReadOnlyDatabase,
    SchemaNotInitialised,
    TableMissing,
)
from outbox_monitor.store import grants
from outbox_monitor.store.queries import compose

READ_DSN_SETTING = "OUTBOX_MONITOR_DSN"
ACTIONS_DSN_SETTING = "OUTBOX_MONITOR_ACTIONS_DSN"
PRIMARY_DSN_SETTING = "OUTBOX_MONITOR_PRIMARY_DSN"

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
_INVALID_OPTION = re.compile(
    r"^(connection is bad: )?(invalid [\w ]+ (value|number)|could not match \d+ port numbers)"
)
"""libpq's refusals of a connection option's value, before any network (``invalid integer
value "x" for connection option "port"``, ``invalid port number``, ``invalid sslmode value``)."""
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
        ReadOnlyDatabase, DatabaseUnavailable: with a message that says what to do. Other
        psycopg errors pass through unchanged.
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
            hint="Set OUTBOX_MONITOR_TABLE (or --table) to your outbox table (schema.table); "
            "`outbox-monitor init-db --create-table` creates a new, empty one.",
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
    except pg_errors.ReadOnlySqlTransaction as error:
        raise read_only(error, settings, dsn_setting=dsn_setting, acting=acting) from error
    except psycopg.OperationalError as error:
        # Only connection loss and server shutdown (SQLSTATE 08xxx, 57P0x, or none at all);
        # deadlocks, lock timeouts and the like pass through unchanged.
        if error.sqlstate and not error.sqlstate.startswith(("08", "57P")):
            raise
        raise DatabaseUnavailable(
            f"lost the database at {describe_target(settings.dsn)}: {first_line(error)}",
            hint="Is the database server up and reachable from here? The monitor "
            f"reconnects by itself once it is; check {dsn_setting} only if it changed.",
        ) from error


def writing_setting(dsn_setting: str, *, acting: bool) -> str:
    """The setting (or option) to point at the primary when a write met a read-only server:
    ``dsn_setting`` itself, except the read DSN, which may stay on a standby: then
    ``OUTBOX_MONITOR_ACTIONS_DSN`` for operator actions, else ``OUTBOX_MONITOR_PRIMARY_DSN``
    (the scheduler's writes)."""
    if dsn_setting != READ_DSN_SETTING:
        return dsn_setting
    return ACTIONS_DSN_SETTING if acting else PRIMARY_DSN_SETTING


def read_only(
    error: psycopg.Error, settings: Settings, *, dsn_setting: str, acting: bool
) -> ReadOnlyDatabase:
    """The ``ReadOnlyDatabase`` of a write refused with SQLSTATE 25006 (``cannot execute
    UPDATE in a read-only transaction``): the server, what it refused, and the setting to
    point at the primary (``writing_setting``; through the read DSN, which serves both
    while they are unset: the actions and the primary DSN)."""
    if dsn_setting == READ_DSN_SETTING and not acting:
        fix = (
            f"Set {ACTIONS_DSN_SETTING} (operator actions) and {PRIMARY_DSN_SETTING} (the "
            "scheduler's writes) to the primary"
        )
    else:
        fix = f"Set {writing_setting(dsn_setting, acting=acting)} to the primary"
    return ReadOnlyDatabase(
        f"{describe_target(settings.dsn)} accepts no writes "
        f"({error.diag.message_primary or first_line(error)}): it is a hot standby in "
        "recovery, or its transactions are read-only by default",
        hint=f"{fix}; a read replica can serve {READ_DSN_SETTING} only "
        "(docs/deploy.md, Read replicas).",
    )


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
    primary = error.diag.message_primary or first_line(error)
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


def first_line(error: BaseException) -> str:
    """The first line of an error's text (its type's name when it has none), for messages."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def connect_error(
    error: psycopg.OperationalError, settings: Settings, dsn_setting: str
) -> DatabaseUnavailable | ConfigError:
    """The error of a connection attempt that failed: ``ConfigError`` naming ``dsn_setting``
    when libpq refused one of the DSN's values before connecting (a port that is no number:
    a DSN that cannot work, never an outage to wait out), ``LoginRefused`` when the server
    refused the login or password, else ``DatabaseUnavailable``; the last two name where the
    DSN points (``describe_target``) and the setting to check.

    Args:
        error: psycopg's error of the attempt.
        settings: for the DSN's target.
        dsn_setting: the setting whose login was used (``OUTBOX_MONITOR_DSN`` or
            ``OUTBOX_MONITOR_ACTIONS_DSN``), named in the hint.

    Returns:
        The error to raise.
    """
    reason = first_line(error)
    if _INVALID_OPTION.search(reason):
        return ConfigError(
            f"{dsn_setting}: {reason}",
            hint=f"Fix the connection string of {dsn_setting}, e.g. "
            "postgresql://user:password@localhost:5432/app.",
        )
    if error.sqlstate in AUTHENTICATION_FAILED or _AUTHENTICATION_FAILED.search(reason):
        return LoginRefused(
            f"the login or password of {dsn_setting} was refused by "
            f"{describe_target(settings.dsn)}: {reason}",
            hint=f"Check the user and password of {dsn_setting}"
            + (
                " (or DATABASE_URL / PG* variables, ~/.pgpass)"
                if dsn_setting == READ_DSN_SETTING
                else ""
            )
            + ", and that the server's pg_hba.conf lets that login connect to this "
            "database.",
        )
    refused = "Connection refused" in reason or "No such file" in reason
    return DatabaseUnavailable(
        f"cannot connect to {describe_target(settings.dsn)}: {reason}",
        hint=(
            "Is the database server up? The monitor reconnects by itself once it is. "
            if refused
            else ""
        )
        + f"Otherwise set {dsn_setting}"
        + (" (or DATABASE_URL / PG* variables)" if dsn_setting == READ_DSN_SETTING else "")
        + " to a reachable database, e.g. postgresql://user:password@localhost:5432/app",
    )
