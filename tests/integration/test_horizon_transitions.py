"""The xmin horizon's "held" across a holder's transitions between readings: a hidden
REPEATABLE READ transaction that takes a transaction id late, and a READ COMMITTED one whose
snapshots were seen per statement and that then keeps one open (a cursor) — neither may see
its age fall back while it still holds the same horizon (the rule would resolve and fire
again)."""

import threading
import time

import psycopg
from psycopg import IsolationLevel

from outbox_monitor.config.settings import load_settings
from outbox_monitor.health.horizon import horizon
from outbox_monitor.store.db import Database
from tests.health import plain_login


def _holder(db, pid):
    [holder] = [h for h in horizon(db).holders if h.name == f"pid {pid}"]
    return holder


def test_a_hidden_snapshot_holder_that_writes_keeps_its_age(dsn, pg_cluster):
    """A superuser's REPEATABLE READ transaction, hidden to a login without pg_monitor, holds
    its snapshot's xmin from its first statement; 1.5 s later it writes (gets a transaction
    id), its xmin unchanged. It has held the horizon at least since the first reading: the
    age after the write is at least the 1.5 s before it, not restarted from 0."""
    plain_dsn = plain_login(pg_cluster, dsn)
    with (
        Database(load_settings(dsn=plain_dsn)) as plain,
        psycopg.connect(dsn, application_name="hidden-rr") as holder,
        psycopg.connect(dsn, autocommit=True) as other,
    ):
        holder.isolation_level = IsolationLevel.REPEATABLE_READ
        holder.execute("SELECT 1")  # its one snapshot: backend_xmin, no xid
        pid = holder.info.backend_pid
        other.execute("SELECT txid_current()")  # the xid counter moves past its xmin
        first = _holder(plain, pid)
        assert first.hidden and first.held_seconds is None and first.xid_age is not None
        time.sleep(1.5)
        second = _holder(plain, pid)
        assert second.held_seconds >= 1.4, second
        holder.execute("SELECT txid_current()")  # now it has a transaction id too
        third = _holder(plain, pid)
        assert third.held_seconds >= second.held_seconds, (second, third)


def test_a_cursor_kept_after_per_statement_snapshots_does_not_flap(dsn, db):
    """A read-only READ COMMITTED transaction: a statement read while it runs, then read idle
    without a snapshot (its snapshots are per statement); then it opens a cursor and stays
    idle (the cursor's snapshot kept), then runs another statement, the cursor still open.
    The cursor's xmin is held throughout: the age read during that statement must not fall
    below the age read while it was idle a moment before (a rule would resolve and fire
    again on each fetch)."""
    with (
        psycopg.connect(dsn, application_name="cursor-batch") as reader,
        psycopg.connect(dsn, autocommit=True) as other,
    ):
        pid = reader.info.backend_pid
        reader.execute("SELECT 1")  # BEGIN, READ COMMITTED
        time.sleep(1.0)
        _during(reader, "SELECT pg_sleep(1)", lambda: _holder(db, pid))
        assert not _holder(db, pid).holds_horizon  # idle between statements: per statement
        other.execute("SELECT txid_current()")
        reader.execute("DECLARE c CURSOR FOR SELECT g FROM generate_series(1, 1000) g")
        idle = _holder(db, pid)
        assert idle.holds_horizon and idle.state == "idle in transaction", idle
        other.execute("SELECT txid_current()")
        active = _during(reader, "SELECT pg_sleep(1.5)", lambda: _holder(db, pid))
        # the same kept xmin, older by the other session's xid at least (xids are the
        # cluster's: another database's sessions may take some too)
        assert active.state == "active" and active.xid_age >= idle.xid_age + 1, active
    assert active.held_seconds >= idle.held_seconds, (idle, active)


def _during(conn, statement, read):
    """``read()`` 0.7 s into ``statement`` run by ``conn`` in another thread."""
    worker = threading.Thread(target=conn.execute, args=(statement,))
    worker.start()
    try:
        time.sleep(0.7)
        return read()
    finally:
        worker.join(10)
