"""A caller's connection pool lent to ``Database``: each connection taken from it gets the
monitor's session for the time of our use, and the caller's back when it is returned."""

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.pq import Conninfo, TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from outbox_monitor.store.queries import compose

# the logger keeps its name from before the move into a package (log filters use it)
log = logging.getLogger("outbox_monitor.borrowed_pool")

_ABSENT = object()


@dataclass(frozen=True)
class _Saved:
    """What the caller's connection had before we took it over."""

    autocommit: bool
    row_factory: Any
    cursor_factory: Any
    prepare_threshold: int | None
    last_statement: Any
    statement_timeout: str = ""
    client_encoding: str = ""


def pool_conninfo(pool: ConnectionPool[Any]) -> str | None:
    """The DSN a caller's pool connects with, for diagnosis and direct connections: its
    ``conninfo`` plus the libpq parameters (``password``, ``host``, …) of its ``kwargs``.

    Returns:
        A libpq connection string, or ``None`` when the pool has none to give: an empty
        conninfo, or a callable conninfo or kwargs (not called: they may mint short-lived
        credentials, and a DSN kept from one call would go stale).
    """
    if callable(pool.conninfo) or callable(pool.kwargs):
        return None
    keywords = {option.keyword.decode() for option in Conninfo.get_defaults()}
    params = {
        key: value
        for key, value in (pool.kwargs or {}).items()
        if key in keywords and value is not None
    }
    return make_conninfo(pool.conninfo or "", **params) or None


@contextmanager
def borrowed(
    conn: psycopg.Connection,
    *,
    statement_timeout_ms: int,
    cursor_factory: type[psycopg.Cursor],
    errors: Callable[[psycopg.Connection], AbstractContextManager[Any]],
) -> Iterator[psycopg.Connection]:
    """Give a connection of a caller's pool the monitor's session for the block, then the
    caller's back.

    For the block: autocommit, dict rows, ``cursor_factory``, no server-side prepared
    statements (``prepare_threshold=None``: no generic plan of ours cached, nothing added
    to the caller's prepared-statement cache), ``statement_timeout`` and
    ``client_encoding=UTF8`` (``set_config(…, false)``: session-wide, not a transaction).
    Afterwards the caller's values of each, read when the block starts (a ``SET`` of the
    caller survives; ``RESET`` still goes back to the connection's start value), and of
    the ``last_statement`` attribute the recording cursor writes.

    Args:
        conn: a connection just taken from the caller's pool (idle, no transaction).
        statement_timeout_ms: the monitor's statement timeout, whole milliseconds (> 0).
        cursor_factory: the monitor's cursor class (records the statement it runs).
        errors: the monitor's error mapping for ``conn`` (``Database._mapped_errors``),
            around the set-up statement.

    Raises:
        The errors of ``errors`` (e.g. ``DatabaseUnavailable`` for a connection lost)
        when the set-up fails; ``conn`` is then closed, so that the pool discards it.
        The restore never raises: when it fails (a connection lost, left mid-statement)
        ``conn`` is closed, so that the pool discards it and opens another.
    """
    saved = _Saved(
        autocommit=conn.autocommit,
        row_factory=conn.row_factory,
        cursor_factory=conn.cursor_factory,
        prepare_threshold=conn.prepare_threshold,
        last_statement=getattr(conn, "last_statement", _ABSENT),
    )
    try:
        with errors(conn):
            conn.autocommit = True
            conn.row_factory = dict_row
            conn.cursor_factory = cursor_factory
            conn.prepare_threshold = None
            row = conn.execute(
                compose("borrow_session"), {"timeout": f"{statement_timeout_ms}ms"}
            ).fetchone()
    except BaseException:
        conn.close()
        raise
    saved = replace(saved, statement_timeout=row["timeout"], client_encoding=row["encoding"])
    try:
        yield conn
    finally:
        _give_back(conn, saved)


def _give_back(conn: psycopg.Connection, saved: _Saved) -> None:
    try:
        if conn.closed:
            return
        status = conn.info.transaction_status
        if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            conn.rollback()  # a BEGIN of ours left open: what the pool would do anyway
        elif status != TransactionStatus.IDLE:
            raise psycopg.InterfaceError(f"connection returned {status.name}")
        conn.execute(
            compose("return_session"),
            {"timeout": saved.statement_timeout, "encoding": saved.client_encoding},
        )
        conn.autocommit = saved.autocommit
        conn.row_factory = saved.row_factory
        conn.cursor_factory = saved.cursor_factory
        conn.prepare_threshold = saved.prepare_threshold
        if saved.last_statement is _ABSENT:
            with suppress(AttributeError):
                del conn.last_statement  # type: ignore[attr-defined]
        else:
            conn.last_statement = saved.last_statement  # type: ignore[attr-defined]
    except Exception as error:
        log.warning(
            "could not give a pooled connection its own settings back (%s); closing it, "
            "the pool replaces it",
            error,
        )
        conn.close()
