"""Attack: a standby that stopped receiving WAL while the primary keeps writing."""

import time

import psycopg

from outbox_monitor.config.settings import load_settings
from outbox_monitor.store.db import Database
from outbox_monitor.store.standby import replica_status


def test_a_disconnected_standby_is_not_reported_as_lag_0(replica_db):
    standby_server_dsn = replica_db.standby_server.dsn
    with psycopg.connect(standby_server_dsn, autocommit=True) as conn:
        original = conn.execute("SHOW primary_conninfo").fetchone()[0]
        conn.execute("ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        # the walreceiver restarts with the new conninfo and cannot connect
        deadline = time.monotonic() + 15
        with psycopg.connect(standby_server_dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                if conn.execute("SELECT count(*) FROM pg_stat_wal_receiver").fetchone()[0] == 0:
                    break
                time.sleep(0.2)
        with psycopg.connect(replica_db.primary, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id,"
                " event_key, payload) VALUES ('a', 'b', 'c', 'k1', '{}')"
            )
        time.sleep(4)
        with Database(load_settings(dsn=replica_db.standby)) as db:
            found = replica_status(db)
            n = db.fetch_all("replica_status")
        print(found, n)
        assert found.in_recovery
        # the primary committed a row 4 s ago that the standby never received: the figures
        # read here are at least 4 s stale (or of unknown staleness), not "lag 0"
        assert found.lag_seconds is None or found.lag_seconds >= 3.5, found
        assert found.exceeds(2.0)
    finally:
        with psycopg.connect(standby_server_dsn, autocommit=True) as conn:
            quoted = conn.execute("SELECT quote_literal(%s)", (original,)).fetchone()[0]
            conn.execute(f"ALTER SYSTEM SET primary_conninfo = {quoted}")
            conn.execute("SELECT pg_reload_conf()")
        replica_db.standby_server.wait_for_database(replica_db.name)
