"""Attack: claim health on a healthy partitioned outbox with empty future partitions."""

from datetime import timedelta

import psycopg
from psycopg.rows import dict_row

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.partitioned import create_partitioned_outbox
from outbox_monitor.health import claim_plan
from outbox_monitor.store import schema
from outbox_monitor.store.db import Database


def _fresh(pg_cluster, name):
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name}")
        c.execute(f"CREATE DATABASE {name}")
    return pg_cluster.dsn_for(name)


def test_partitioned_healthy_plan_not_degraded(pg_cluster):
    dsn = _fresh(pg_cluster, "atk_part_claim")
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        b = conn.execute("SELECT date_trunc('day', now()) + interval '1 day' AS b").fetchone()["b"]
        # pg_partman style: past months, the current one and 4 empty future ones, a default
        bounds = [b + timedelta(days=d) for d in (-120, -90, -60, -30, 1, 31, 61, 91, 121)]
        create_partitioned_outbox(conn, "public", "integration_outbox", bounds, default=True)
    with Database(load_settings(dsn=dsn)) as db:
        schema.init_db(db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
                   payload, status, created_at, available_at, processed_at)
               SELECT 'order.paid', 'order', g::text, 'h:' || g, '{}', 'done',
                      now() - interval '100 days' + g * interval '60 seconds',
                      now() - interval '100 days' + g * interval '60 seconds',
                      now() - interval '100 days' + g * interval '60 seconds' + interval '5 s'
               FROM generate_series(1, 140000) g"""
        )
        conn.execute(
            """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
                   payload, status, created_at, available_at)
               SELECT 'order.paid', 'order', g::text, 'b:' || g, '{}', 'pending',
                      now() - interval '1 minute', now() - interval '1 minute'
               FROM generate_series(1, 500) g"""
        )
        conn.execute("ANALYZE integration_outbox")
    with Database(load_settings(dsn=dsn)) as db:
        health = claim_plan.claim_health(db)
    for plan in health.plans:
        print(plan.shape, plan.total_cost, plan.reasons)
    # 140,000 done + 500 pending rows; ANALYZE of the parent must not count them twice
    assert abs(health.table_rows - 140_500) <= 1_500, health.table_rows
    assert health.degraded == 0, [p.as_json() for p in health.plans]
    # the harmful (created_at) index is still seen on the partitions holding the history
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE INDEX outbox_created_idx ON integration_outbox (created_at)")
        conn.execute("SET enable_sort = off")
        conn.execute("ALTER DATABASE atk_part_claim SET enable_sort = off")
        conn.execute("ANALYZE integration_outbox")
    with Database(load_settings(dsn=dsn)) as db:
        harmful = claim_plan.claim_health(db)
    for plan in harmful.plans:
        print(plan.shape, plan.reasons)
    assert harmful.degraded == 1
