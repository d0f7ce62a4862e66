"""Helpers of the table-health tests (issue 14): a session left idle in a transaction, the
outbox's autovacuum turned off, statistics flushed now, a login without pg_monitor. Import as
``from tests.health import …`` (nothing here is a fixture)."""

import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from outbox_monitor.demo.pgcluster import TemporaryCluster

TABLE = "integration_outbox"
_logins = itertools.count(1)


@contextmanager
def idle_in_transaction(dsn: str, application: str) -> Iterator[int]:
    """A second session that runs ``BEGIN; SELECT txid_current();`` and stays open (idle in
    transaction, holding the xmin horizon) until the block ends; yields its backend pid. A
    session ended meanwhile from outside (``pg_terminate_backend``) is fine."""
    conn = psycopg.connect(dsn, application_name=application)
    try:
        conn.execute("SELECT txid_current()")
        yield conn.info.backend_pid
    finally:
        with contextlib.suppress(psycopg.OperationalError):  # terminated: nothing to roll back
            conn.rollback()
        conn.close()


def autovacuum_off(conn: psycopg.Connection) -> None:
    """No autovacuum of the outbox table in this test's database: dead tuples stay counted."""
    conn.execute(f"ALTER TABLE {TABLE} SET (autovacuum_enabled = false)")


def flush_statistics(conn: psycopg.Connection) -> None:
    """Make this session's pending statistics visible to others now (PostgreSQL 15 flushes
    them lazily, at most once a second): the flush happens as the statement's transaction
    ends, before the call returns."""
    conn.execute("SELECT pg_stat_force_next_flush()")


def ack_all(conn: psycopg.Connection, ids: list[int]) -> None:
    """A bulk ack, as a worker's batch does: ``ids`` done now, locks cleared; one dead tuple
    per row."""
    conn.execute(
        f"UPDATE {TABLE} SET status = 'done', processed_at = now(), locked_at = NULL, "
        "locked_by = NULL, last_error = NULL WHERE id = ANY(%s)",
        (ids,),
    )


def plain_login(cluster: TemporaryCluster, dsn: str) -> str:
    """A new login without pg_monitor (roles are cluster-wide: a name of its own), allowed to
    read the outbox and the outbox_monitor schema of ``dsn``'s database; its DSN."""
    login = f"hs{os.getpid()}_plain_{next(_logins)}"
    name = sql.Identifier(login)
    with psycopg.connect(cluster.dsn, autocommit=True) as su:
        su.execute(sql.SQL("CREATE ROLE {} LOGIN").format(name))
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(TABLE), name))
        su.execute(sql.SQL("GRANT USAGE ON SCHEMA outbox_monitor TO {}").format(name))
        su.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA outbox_monitor TO {}").format(name)
        )
    return make_conninfo(dsn, user=login)


def wait_until(predicate, timeout: float, what: str, step: float = 0.1):
    """Poll ``predicate`` until it returns something truthy (returned); fail after
    ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(step)
