"""Bad input and bad days: wrong DSN, statement timeout, the database restarting."""

import threading
import time

import psycopg
import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from outbox_monitor.errors import DatabaseUnavailable, QueryTimeout, TableMissing
from outbox_monitor.figures import metrics
from outbox_monitor.store import schema
from outbox_monitor.store.db import Database


def test_wrong_dsn_names_the_target_but_never_the_password():
    dsn = f"postgresql://app:s3cret-pw@127.0.0.1:{free_port()}/orders"
    with Database(load_settings(dsn=dsn)) as db, pytest.raises(DatabaseUnavailable) as caught:
        metrics.queue_depth(db)
    text = str(caught.value)
    assert "app@127.0.0.1" in text and "/orders" in text
    assert "Connection refused" in text
    assert "s3cret" not in text
    assert "OUTBOX_MONITOR_DSN" in caught.value.hint


def test_unknown_database_is_reported(pg_cluster):
    missing = 'database "no_such_db" does not exist'
    with (
        Database(load_settings(dsn=pg_cluster.dsn_for("no_such_db"))) as db,
        pytest.raises(DatabaseUnavailable, match=missing),
    ):
        metrics.queue_depth(db)


def test_statement_timeout_cancels_a_blocked_monitor_query(dsn):
    settings = load_settings(dsn=dsn, statement_timeout=0.3)
    with psycopg.connect(dsn) as locker, Database(settings) as db:
        locker.execute("LOCK TABLE integration_outbox IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(QueryTimeout) as caught:
            metrics.queue_depth(db)
        locker.rollback()
        assert metrics.queue_depth(db) == 0  # the pool keeps working afterwards
    assert "0.3 s" in str(caught.value)
    assert "recommended indexes" in caught.value.hint


def test_monitor_sessions_carry_the_timeout_and_name_and_autocommit(db):
    with db.connection() as conn:
        row = conn.execute(
            "SELECT current_setting('statement_timeout') AS timeout, "
            "current_setting('application_name') AS name"
        ).fetchone()
        assert conn.autocommit is True
    assert row == {"timeout": "5s", "name": "outbox-monitor"}


def backend_pid(db: Database) -> int:
    with db.connection() as conn:
        return conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]


def test_a_session_runs_its_queries_on_one_connection_and_still_maps_errors(db):
    other_thread: list[int] = []
    with db.session():
        first = backend_pid(db)
        # mapped inside the session as outside it
        with pytest.raises(TableMissing), db.connection() as conn:
            conn.execute("SELECT 1 FROM no_such_table")
        assert metrics.queue_depth(db) == 0  # the session's connection still works
        with db.session():  # nested: the outer one's connection
            assert backend_pid(db) == first
        thread = threading.Thread(target=lambda: other_thread.append(backend_pid(db)))
        thread.start()
        thread.join()
        assert backend_pid(db) == first
    assert other_thread and other_thread[0] != first  # another thread: another connection


def test_the_pool_survives_a_database_restart():
    with TemporaryCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE app")
        with Database(load_settings(dsn=cluster.dsn_for("app"))) as db:
            schema.init_db(db, create_table=True, create_indexes=False)
            assert metrics.queue_depth(db) == 0
            cluster.pause()
            with pytest.raises(DatabaseUnavailable):
                metrics.queue_depth(db)
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable, match="Connection refused"):
                metrics.queue_depth(db)  # after a failure: a direct check, no pool wait
            assert time.monotonic() - started < 2
            cluster.resume()
            assert metrics.queue_depth(db) == 0
