"""Attack: prune by partition with partitions whose names need quotes, in a schema with a dot."""

from datetime import timedelta

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.run import apply
from outbox_monitor.config.settings import load_settings
from outbox_monitor.store import schema
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import create_outbox_table

DAY = 86400
ACTOR = Identity("oncall@example.com", Role.operator, "oidc")


def test_prune_detaches_partitions_named_with_upper_case_and_a_dot(pg_cluster):
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS atk_quoted")
        c.execute("CREATE DATABASE atk_quoted")
    dsn = pg_cluster.dsn_for("atk_quoted")
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute('CREATE SCHEMA "Ops.Q"')
        conn.execute(
            create_outbox_table(
                sql.Identifier("public", "integration_outbox"),
                "integration_outbox",
                keys=sql.SQL("PRIMARY KEY (id, created_at), UNIQUE (event_key, created_at)"),
                partitioning=sql.SQL("PARTITION BY RANGE (created_at)"),
            )
        )
        b = conn.execute("SELECT date_trunc('day', now()) AS b").fetchone()["b"]
        for name, lo, hi in (("Old.Part", -200, -100), ("new'part", -100, 30)):
            conn.execute(
                sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})").format(
                    sql.Identifier("Ops.Q", name),
                    sql.Identifier("public", "integration_outbox"),
                    sql.Literal(b + timedelta(days=lo)),
                    sql.Literal(b + timedelta(days=hi)),
                )
            )
        for i, (created, status) in enumerate(((150, "done"), (140, "done"), (5, "pending"))):
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (event_type, aggregate_type, aggregate_id, event_key, payload,"
                    " status, created_at, processed_at) VALUES ('t', 'a', '1', %s, '{{}}', %s,"
                    " now() - make_interval(days => %s), CASE WHEN %s = 'done' THEN"
                    " now() - make_interval(days => %s) END)"
                ).format(sql.Identifier("public", "integration_outbox")),
                (f"k{i}", status, created, status, created - 1),
            )
    settings = load_settings(dsn=dsn)
    with Database(settings) as db:
        schema.init_db(db)
        preview = preview_prune(db, done_older_than=30 * DAY, failed_older_than=90 * DAY)
        print(preview.details)
        assert [p["name"] for p in preview.details["partitions"]] == ["Old.Part"]
        result = apply(db, preview, actor=ACTOR)
        print(result)
        assert result.detached and result.changed == 2 and not result.kept
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("""SELECT to_regclass('"Ops.Q"."Old.Part"')""").fetchone()[0] is None
        assert conn.execute("SELECT count(*) FROM integration_outbox").fetchone()[0] == 1
