"""The workers' claim and ack costs from pg_stat_statements (issue 14 item 2): read when the
extension is installed, preloaded and readable; one plain sentence otherwise, never an
error. The suite's cluster has no preload; a cluster of this module's own has it."""

import itertools
import json

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.health.statements import (
    NOT_INSTALLED,
    NOT_LOADED,
    NOT_READABLE,
    read_statements,
    record_statements,
    worker_statements,
)
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db

_databases = itertools.count()
USERS_CLAIM = """WITH due AS (
    SELECT id FROM integration_outbox
    WHERE status = 'pending' AND available_at <= now()
    ORDER BY created_at LIMIT 50
    FOR UPDATE SKIP LOCKED)
UPDATE integration_outbox o SET status = 'processing', locked_at = now(), locked_by = 'w2'
FROM due WHERE o.id = due.id RETURNING o.id"""
USERS_ACK = """UPDATE integration_outbox
   SET status = 'done', processed_at = now(), locked_at = NULL, locked_by = NULL,
       last_error = NULL
 WHERE id = ANY(%s)"""
USERS_RETRY = """UPDATE integration_outbox
   SET status = 'pending', attempts = attempts + 1, available_at = now(),
       last_error = 'HTTP 500', locked_at = NULL, locked_by = NULL
 WHERE id = ANY(%s)"""
USERS_DEAD_LETTER = """UPDATE integration_outbox
   SET status = 'failed', attempts = attempts + 1, processed_at = now(),
       last_error = 'HTTP 401', locked_at = NULL, locked_by = NULL
 WHERE id = ANY(%s)"""


@pytest.fixture(scope="module")
def stat_cluster():
    """A cluster with pg_stat_statements in shared_preload_libraries."""
    with TemporaryCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        cluster.pause()
        cluster.resume()
        yield cluster


@pytest.fixture
def stat_dsn(stat_cluster):
    """A fresh outbox database of that cluster with the extension created."""
    name = f"pgss_{next(_databases)}"
    with psycopg.connect(stat_cluster.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = stat_cluster.dsn_for(name)
    with Database(load_settings(dsn=dsn)) as db:
        init_db(db, create_table=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    return dsn


def publish(conn: psycopg.Connection, count: int) -> None:
    conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload)
           SELECT 'order.paid', 'order', g::text, 'k:' || g, '{}'
           FROM generate_series(1, %s) AS g""",
        (count,),
    )


def work(conn: psycopg.Connection, *, shared_claims: int) -> int:
    """Claim with the shared function ``shared_claims`` times (5 rows each) and ack each row
    with the shared function; returns the acks."""
    acks = 0
    for _ in range(shared_claims):
        claimed = conn.execute(
            "SELECT * FROM outbox_monitor.claim('integration_outbox'::regclass, 'w1', 5)"
        ).fetchall()
        for row in claimed:
            conn.execute(
                "SELECT outbox_monitor.ack('integration_outbox'::regclass, %s, 'w1')", (row[0],)
            )
            acks += 1
    return acks


def by_kind(found) -> dict:
    return {cost.kind: cost for cost in found.costs}


def test_claim_and_ack_calls_per_kind_with_calls_per_minute(stat_dsn, monkeypatch):
    with psycopg.connect(stat_dsn, autocommit=True) as conn:
        publish(conn, 40)
        conn.execute("SELECT pg_stat_statements_reset()")
        acks = work(conn, shared_claims=3)
        users = [conn.execute(USERS_CLAIM).fetchall() for _ in range(2)]
        ids = [row[0] for batch in users for row in batch]
        conn.execute(USERS_RETRY, (ids[:2],))  # a retry is no ack
        conn.execute(USERS_DEAD_LETTER, (ids[2:3],))  # nor is a dead-letter
        conn.execute(USERS_ACK, (ids[3:10],))
        conn.execute(USERS_ACK, (ids[10:],))
    with Database(load_settings(dsn=stat_dsn)) as db:
        first = record_statements(db)
        assert first.available and first.note is None
        kinds = by_kind(first)
        assert list(kinds) == ["shared_claim", "users_claim", "shared_ack", "users_ack"]
        calls = {kind: cost.calls for kind, cost in kinds.items()}
        assert calls == {"shared_claim": 3, "users_claim": 2, "shared_ack": acks, "users_ack": 2}
        assert acks == 15
        for cost in kinds.values():
            assert cost.calls_per_minute is None  # no earlier reading
            assert 0 < cost.mean_exec_ms <= cost.max_exec_ms
        # the reading was recorded; two minutes later, 4 more shared claims
        with psycopg.connect(stat_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE outbox_monitor.claim_statement_samples "
                "SET sampled_at = sampled_at - interval '2 minutes'"
            )
            work(conn, shared_claims=4)
        later = by_kind(worker_statements(db))
        assert later["shared_claim"].calls == 7
        # 4 calls over 2 minutes (and the milliseconds since the reading)
        assert later["shared_claim"].calls_per_minute == pytest.approx(2.0, rel=0.01)
        assert later["users_claim"].calls_per_minute == pytest.approx(0.0)
        assert later["users_claim"].interval_mean_exec_ms is None  # no call since
        assert later["shared_claim"].interval_mean_exec_ms > 0
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", stat_dsn)
    result = CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False)
    shown = json.loads(result.stdout)["health"]["claim_plan"]["statements"]
    assert shown["available"] and shown["note"] is None
    assert shown["kinds"][0]["kind"] == "shared_claim"
    text = CliRunner().invoke(main, ["status"], catch_exceptions=False).stdout
    assert "outbox_monitor.claim() calls" in text and "claim plan (users_claim)" in text


def test_a_login_without_pg_read_all_stats_is_told_what_to_grant(stat_dsn, stat_cluster):
    with psycopg.connect(stat_dsn, autocommit=True) as conn:
        conn.execute(
            "DO $$ BEGIN CREATE ROLE claim_reader LOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        conn.execute("REVOKE pg_read_all_stats FROM claim_reader")
    dsn = stat_dsn.replace("postgres@", "claim_reader@")
    with Database(load_settings(dsn=dsn)) as db:
        assert read_statements(db).as_json() == {
            "available": False,
            "note": NOT_READABLE,
            "kinds": [],
        }
        with psycopg.connect(stat_dsn, autocommit=True) as conn:
            conn.execute("GRANT pg_read_all_stats TO claim_reader")
        assert read_statements(db).available


def test_not_installed_is_said_plainly(db, monkeypatch, dsn):
    assert read_statements(db).as_json() == {"available": False, "note": NOT_INSTALLED, "kinds": []}
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    result = CliRunner().invoke(main, ["status"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "pg_stat_statements not installed" in result.stdout


def test_installed_but_not_preloaded_is_said_plainly(db, conn):
    conn.execute("CREATE EXTENSION pg_stat_statements")  # the suite's cluster: no preload
    found = record_statements(db)
    assert (found.available, found.note) == (False, NOT_LOADED)
    assert (
        conn.execute("SELECT count(*) AS n FROM outbox_monitor.claim_statement_samples").fetchone()[
            "n"
        ]
        == 0
    )
