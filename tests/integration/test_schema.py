"""init-db and the start-up table check (SPEC §1: never change a user's table)."""

import psycopg
import pytest
from psycopg import sql

from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import ColumnsMissing, SchemaNotInitialised, TableMissing
from outbox_monitor.figures import metrics
from outbox_monitor.store import indexes, schema
from outbox_monitor.store.db import Database
from outbox_monitor.store.queries import compose, migration_files
from tests.at_once import run_at_once


def _columns(conn, table="integration_outbox"):
    return conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()


def test_init_db_creates_everything_then_is_a_no_op(empty_dsn):
    with Database(load_settings(dsn=empty_dsn)) as db:
        first = schema.init_db(db, create_table=True)
        second = schema.init_db(db)
        assert first.created_tables == [
            "public.integration_outbox",
            "public.integration_idempotency",
        ]
        assert first.applied_migrations == [
            "001_core",
            "002_alerts",
            "003_audit_function",
            "004_leadership",
            "005_test_notification_function",
            "006_error_groups_cache",
            "007_error_groups_owner_tables_only",
            "008_flow_control",
            "009_claim_skips_held_rows",
            "010_outcomes_only_with_breakers",
            "011_claim_plans",
            "012_health_samples",
            "013_workers_seen",
            "014_event_type_samples",
            "015_timeline_indexes",
            "016_own_retention",
            "017_alert_state_per_outbox",
            "018_scheduler_replicas",
            "019_audit_login",
            "020_writer_outcomes",
            "021_alert_episode_ids",
            "022_control_change_barrier",
            "023_workers_seen_last_fail",
            "024_bounded_type_keys",
            "025_retry_error_groups_cache",
            "026_retry_error_group_counts",
            "027_alert_inhibited_by",
            "028_slack_actions",
            "029_alert_groups",
            "030_static_worker_functions",
            "031_backlog_snapshots",
            "032_worker_function_names_at_the_seam",
            "033_finished_by_event_type_sample",
            "034_worker_function_names_of_hex_tables",
            "035_backlog_snapshot_window",
        ]
        assert first.created_indexes == [
            "integration_outbox_done_at_idx",
            "integration_outbox_failed_at_idx",
            "integration_outbox_failed_by_type_idx",
            "integration_outbox_clock_skew_idx",
        ]
        assert first.dropped_indexes == []
        assert (second.created_tables, second.applied_migrations, second.created_indexes) == (
            [],
            [],
            [],
        )
        assert indexes.missing_recommended_indexes(db) == []
        schema.check_outbox_table(db)


def test_a_table_name_of_61_characters_gets_every_index_under_its_own_name(empty_dsn):
    table = "o" * 61
    cut = table[:35]  # 63 bytes - len("_<8 hex>_failed_by_type_idx") for the longest purpose
    with Database(load_settings(dsn=empty_dsn, table=f"public.{table}")) as db:
        created = schema.init_db(db, create_table=True, flow_control=True).created_indexes
        # a plain cut to 63 bytes gave "ooo…o_c" to claim, clock_skew and created_at alike
        assert len(set(created)) == 5 and all(len(name) <= 63 for name in created)
        assert created[4].startswith(cut) and created[4].endswith("_pending_types_idx")
        assert indexes.missing_recommended_indexes(db) == []
        assert schema.init_db(db, flow_control=True).created_indexes == []
    with psycopg.connect(empty_dsn) as conn:
        names = {
            row[0]
            for row in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,)
            )
        }
    assert set(created) <= names and len(names) == 5 + 4  # pkey, event_key, claim, aggregate


def test_no_indexes_leaves_them_out_and_the_check_names_them(empty_dsn):
    with Database(load_settings(dsn=empty_dsn)) as db:
        assert schema.init_db(db, create_table=True, create_indexes=False).created_indexes == []
        missing = indexes.missing_recommended_indexes(db)
        assert [m.split(":")[0] for m in missing] == [
            "integration_outbox_done_at_idx",
            "integration_outbox_failed_at_idx",
            "integration_outbox_failed_by_type_idx",
            "integration_outbox_clock_skew_idx",
        ]


def test_an_index_an_interrupted_init_db_left_invalid_is_built_again(empty_dsn):
    with Database(load_settings(dsn=empty_dsn)) as db:
        schema.init_db(db, create_table=True, create_indexes=False)
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            # two rows of one aggregate: a unique build on it fails and leaves its index invalid
            conn.execute(
                "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id,"
                " event_key, payload, status)"
                " SELECT 't', 'a', 'same', 'k' || g, '{}', 'done' FROM generate_series(1, 2) g"
            )
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute(
                    "CREATE UNIQUE INDEX CONCURRENTLY integration_outbox_done_at_idx"
                    " ON integration_outbox (aggregate_id)"
                )
            assert indexes.missing_recommended_indexes(db)[0].startswith(
                "integration_outbox_done_at_idx"
            )
            assert "integration_outbox_done_at_idx" in schema.init_db(db).created_indexes
            assert indexes.missing_recommended_indexes(db) == []
            definition = conn.execute(
                "SELECT pg_get_indexdef('integration_outbox_done_at_idx'::regclass)"
            ).fetchone()[0]
            assert "(processed_at) INCLUDE (created_at)" in definition


def test_init_db_never_alters_an_existing_user_table(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with Database(load_settings(dsn=empty_dsn)) as db:
            schema.init_db(db, create_table=True, create_indexes=False)
        conn.execute("ALTER TABLE integration_outbox ADD COLUMN tenant text DEFAULT 'acme'")
        conn.execute(
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id,"
            " event_key, payload) VALUES ('a', 'b', 'c', 'k', '{}')"
        )
        before = (_columns(conn), conn.execute("SELECT * FROM integration_outbox").fetchall())
        with Database(load_settings(dsn=empty_dsn)) as db:
            report = schema.init_db(db)
        after = (_columns(conn), conn.execute("SELECT * FROM integration_outbox").fetchall())
    assert report.created_tables == []
    assert before == after


def _init_db(dsn):
    with Database(load_settings(dsn=dsn)) as db:
        return schema.init_db(db, create_table=True)


def test_two_init_db_at_once_are_safe(empty_dsn):
    run_at_once(lambda: _init_db(empty_dsn))
    with psycopg.connect(empty_dsn) as conn:
        applied = conn.execute("SELECT version FROM outbox_monitor.schema_migrations").fetchall()
    versions = [(version,) for version, _, _ in migration_files()]
    assert sorted(applied) == versions  # each migration once


def test_missing_table_says_how_to_fix(empty_dsn):
    with Database(load_settings(dsn=empty_dsn)) as db, pytest.raises(TableMissing) as caught:
        schema.check_outbox_table(db)
    assert "public.integration_outbox does not exist" in str(caught.value)
    assert "outbox-monitor init-db" in caught.value.hint


def test_missing_and_mistyped_columns_are_listed(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE integration_outbox DROP COLUMN locked_by, DROP COLUMN processed_at"
        )
        conn.execute("ALTER TABLE integration_outbox ALTER COLUMN payload TYPE text")
    with Database(load_settings(dsn=dsn)) as db, pytest.raises(ColumnsMissing) as caught:
        schema.check_outbox_table(db)
    message = str(caught.value)
    assert "missing columns: locked_by, processed_at" in message
    assert "payload is text, expected jsonb" in message


def test_a_figure_on_a_missing_table_raises_table_missing(empty_dsn):
    with Database(load_settings(dsn=empty_dsn)) as db, pytest.raises(TableMissing):
        metrics.queue_depth(db)


def test_monitor_schema_absent_is_reported(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with Database(load_settings(dsn=empty_dsn)) as db:
            schema.init_db(db, create_table=True, create_indexes=False)
        conn.execute("DROP SCHEMA outbox_monitor CASCADE")
    with (
        Database(load_settings(dsn=empty_dsn)) as db,
        pytest.raises(SchemaNotInitialised, match="version 0"),
    ):
        schema.check_outbox_table(db)


def test_custom_schema_and_mixed_case_table_name(dsn):
    settings = load_settings(dsn=dsn, table="billing.Outbox_Events")
    with Database(settings) as db:
        report = schema.init_db(db, create_table=True)
        assert "billing.Outbox_Events" in report.created_tables
        assert "billing.integration_idempotency" in report.created_tables
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                'INSERT INTO billing."Outbox_Events" (event_type, aggregate_type, '
                "aggregate_id, event_key, payload) VALUES ('a', 'b', 'c', 'k', '{}')"
            )
        schema.check_outbox_table(db)
        assert metrics.queue_depth(db) == 1
        assert indexes.missing_recommended_indexes(db) == []


# Indexes an earlier init-db created, and their key columns (indexes.RETIRED_INDEXES).
RETIRED = {
    "integration_outbox_created_at_idx": "(created_at)",
    "integration_outbox_status_processed_at_idx": "(status, processed_at)",
}
USERS_CLAIM = """
WITH due AS (
    SELECT id FROM integration_outbox
    WHERE status = 'pending' AND available_at <= now()
    ORDER BY created_at LIMIT 50
    FOR UPDATE SKIP LOCKED)
UPDATE integration_outbox o SET status = 'processing', locked_at = now(), locked_by = 'w1'
FROM due WHERE o.id = due.id RETURNING o.id"""


def _index_names(conn) -> set[str]:
    rows = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'integration_outbox'")
    return {row["indexname"] for row in rows}


def _create_retired(conn) -> None:
    """The retired indexes, and the migrations of a release that created them (up to 005)
    recorded as applied by an init-db before this release's."""
    for name, columns in RETIRED.items():
        conn.execute(f"CREATE INDEX {name} ON integration_outbox {columns}")
    conn.execute(
        "UPDATE outbox_monitor.schema_migrations SET applied_at = applied_at - interval '1 day'"
        " WHERE version <= 5"
    )


def test_init_db_drops_the_indexes_of_earlier_releases_that_slow_the_claim(db, conn):
    _create_retired(conn)
    assert indexes.retired_indexes_present(db) == list(RETIRED)

    report = schema.init_db(db)

    assert report.dropped_indexes == list(RETIRED)
    assert report.undropped_indexes == {}
    assert not set(RETIRED) & _index_names(conn)
    assert indexes.retired_indexes_present(db) == []
    assert schema.init_db(db).dropped_indexes == []


def test_a_users_index_of_that_name_but_another_definition_stays(db, conn):
    conn.execute(
        "CREATE INDEX integration_outbox_created_at_idx ON integration_outbox (created_at, id)"
    )
    conn.execute(
        "CREATE INDEX integration_outbox_status_processed_at_idx "
        "ON integration_outbox (status, processed_at) WHERE status = 'done'"
    )

    assert schema.init_db(db).dropped_indexes == []
    assert set(RETIRED) <= _index_names(conn)
    assert indexes.retired_indexes_present(db) == []


def test_a_users_own_index_with_postgres_default_name_stays_on_a_first_install(empty_dsn, conn):
    """``CREATE INDEX ON integration_outbox (created_at)`` is named
    integration_outbox_created_at_idx by Postgres itself: the name and definition of a
    retired index. Where no earlier release ever ran init-db, it is the users' own index."""
    with psycopg.connect(empty_dsn, autocommit=True) as users:
        users.execute(
            """CREATE TABLE integration_outbox (
                   id bigserial PRIMARY KEY, event_type text NOT NULL,
                   aggregate_type text NOT NULL, aggregate_id text NOT NULL,
                   event_key text NOT NULL UNIQUE, payload jsonb NOT NULL,
                   status text NOT NULL DEFAULT 'pending', attempts int NOT NULL DEFAULT 0,
                   available_at timestamptz NOT NULL DEFAULT now(), locked_at timestamptz,
                   locked_by text, last_error text,
                   created_at timestamptz NOT NULL DEFAULT now(), processed_at timestamptz)"""
        )
        users.execute("CREATE INDEX ON integration_outbox (created_at)")  # for their reports
        users.execute("CREATE INDEX ON integration_outbox (status, processed_at)")
        with Database(load_settings(dsn=empty_dsn)) as fresh:
            first = schema.init_db(fresh)
            again = schema.init_db(fresh)
            present = indexes.retired_indexes_present(fresh)
        names = {
            row[0]
            for row in users.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'integration_outbox'"
            )
        }
    assert first.dropped_indexes == again.dropped_indexes == []
    assert set(RETIRED) <= names
    assert present == []


FINISHED = "integration_outbox_finished_idx"


@pytest.mark.parametrize("status_type", ["text", "varchar(16)"])
def test_init_db_replaces_the_finished_index_that_slowed_the_ack(db, conn, status_type):
    """The finished index of the releases before issue 32, exactly as their init-db built it
    (on a varchar status Postgres prints its predicate with casts), is named with its harm;
    init-db builds done_at and failed_at in its place and drops it. A users' index of that
    name but another definition stays."""
    conn.execute(f"ALTER TABLE integration_outbox ALTER COLUMN status TYPE {status_type}")
    done_at, failed_at = (
        index.name("integration_outbox") for index in indexes.RECOMMENDED_INDEXES[:2]
    )
    conn.execute(f"DROP INDEX {done_at}, {failed_at}")
    conn.execute(
        f"CREATE INDEX {FINISHED} ON integration_outbox (status, processed_at)"
        " INCLUDE (created_at) WHERE status IN ('done', 'failed')"
    )
    assert indexes.retired_indexes_present(db) == [FINISHED]
    assert indexes.retired_harm("integration_outbox", FINISHED) == (
        "slows the workers' ack: a descent of the index per acked row"
    )

    report = schema.init_db(db)

    assert (report.created_indexes, report.dropped_indexes) == ([done_at, failed_at], [FINISHED])
    assert FINISHED not in _index_names(conn)
    assert indexes.missing_recommended_indexes(db) == indexes.retired_indexes_present(db) == []
    conn.execute(
        f"CREATE INDEX {FINISHED} ON integration_outbox (status, processed_at)"
        " WHERE status IN ('done', 'failed')"
    )
    assert schema.init_db(db).dropped_indexes == []
    assert FINISHED in _index_names(conn)


def _plan_scans(conn, name: str, params: dict) -> list[str]:
    """``Node Type(Index Name)`` of every index scan in the plan of the named query."""
    found = conn.execute(
        sql.SQL("EXPLAIN (FORMAT JSON) ")
        + compose(name, table=sql.Identifier("integration_outbox")),
        params,
    ).fetchone()["QUERY PLAN"]
    nodes = [found[0]["Plan"]]
    scans = []
    while nodes:
        node = nodes.pop()
        nodes += node.get("Plans", [])
        if "Index Name" in node:
            scans.append(f"{node['Node Type']}({node['Index Name']})")
    return scans


def test_the_windowed_figures_read_done_at_and_failed_at(db, conn):
    """20,000 finished rows, one each 86 s back (every 40th a dead letter), each processed
    10 s after its creation: the statements of a 1 h window read done_at (latency and processed,
    index-only) and failed_at, not the history, and the figures are those counted by hand: 41
    rows in the hour, 40 done and 1 failed (the 40th)."""
    conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, status, created_at, processed_at)
           SELECT 'order.paid', 'order', g::text, 'w:' || g, '{}',
                  CASE WHEN g % 40 = 0 THEN 'failed' ELSE 'done' END,
                  now() - g * interval '86 s' - interval '10 s', now() - g * interval '86 s'
           FROM generate_series(1, 20000) AS g"""
    )
    conn.execute("VACUUM ANALYZE integration_outbox")
    done_at, failed_at = (
        index.name("integration_outbox") for index in indexes.RECOMMENDED_INDEXES[:2]
    )
    window = {"window": 3600.0}
    for name in ("latency_percentiles", "processed_in_window"):
        assert _plan_scans(conn, name, window) == [f"Index Only Scan({done_at})"], name
    for name in ("failed_by_event_type", "failed_in_window"):
        assert [s for s in _plan_scans(conn, name, window) if failed_at in s], name

    assert metrics.latency_percentiles(db, window=3600) == {"p50": 10.0, "p95": 10.0, "p99": 10.0}
    assert metrics.throughput(db, window=3600)["processed_per_minute"] == 40 / 60
    assert metrics.failed_by_event_type(db, window=3600) == {"order.paid": 1}


def test_no_indexes_drops_no_index_either(db, conn):
    _create_retired(conn)
    assert schema.init_db(db, create_indexes=False).dropped_indexes == []
    assert set(RETIRED) <= _index_names(conn)


def test_a_lock_it_cannot_get_leaves_the_index_and_says_so(db, dsn, conn, monkeypatch):
    _create_retired(conn)
    monkeypatch.setattr(schema, "DROP_LOCK_TIMEOUT_SECONDS", 0.3)
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE integration_outbox IN SHARE UPDATE EXCLUSIVE MODE")
        report = schema.init_db(db)
    assert report.dropped_indexes == []
    assert list(report.undropped_indexes) == list(RETIRED)
    assert all("lock timeout (0.3 s)" in reason for reason in report.undropped_indexes.values())
    assert set(RETIRED) <= _index_names(conn)
    assert schema.init_db(db).dropped_indexes == list(RETIRED)


def test_the_workers_claim_can_use_no_recommended_index(db, conn, rows):
    """Even without the users' claim index and with sequential scans disabled, the planner
    finds no index init-db creates (--flow-control's too) to serve the SPEC §1 claim: none
    orders by created_at and none has a predicate that the claim's clauses imply
    (pending_types' also needs event_type IS NOT NULL, which holds but which the users'
    claim never states)."""
    assert schema.init_db(db, flow_control=True).created_indexes == [
        indexes.FLOW_CONTROL_INDEX.name("integration_outbox")
    ]
    for n in range(200):
        rows.add(status="pending" if n % 2 else "done", created_ago=n, processed_ago=0)
    conn.execute("ANALYZE integration_outbox")
    with conn.transaction(force_rollback=True):
        conn.execute("DROP INDEX integration_outbox_claim_idx")
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(
            row["QUERY PLAN"] for row in conn.execute("EXPLAIN " + USERS_CLAIM).fetchall()
        )
    ours = [
        index.name("integration_outbox")
        for index in (*indexes.RECOMMENDED_INDEXES, indexes.FLOW_CONTROL_INDEX)
    ]
    assert not [name for name in ours if name in plan], plan
