"""An outbox partitioned by range of created_at (issue 14 item 3): the table check, publish's
dedup, every figure, the shared worker functions, init-db's indexes and prune by partition, on a
real partitioned table.

The template's outbox has four ranges of 30 days and a default partition. ``B`` is the midnight
after the template was made; the ranges are [B-120d, B-90d), [B-90d, B-60d), [B-60d, B-30d) and
[B-30d, B+30d): a row created ``n`` days ago (n whole, within a range) sits in the range holding
B-n-1d..B-nd, e.g. 100 days ago in the first, 70 in the second, 45 in the third, anything newer
than 29 days in the fourth; 200 days ago in the default partition.
"""

import itertools
import json
from datetime import timedelta

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.rows import dict_row

from outbox_monitor import outbox
from outbox_monitor.access import Identity, Role
from outbox_monitor.actions import partition_detach, partitions
from outbox_monitor.actions.partition_lines import preview_lines
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.run import apply
from outbox_monitor.cli import main
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.partitioned import create_partitioned_outbox
from outbox_monitor.errors import PartitioningUnsupported
from outbox_monitor.store import partitioned_indexes, partitioning, schema
from outbox_monitor.store.db import Database
from outbox_monitor.store.indexes import (
    FLOW_CONTROL_INDEX,
    RECOMMENDED_INDEXES,
    index_name,
    missing_recommended_indexes,
)
from tests.at_once import run_at_once
from tests.conftest import TEMPLATE, Rows

PARTITIONED_TEMPLATE = "outbox_partitioned_template"
TEMPLATE_WITHOUT_DEFAULT = "outbox_partitioned_nodefault_template"
DAY = 86400
ACTOR = Identity("oncall@example.com", Role.operator, "oidc")
SLACK_SECONDS = 5
RECOMMENDED = [index.purpose for index in RECOMMENDED_INDEXES]
_databases = itertools.count()


def _database(cluster, template: str) -> str:
    """A fresh database cloned from ``template`` (names of this module's own)."""
    name = f"tp_{next(_databases)}"
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    return cluster.dsn_for(name)


def _bounds(conn):
    """[B-120d, B-90d, B-60d, B-30d, B+30d], B the database's next midnight."""
    midnight = conn.execute("SELECT date_trunc('day', now()) + interval '1 day' AS b").fetchone()
    b = midnight["b"] if isinstance(midnight, dict) else midnight[0]
    return [b + timedelta(days=days) for days in (-120, -90, -60, -30, 30)]


def _make_template(cluster, name: str, *, default: bool) -> None:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = cluster.dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_partitioned_outbox(
            conn, "public", "integration_outbox", _bounds(conn), default=default
        )
    with Database(load_settings(dsn=dsn)) as db:
        schema.init_db(db, create_table=True)


@pytest.fixture(scope="module")
def partitioned_templates(pg_cluster):
    """Two template databases whose outbox is partitioned (see the module's docstring), with
    and without a default partition, each after init-db (recommended indexes included)."""
    _make_template(pg_cluster, PARTITIONED_TEMPLATE, default=True)
    _make_template(pg_cluster, TEMPLATE_WITHOUT_DEFAULT, default=False)
    yield
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        for name in (PARTITIONED_TEMPLATE, TEMPLATE_WITHOUT_DEFAULT):
            conn.execute(f"DROP DATABASE {name}")


@pytest.fixture
def dsn(pg_cluster, partitioned_templates):
    """This module's databases have the partitioned outbox (``db``, ``conn`` and ``rows`` of
    conftest use it)."""
    return _database(pg_cluster, PARTITIONED_TEMPLATE)


@pytest.fixture
def dsn_without_default(pg_cluster, partitioned_templates):
    return _database(pg_cluster, TEMPLATE_WITHOUT_DEFAULT)


def _partition_of(conn, row_id: int) -> str:
    return conn.execute(
        "SELECT tableoid::regclass::text AS p FROM integration_outbox WHERE id = %s", (row_id,)
    ).fetchone()["p"]


def _partitions(conn) -> list[str]:
    """The outbox's partitions, oldest range first, the default last."""
    return [
        row["p"]
        for row in conn.execute(
            "SELECT inhrelid::regclass::text AS p FROM pg_inherits "
            "WHERE inhparent = 'integration_outbox'::regclass "
            "ORDER BY inhrelid::regclass::text LIKE '%\\_default', 1"
        )
    ]


def _audit(conn):
    return conn.execute("SELECT * FROM outbox_monitor.audit_log ORDER BY id").fetchall()


# ------------------------------------------------------------------------- the table check


def test_the_table_check_accepts_a_partitioned_outbox(db, conn, rows):
    old, new, stray = (
        rows.add(created_ago=100 * DAY),
        rows.add(created_ago=60),
        rows.add(created_ago=200 * DAY),
    )
    schema.check_outbox_table(db)
    shape = partitioning.table_shape(db)
    assert (shape.partitioned, shape.by_created_at, shape.has_default) == (True, True, True)
    assert shape.event_key_unique
    first, *_, last, default = _partitions(conn)
    assert (_partition_of(conn, old), _partition_of(conn, new)) == (first, last)
    assert _partition_of(conn, stray) == default == "integration_outbox_default"


def test_a_partitioned_outbox_without_the_unique_index_is_refused(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        create_partitioned_outbox(conn, "public", "integration_outbox", _bounds(conn), unique=False)
    with Database(load_settings(dsn=empty_dsn)) as db:
        schema.init_db(db)
        with pytest.raises(PartitioningUnsupported) as caught:
            schema.check_outbox_table(db)
    error = caught.value
    assert "no valid unique index on (event_key, created_at)" in str(error.args[0])
    assert "CREATE UNIQUE INDEX ON public.integration_outbox (event_key, created_at)" in error.hint
    assert "idempotency ledger is the guard" in error.hint


def test_a_table_partitioned_by_another_key_is_refused(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(
            """CREATE TABLE integration_outbox (
                   id bigserial, event_type text NOT NULL, aggregate_type text NOT NULL,
                   aggregate_id text NOT NULL, event_key text NOT NULL, payload jsonb NOT NULL,
                   status text NOT NULL DEFAULT 'pending', attempts integer NOT NULL DEFAULT 0,
                   available_at timestamptz NOT NULL DEFAULT now(), locked_at timestamptz,
                   locked_by text, last_error text,
                   created_at timestamptz NOT NULL DEFAULT now(), processed_at timestamptz,
                   UNIQUE (event_key)) PARTITION BY HASH (event_key)"""
        )
    with Database(load_settings(dsn=empty_dsn)) as db:
        schema.init_db(db, create_indexes=False)
        with pytest.raises(PartitioningUnsupported, match="partitioned by hash of event_key"):
            schema.check_outbox_table(db)


# ------------------------------------------------------------------------------ publish


def _publish(conn, key: str, **fields):
    return outbox.publish(
        conn,
        event_type="order.paid",
        aggregate_type="order",
        aggregate_id="42",
        event_key=key,
        payload={"n": 1},
        **fields,
    )


def test_publish_dedups_within_one_created_at_and_the_trade_off_across_instants(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert outbox.conflict_target(conn).as_string(conn) == ""
        with conn.transaction():  # one transaction: one now(), one created_at
            first = _publish(conn, "order.paid:42:pay_9")
            again = _publish(conn, "order.paid:42:pay_9")
        assert first is not None and again is None
        with conn.transaction():  # another instant: the SPEC §1 trade-off, a second row
            later = _publish(conn, "order.paid:42:pay_9")
        assert later is not None and later != first
        rows = conn.execute(
            "SELECT count(*) FROM integration_outbox WHERE event_key = 'order.paid:42:pay_9'"
        ).fetchone()
    assert rows == (2,)


def test_publish_keeps_its_conflict_target_on_an_ordinary_table(pg_cluster):
    with psycopg.connect(_database(pg_cluster, TEMPLATE), autocommit=True) as conn:
        assert outbox.conflict_target(conn).as_string(conn) == "(event_key)"
        with conn.transaction():
            _publish(conn, "k")
        with conn.transaction():
            assert _publish(conn, "k") is None  # the whole table's unique event_key


def test_the_shape_is_looked_up_once_per_connection(dsn, monkeypatch):
    composed = []
    compose = outbox.compose
    monkeypatch.setattr(
        outbox, "compose", lambda name, **kw: composed.append(name) or compose(name, **kw)
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        for key in "abc":
            _publish(conn, key)
    with psycopg.connect(dsn, autocommit=True) as conn:
        _publish(conn, "d")
    assert composed.count("table_partitioned") == 2  # once per connection
    assert composed.count("publish") == 4


# ------------------------------------------------------------------------------ figures


def test_every_figure_of_status_json_across_partitions(dsn, rows, monkeypatch):
    # pending: one stuck 100 days ago (first range), one due, one in backoff (fourth range)
    rows.add(event_type="order.paid", created_ago=100 * DAY)
    rows.add(event_type="order.paid", created_ago=120)
    rows.add(event_type="invoice.sent", created_ago=300, available_ago=-600, attempts=2)
    # processing: one stuck since a lock 2,000 s old (third range), one fresh (fourth)
    rows.add(status="processing", created_ago=45 * DAY, locked_ago=2000, attempts=1)
    rows.add(status="processing", created_ago=50, locked_ago=10)
    # done in the window: 10 s and 30 s from creation; one done 39 days ago (third range)
    rows.add(status="done", event_type="invoice.sent", created_ago=110, processed_ago=100)
    rows.add(status="done", event_type="invoice.sent", created_ago=130, processed_ago=100)
    rows.add(status="done", created_ago=40 * DAY, processed_ago=39 * DAY)
    # failed: one in the window (fourth range), one 69 days ago (second range)
    rows.add_failed(event_type="payment.captured", created_ago=90, processed_ago=60)
    rows.add_failed(created_ago=70 * DAY, processed_ago=69 * DAY, attempts=3)
    # the default partition: done 199 days ago
    rows.add(status="done", created_ago=200 * DAY, processed_ago=199 * DAY)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    result = CliRunner().invoke(
        main, ["status", "--json", "--window", "1h", "--lock-timeout", "15m"], prog_name="x"
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["queue_depth"] == 2
    assert figures["pending_total"] == 3
    assert figures["scheduled_retries"] == 1
    assert 100 * DAY <= figures["oldest_pending_age_seconds"] < 100 * DAY + SLACK_SECONDS
    assert (figures["processing"], figures["stuck_locks"]) == (2, 1)
    # done durations 10 s and 30 s: p50 = 20, p95 = 10 + 0.95·20 = 29, p99 = 29.8
    assert figures["latency_seconds"] == pytest.approx({"p50": 20, "p95": 29, "p99": 29.8})
    assert figures["processed_per_minute"] == pytest.approx(2 / 60)
    # created in the hour: pending 120 s and 300 s, processing 50 s, done 110 s and 130 s,
    # failed 90 s
    assert figures["created_per_minute"] == pytest.approx(6 / 60)
    assert figures["failed_in_window"] == 1
    assert figures["failed_by_event_type"] == {"payment.captured": 1}
    # not done: pending 0, 0, 2; processing 1, 0; failed 10, 3
    assert figures["attempts_histogram"] == {"0": 3, "1": 1, "2": 1, "3": 1, "10": 1}


def test_the_table_size_sums_the_partitions(db, rows):
    rows.add_dead_letters(2000)
    pages = db.fetch_one("table_pages", {"table_regclass": db.table_name})["pages"]
    assert pages > 10  # the parent alone has no pages


# ------------------------------------------------------------ the shared worker functions


def test_claim_ack_and_fail_through_the_shared_functions(dsn, rows, conn):
    old = rows.add(created_ago=100 * DAY)  # first range
    new = rows.add(created_ago=60)  # fourth range
    with psycopg.connect(dsn, autocommit=True) as worker:
        claimed = outbox.claim(worker, "w1", limit=10)
        assert [row["id"] for row in claimed] == [old, new]  # oldest first, across partitions
        assert outbox.ack(worker, old, "w1")
        assert outbox.retry(worker, new, "w1", "HTTP 503") == "pending"
        assert not outbox.ack(worker, new, "w1")  # no longer claimed
    done, retried = rows.get(old), rows.get(new)
    assert (done["status"], done["processed_at"] is not None) == ("done", True)
    assert (retried["status"], retried["attempts"], retried["last_error"]) == (
        "pending",
        1,
        "HTTP 503",
    )
    assert _partition_of(conn, old) != _partition_of(conn, new)


def test_ack_many_acks_a_batch_across_partitions(dsn, rows, conn):
    """The table's ack_many (migration 030) on a partitioned outbox: one statement acks the
    rows of several partitions; the one not held by this worker stays as it was."""
    old = rows.add(created_ago=100 * DAY)  # first range
    middle = rows.add(created_ago=70 * DAY)  # second range
    new = rows.add(created_ago=60)  # fourth range
    with psycopg.connect(dsn, autocommit=True) as worker:
        assert [row["id"] for row in outbox.claim(worker, "w1", limit=2)] == [old, middle]
        assert [row["id"] for row in outbox.claim(worker, "w2", limit=2)] == [new]
        assert outbox.ack_many(worker, [new, middle, old], "w1") == sorted([old, middle])
    assert [rows.get(i)["status"] for i in (old, middle, new)] == ["done", "done", "processing"]
    assert len({_partition_of(conn, i) for i in (old, middle, new)}) == 3


@pytest.mark.parametrize("pending_types", [False, True], ids=["008", "024 index"])
def test_flow_control_across_partitions(db, dsn, rows, conn, pending_types):
    """A pause skips its rows (with init-db --flow-control's index, by migration 009's loose
    scan of the partitioned index), and a breaker logs the outcome of an ack (which reads the
    row's xmin through the outbox)."""
    if pending_types:
        assert schema.init_db(db, flow_control=True).created_indexes == [
            index_name("integration_outbox", "pending_types")
        ]
    rows.add(event_type="crm.sync", created_ago=100 * DAY)
    wanted = rows.add(event_type="order.paid", created_ago=45 * DAY)
    conn.execute(
        "INSERT INTO outbox_monitor.controls (outbox, event_type_filter, layer, paused, breaker,"
        " updated_by) VALUES ('integration_outbox'::regclass, 'crm.%', 'ui', true, false, 't'),"
        " ('integration_outbox'::regclass, 'order.%', 'ui', false, true, 't')"
    )
    ok = "SELECT outbox_monitor.flow_table_ok('integration_outbox'::regclass) AS ok"
    assert conn.execute(ok).fetchone()["ok"]
    with psycopg.connect(dsn, autocommit=True) as worker:
        outbox.claim(worker, "w1")  # the first claim creates the controls' state rows
        assert [row["id"] for row in outbox.claim(worker, "w1")] == [wanted]
        assert outbox.ack(worker, wanted, "w1")
    outcomes = conn.execute(
        "SELECT event_type_filter, failed FROM outbox_monitor.control_outcomes"
    ).fetchall()
    assert outcomes == [{"event_type_filter": "order.%", "failed": False}]


# --------------------------------------------------------------------- init-db's indexes


def _index_state(conn, purpose: str) -> tuple[bool, dict[str, bool]]:
    """The parent's recommended index: valid?, and per leaf partition whether the index tree
    under it holds a valid index of that leaf."""
    name = index_name("integration_outbox", purpose)
    parent = conn.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = %s::regclass", (name,)
    ).fetchone()
    leaves = conn.execute(
        """SELECT t.relid::regclass::text AS partition, coalesce(i.valid, false) AS valid
           FROM pg_partition_tree('integration_outbox') t
           LEFT JOIN (SELECT x.indrelid, x.indisvalid AS valid
                      FROM pg_partition_tree(%s::regclass) it
                      JOIN pg_index x ON x.indexrelid = it.relid
                      WHERE it.isleaf) AS i ON i.indrelid = t.relid
           WHERE t.isleaf""",
        (name,),
    ).fetchall()
    return parent["indisvalid"], {row["partition"]: row["valid"] for row in leaves}


def test_init_db_builds_every_recommended_index_partition_by_partition(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as conn:
        create_partitioned_outbox(conn, "public", "integration_outbox", _bounds(conn))
        # a sub-partitioned range: its index is built ON ONLY too, its leaves CONCURRENTLY
        conn.execute(
            "CREATE TABLE integration_outbox_2100 PARTITION OF integration_outbox "
            "FOR VALUES FROM ('2100-01-01') TO ('2100-03-01') PARTITION BY RANGE (created_at);"
            "CREATE TABLE integration_outbox_2100_01 PARTITION OF integration_outbox_2100 "
            "FOR VALUES FROM ('2100-01-01') TO ('2100-02-01');"
            "CREATE TABLE integration_outbox_2100_02 PARTITION OF integration_outbox_2100 "
            "FOR VALUES FROM ('2100-02-01') TO ('2100-03-01')"
        )
        conn.execute(
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
            "event_key, payload, status, created_at, processed_at) "
            "SELECT 't', 'a', '1', 'k' || g, '{}', 'done', now() - g * interval '1 day', now() "
            "FROM generate_series(0, 150) AS g"
        )
        with Database(load_settings(dsn=empty_dsn)) as db:
            first = schema.init_db(db, create_table=True, flow_control=True)
            second = schema.init_db(db, flow_control=True)
            assert missing_recommended_indexes(db) == []
        assert first.created_tables == ["public.integration_idempotency"]
        assert first.created_indexes == [
            index_name("integration_outbox", purpose)
            for purpose in [*RECOMMENDED, FLOW_CONTROL_INDEX.purpose]
        ]
        assert (first.unfinished_indexes, second.created_indexes) == ({}, [])
        for purpose in [*RECOMMENDED, FLOW_CONTROL_INDEX.purpose]:
            valid, leaves = _index_state(conn, purpose)
            assert valid and len(leaves) == 7 and all(leaves.values()), (purpose, leaves)
        # a partition made later (as pg_partman premakes them) gets every index from the parent
        conn.execute(
            "CREATE TABLE integration_outbox_next PARTITION OF integration_outbox "
            "FOR VALUES FROM ('2101-01-01') TO ('2101-02-01')"
        )
        for purpose in RECOMMENDED:
            assert _index_state(conn, purpose)[1]["integration_outbox_next"]


def test_init_db_finishes_what_an_interrupted_run_left(empty_dsn, monkeypatch):
    monkeypatch.setattr(partitioned_indexes, "PARTITION_DDL_LOCK_TIMEOUT_SECONDS", 0.3)
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as conn:
        names = create_partitioned_outbox(conn, "public", "integration_outbox", _bounds(conn))
        with Database(load_settings(dsn=empty_dsn)) as db:
            schema.init_db(db, create_indexes=False)
            # a write transaction open on the outbox: CREATE INDEX … ON ONLY waits for it
            with psycopg.connect(empty_dsn) as writer:
                writer.execute(
                    "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id,"
                    " event_key, payload) VALUES ('t', 'a', '1', 'k', '{}')"
                )
                stopped = schema.init_db(db)
                writer.rollback()
            assert stopped.created_indexes == []
            assert set(stopped.unfinished_indexes) == {
                index_name("integration_outbox", purpose) for purpose in RECOMMENDED
            }
            assert all("lock timeout (0.3 s)" in why for why in stopped.unfinished_indexes.values())
            # what a run cut short after its first partition leaves: the parent's index
            # invalid, one partition's index built and not attached yet
            done_at = index_name("integration_outbox", "done_at")
            conn.execute(
                f"CREATE INDEX {done_at} ON ONLY integration_outbox (processed_at) "
                "INCLUDE (created_at) WHERE status = 'done'"
            )
            own = index_name(names[0], "done_at")
            conn.execute(
                f"CREATE INDEX {own} ON {names[0]} (processed_at) "
                "INCLUDE (created_at) WHERE status = 'done'"
            )
            assert _index_state(conn, "done_at")[0] is False
            resumed = schema.init_db(db)
            assert resumed.unfinished_indexes == {}
            assert done_at in resumed.created_indexes
            assert missing_recommended_indexes(db) == []
        valid, leaves = _index_state(conn, "done_at")
        assert valid and all(leaves.values())
        indexes = conn.execute(
            "SELECT count(*) AS n FROM pg_indexes WHERE tablename = %s", (names[0],)
        ).fetchone()
        assert indexes["n"] == 2 + 2 + len(RECOMMENDED)  # pkey, unique, users' 2, ours


def test_two_init_db_at_once_on_a_partitioned_outbox(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        create_partitioned_outbox(conn, "public", "integration_outbox", _bounds(conn))

    def init_db():
        with Database(load_settings(dsn=empty_dsn)) as db:
            return schema.init_db(db)

    reports = run_at_once(init_db)
    created = sorted(name for report in reports for name in report.created_indexes)
    assert created == sorted(index_name("integration_outbox", purpose) for purpose in RECOMMENDED)


# ---------------------------------------------------------------------- prune by partition


def _fill_for_prune(rows):
    """Rows for a prune with done 30 days and failed 90 days: the first range (100 days) all
    past retention; the second (70 days) holds a failed row of 69 days (younger than 90): mixed;
    the third (45 days) holds a pending row; the default holds rows past retention."""
    whole = [
        rows.add(status="done", created_ago=100 * DAY, processed_ago=99 * DAY),
        rows.add(status="done", created_ago=101 * DAY, processed_ago=100 * DAY),
        rows.add_failed(created_ago=105 * DAY, processed_ago=95 * DAY),
    ]
    mixed_done = rows.add(status="done", created_ago=70 * DAY, processed_ago=69 * DAY)
    mixed_failed = rows.add_failed(created_ago=70 * DAY, processed_ago=69 * DAY)
    held_done = rows.add(status="done", created_ago=45 * DAY, processed_ago=44 * DAY)
    pending = rows.add(created_ago=45 * DAY)
    default_done = rows.add(status="done", created_ago=200 * DAY, processed_ago=199 * DAY)
    recent = rows.add(status="done", created_ago=100, processed_ago=50)
    return whole, mixed_done, mixed_failed, held_done, pending, default_done, recent


def test_prune_detaches_a_partition_past_retention_and_prunes_the_rest_row_by_row(db, rows, conn):
    whole, mixed_done, mixed_failed, held_done, pending, default_done, recent = _fill_for_prune(
        rows
    )
    first, second, third, fourth, default = _partitions(conn)
    preview = preview_prune(db, done_older_than=30 * DAY, failed_older_than=90 * DAY)
    # whole (3) + mixed done + held done + default done: the row-by-row count holds them all
    assert preview.matched == 6
    listed = preview.details["partitions"]
    assert [(p["name"], p["rows"], p["done"], p["failed"]) for p in listed] == [(first, 3, 2, 1)]
    assert preview.details["detach"] == "exclusive lock"  # a default partition: no CONCURRENTLY
    assert preview.filter["detach_partitions"] == [f"public.{first}"]
    assert "1 partition(s) detached whole" in preview_lines(preview.details)[0]
    result = apply(db, preview, actor=ACTOR, batch_size=2)
    assert (result.detached, result.kept) == ((f"public.{first}",), {})
    assert (result.changed, result.skipped) == (6, 0)
    assert _partitions(conn) == [second, third, fourth, default]
    assert conn.execute("SELECT to_regclass(%s) AS r", (first,)).fetchone()["r"] is None
    left = {r["id"] for r in conn.execute("SELECT id FROM integration_outbox")}
    assert left == {mixed_failed, pending, recent}
    audit = _audit(conn)
    detached = [a for a in audit if a["filter"].get("partition")]
    assert [(a["filter"]["partition"], a["affected_count"]) for a in detached] == [
        (f"public.{first}", 3)
    ]
    assert sorted(detached[0]["affected_ids"]) == sorted(whole)
    assert detached[0]["filter"]["detached"] is True
    batches = [a for a in audit if not a["filter"].get("partition")]
    assert sorted(i for a in batches for i in a["affected_ids"]) == sorted(
        [mixed_done, held_done, default_done]
    )
    assert len({a["run_id"] for a in audit}) == 1
    assert all(a["filter"]["detach_partitions"] == [f"public.{first}"] for a in audit)


def test_a_partition_holding_a_pending_row_is_not_detached(db, rows, conn):
    rows.add(status="done", created_ago=100 * DAY, processed_ago=99 * DAY)
    rows.add(status="pending", created_ago=101 * DAY)
    rows.add(status="processing", created_ago=72 * DAY, locked_ago=10)
    rows.add(status="done", created_ago=71 * DAY, processed_ago=70 * DAY)
    preview = preview_prune(db, done_older_than=30 * DAY, failed_older_than=90 * DAY)
    assert preview.details == {} and preview.matched == 2
    result = apply(db, preview, actor=ACTOR)
    assert (result.changed, result.detached) == (2, ())
    assert len(_partitions(conn)) == 5
    assert {r["status"] for r in conn.execute("SELECT status FROM integration_outbox")} == {
        "pending",
        "processing",
    }


def test_a_partition_not_counted_within_the_statement_timeout_is_left_to_the_batches(
    dsn, rows, monkeypatch
):
    rows.add(status="done", created_ago=100 * DAY, processed_ago=99 * DAY)
    count = partitions.count_rows

    def slow(conn, *args, **kwargs):  # as a count of a huge partition
        conn.execute("SELECT pg_sleep(1)")
        return count(conn, *args, **kwargs)

    monkeypatch.setattr(partitions, "count_rows", slow)
    with Database(load_settings(dsn=dsn, statement_timeout=0.3)) as db:
        preview = preview_prune(db, done_older_than=30 * DAY, failed_older_than=None)
    assert "partitions" not in preview.details and preview.matched == 1
    (name, why), *_ = preview.details["uncounted_partitions"].items()
    assert name.startswith("public.integration_outbox_p")
    assert "not counted within the statement timeout (0.3 s)" in why
    assert preview_lines(preview.details)[0] == "partitions left to the batches:"


def test_a_row_replayed_after_the_preview_keeps_its_partition(db, rows, conn):
    rows.add(status="done", created_ago=100 * DAY, processed_ago=99 * DAY)
    dead = rows.add_failed(created_ago=100 * DAY, processed_ago=95 * DAY)
    preview = preview_prune(db, done_older_than=30 * DAY, failed_older_than=90 * DAY)
    assert [p["rows"] for p in preview.details["partitions"]] == [2]
    conn.execute("UPDATE integration_outbox SET status = 'pending' WHERE id = %s", (dead,))
    result = apply(db, preview, actor=ACTOR)
    assert result.detached == ()
    assert list(result.kept.values()) == [
        "rows changed since the preview: they are deleted row by row"
    ]
    assert result.changed == 1  # the done row, row by row
    assert len(_partitions(conn)) == 5
    assert rows.get(dead)["status"] == "pending"


def test_a_row_changed_during_the_detach_brings_the_partition_back(db, rows, conn, monkeypatch):
    rows.add(status="done", created_ago=100 * DAY, processed_ago=99 * DAY)
    dead = rows.add_failed(created_ago=100 * DAY, processed_ago=95 * DAY)
    first = _partitions(conn)[0]
    preview = preview_prune(db, done_older_than=30 * DAY, failed_older_than=90 * DAY)
    detach = partition_detach._detach_partition

    def replay_then_detach(*args, **kwargs):  # a replay between the check and the detach
        conn.execute("UPDATE integration_outbox SET status = 'pending' WHERE id = %s", (dead,))
        return detach(*args, **kwargs)

    monkeypatch.setattr(partition_detach, "_detach_partition", replay_then_detach)
    result = apply(db, preview, actor=ACTOR)
    assert result.detached == ()
    assert "attached back" in result.kept[f"public.{first}"]
    assert _partitions(conn)[0] == first
    assert rows.get(dead)["status"] == "pending"  # read through the outbox again
    assert result.changed == 1


def test_prune_detaches_concurrently_without_a_default_partition(dsn_without_default):
    with psycopg.connect(dsn_without_default, autocommit=True, row_factory=dict_row) as conn:
        rows = Rows(conn)
        old = [rows.add(status="done", created_ago=100 * DAY, processed_ago=99 * DAY)]
        rows.add(status="done", created_ago=10 * DAY, processed_ago=9 * DAY)
        with Database(load_settings(dsn=dsn_without_default)) as db:
            preview = preview_prune(db, done_older_than=30 * DAY, failed_older_than=90 * DAY)
            assert preview.details["detach"] == "concurrently"
            result = apply(db, preview, actor=ACTOR)
        assert (len(result.detached), result.changed) == (1, 1)
        assert result.ids == old
        assert len(_partitions(conn)) == 3


def test_an_interrupted_concurrent_detach_is_finished_by_the_next_prune(
    dsn_without_default, monkeypatch
):
    monkeypatch.setattr(partition_detach, "DETACH_CONCURRENTLY_LOCK_TIMEOUT_SECONDS", 0.3)
    with psycopg.connect(dsn_without_default, autocommit=True, row_factory=dict_row) as conn:
        Rows(conn).add(status="done", created_ago=100 * DAY, processed_ago=99 * DAY)
        first = _partitions(conn)[0]
        with Database(load_settings(dsn=dsn_without_default)) as db:
            preview = preview_prune(db, done_older_than=30 * DAY, failed_older_than=None)
            # a reader older than the detach: its second transaction waits for it, times out
            with psycopg.connect(dsn_without_default) as reader:
                reader.execute("SELECT count(*) FROM integration_outbox")
                result = apply(db, preview, actor=ACTOR)
            assert result.detached == ()
            assert "detach pending" in result.kept[f"public.{first}"]
            assert conn.execute("SELECT count(*) AS n FROM integration_outbox").fetchone()["n"] == 0
            again = preview_prune(db, done_older_than=30 * DAY, failed_older_than=None)
            assert [p["detach_pending"] for p in again.details["partitions"]] == [True]
            assert again.matched == 1  # its row, which the outbox's queries no longer read
            finished = apply(db, again, actor=ACTOR)
        assert (finished.detached, finished.changed) == ((f"public.{first}",), 1)
        assert first not in _partitions(conn)


def test_least_privilege_logins_preview_and_prune_row_by_row(dsn, rows, conn, logins):
    """The dashboard previews with the read login (counted through the outbox: no grant on the
    partitions needed); the operator login, not the table's owner, may not detach: row by row."""
    old = rows.add(status="done", created_ago=100 * DAY, processed_ago=99 * DAY)
    ages = {"done_older_than": 30 * DAY, "failed_older_than": None}
    with Database(load_settings(dsn=logins.dsn(dsn, logins.read))) as viewer:
        seen = preview_prune(viewer, **ages)
    assert [(p["rows"], p["done"]) for p in seen.details["partitions"]] == [(1, 1)]
    with Database(load_settings(dsn=logins.dsn(dsn, logins.actions))) as operator:
        result = apply(operator, preview_prune(operator, **ages), actor=ACTOR)
    assert (result.detached, result.changed, result.ids) == ((), 1, [old])
    assert "does not own it" in next(iter(result.kept.values()))
    assert len(_partitions(conn)) == 5


def test_prune_no_detach_and_the_cli_lines(dsn, rows, conn, monkeypatch):
    _fill_for_prune(rows)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "cli-tester")
    runner = CliRunner()
    args = ["prune", "--done-older-than", "30d", "--failed-older-than", "90d"]
    dry = runner.invoke(main, [*args, "--dry-run"], prog_name="outbox-monitor")
    assert "1 partition(s) detached whole and dropped" in dry.stdout
    assert "3 rows (2 done, 1 failed)" in dry.stdout
    kept = json.loads(runner.invoke(main, [*args, "--no-detach", "--dry-run", "--json"]).stdout)
    assert "partitions" not in kept.get("details", {}) and kept["matched"] == 6
    done = json.loads(runner.invoke(main, [*args, "--yes", "--json"]).stdout)
    assert (done["changed"], len(done["partitions_detached"])) == (6, 1)
    assert done["details"]["partitions"][0]["rows"] == 3
