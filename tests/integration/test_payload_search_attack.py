"""Attack (held): payload key paths Postgres treats specially (negative and huge array
indexes, a key on an array), and a table whose name needs quotes — payload search, its
index advice run as shown, claim health and table health."""

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql

from outbox_monitor.browse.payload_plan import explain_search
from outbox_monitor.browse.payload_search import payload_search, search_payloads
from outbox_monitor.config.settings import load_settings
from outbox_monitor.health.claim_plan import claim_health, record_claim_plans
from outbox_monitor.health.status import health_status
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.store import schema
from outbox_monitor.store.db import Database
from tests.integration.test_payload_search import VIEWER


@pytest.mark.parametrize(
    "path,value,expected",
    [
        ("a.-1", "3", True),
        ("a.99999999999999999999", "1", False),
        ("a.x", "1", False),
        ('["a", "0 "]', "1", False),
        ("a.0", "1", True),
    ],
)
def test_odd_paths(db, rows, path, value, expected):
    row = rows.add(payload={"a": [1, 2, 3]}, created_ago=10)
    search = payload_search(
        since=rows.t0 - timedelta(hours=1),
        until=rows.t0 + timedelta(hours=1),
        path=path,
        value=value,
    )
    explain_search(db, search)
    page = search_payloads(db, search, identity=VIEWER, redactor=redactor_for(db.settings))
    assert ([r["id"] for r in page.rows] == [row]) is expected


def test_a_table_named_with_quotes_a_dot_and_capitals(pg_cluster):
    """Payload search (and its advice), claim health and health on ``"Ops"."OutBox"``."""
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS atk_quoted_search")
        c.execute("CREATE DATABASE atk_quoted_search")
    dsn = pg_cluster.dsn_for("atk_quoted_search")
    table = sql.Identifier("Ops", "OutBox")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "Ops"')
    settings = load_settings(dsn=dsn, table="Ops.OutBox")
    with Database(settings) as db:
        schema.init_db(db, create_table=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (event_type, aggregate_type, aggregate_id, event_key, payload)"
                " VALUES ('t', 'a', '1', 'k1', '{{\"customer\": {{\"id\": \"42\"}}}}')"
            ).format(table)
        )
    with Database(settings) as db:
        now = datetime.now(UTC)
        for kwargs in (
            {"document": '{"customer": {"id": "42"}}'},
            {"path": "customer.id", "value": "42"},
        ):
            search = payload_search(
                since=now - timedelta(hours=1), until=now + timedelta(minutes=1), **kwargs
            )
            plan = explain_search(db, search)
            page = search_payloads(db, search, identity=VIEWER, redactor=redactor_for(settings))
            assert len(page.rows) == 1
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(plan.advice)  # the advice runs as shown
            assert explain_search(db, search).usable  # and is then recognised
        assert claim_health(db).table_rows == 1
        assert record_claim_plans(db)["health"].plans
        assert health_status(db)["live_tuples"] >= 0
