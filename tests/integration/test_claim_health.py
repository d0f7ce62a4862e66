"""Claim health (issue 14 item 2) on a real Postgres: the harmful ``(created_at)`` index on a
table with a done history and a backlog makes the planner walk the history — the package,
``status --json``, the figures and the alert say so — and dropping it clears it; recorded
plans, their cost jump and their retention; the scheduler's job."""

import json
import logging

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.alerts.measure import offenders
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from outbox_monitor.cli import main
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import PermissionDenied, SchemaNotInitialised
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.health.claim_plan import claim_health, plan_series, record_claim_plans
from outbox_monitor.health.claim_verdicts import MIN_JUMPED_COST
from outbox_monitor.service.jobs import CLAIM_PLAN_JOB_ID
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database
from tests.alerting import wait_for
from tests.claim_health import HARMFUL_INDEX, create_harmful_index, drop_harmful_index
from tests.health import autovacuum_off, flush_statistics


def status_json(dsn: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    result = CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def insert_plan(conn: psycopg.Connection, statement: str, cost: float, ago: str) -> None:
    conn.execute(
        """INSERT INTO outbox_monitor.claim_plans (table_name, statement, sampled_at, shape,
               total_cost, plan_rows, walks_non_pending)
           VALUES ('public.integration_outbox', %s, now() - %s::interval, 'Limit', %s, 50,
                   false)""",
        (statement, ago, cost),
    )


def test_the_created_at_index_degrades_the_plan_and_dropping_it_clears(history_dsn, monkeypatch):
    with Database(load_settings(dsn=history_dsn)) as db:
        healthy = claim_health(db)
        assert healthy.degraded == 0, healthy.as_json()
        assert healthy.table_rows >= 100_000
        for plan in healthy.plans:
            assert "integration_outbox_claim_idx" in plan.shape and plan.reasons == ()

        create_harmful_index(history_dsn)
        degraded = claim_health(db)
        assert degraded.degraded == 1
        for plan in degraded.plans:
            assert plan.shape == f"Limit > Index Scan ({HARMFUL_INDEX})", plan.shape
            assert plan.walks_non_pending and not plan.cost_jumped
            assert plan.reasons[0] == (
                f"walks index {HARMFUL_INDEX} (leading column created_at), which holds rows "
                "of every status"
            )
            assert "filters them by" in plan.reasons[1]
        # the registry's figures, as rules and /metrics read them
        assert FIGURES["claim_plan_degraded"].measure(db, None, None, 1) == 1
        assert FIGURES["claim_plan_cost"].measure(db, None, None, 1) == degraded.cost
        shown = status_json(history_dsn, monkeypatch)["health"]["claim_plan"]
        assert (shown["degraded"], shown["cost"]) == (1, degraded.cost)
        assert [p["shape"] for p in shown["plans"]] == [p.shape for p in degraded.plans]
        assert shown["plans"][0]["reasons"] == list(degraded.plans[0].reasons)
        # the shipped rule: the alert's offenders name the plan and why
        rule = load_rules(SHIPPED_RULES_PATH).rule("claim-plan-degraded")
        named = offenders(db, rule)
        assert named[0]["kind"] == "claim_plan"
        assert HARMFUL_INDEX in named[0]["label"] and "leading column" in named[0]["error"]

        drop_harmful_index(history_dsn)
        assert claim_health(db).degraded == 0
        assert status_json(history_dsn, monkeypatch)["health"]["claim_plan"]["degraded"] == 0


def test_a_pending_only_partial_index_on_a_varchar_status_is_not_degraded(history_dsn):
    """Postgres prints a varchar column's predicate with casts, ``((status)::text =
    'pending'::text)``: the partial index still holds pending rows only."""
    with psycopg.connect(history_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE integration_outbox ALTER COLUMN status TYPE varchar(16)")
        conn.execute("DROP INDEX integration_outbox_claim_idx")  # the index led by status
        conn.execute(
            "CREATE INDEX pending_due_idx ON integration_outbox (available_at, created_at) "
            "WHERE status = 'pending'"
        )
        conn.execute("ANALYZE integration_outbox")
        [predicate] = conn.execute(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index "
            "WHERE indexrelid = 'pending_due_idx'::regclass"
        ).fetchone()
    assert predicate == "((status)::text = 'pending'::text)"
    with Database(load_settings(dsn=history_dsn)) as db:
        health = claim_health(db)
    assert health.table_rows >= 100_000
    for plan in health.plans:
        assert "pending_due_idx" in plan.shape, plan.shape
        assert plan.reasons == () and not plan.walks_non_pending
    assert health.degraded == 0


def test_a_small_table_shows_the_walk_but_is_never_degraded(db, rows, dsn):
    for ago in range(20):
        rows.add(status="done", created_ago=1000 + ago, processed_ago=900)
    rows.add(status="pending", created_ago=5)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX integration_outbox_claim_idx")  # users' claim index gone
    health = claim_health(db)
    assert health.table_rows < 10_000
    for plan in health.plans:
        assert plan.reasons  # a sequential scan, or an index not led by status
        assert not plan.walks_non_pending
    assert health.degraded == 0


def test_the_shared_claim_is_planned_as_migration_009s_when_controls_exist(db, conn):
    conn.execute(
        """INSERT INTO outbox_monitor.controls (outbox, event_type_filter, layer, paused,
               updated_by)
           VALUES ('public.integration_outbox'::regclass, 'crm.%%', 'ui', true, 'test')"""
    )
    users, shared = claim_health(db).plans
    assert not users.flow_control and shared.flow_control
    assert shared.label == "outbox_monitor.claim(), with flow control"
    assert shared.plan_rows >= 1


def test_a_cost_jump_is_measured_against_recorded_costs(history_dsn):
    with (
        Database(load_settings(dsn=history_dsn)) as db,
        psycopg.connect(history_dsn, autocommit=True) as conn,
    ):
        now = claim_health(db).plans[0].total_cost
        assert now >= MIN_JUMPED_COST  # the backlog's top-N sort: ≈ 1,300 here
        insert_plan(conn, "users_claim", 1e9, "2 hours")
        for minutes, cost in ((5, now / 20), (10, now / 10.5), (15, now / 30)):
            insert_plan(conn, "users_claim", cost, f"{minutes} minutes")
        users, shared = claim_health(db).plans
        # the median of now/30, now/20, now/10.5 and 1e9: (now/20 + now/10.5) / 2, which
        # now is 13.8 times
        assert users.baseline_cost == pytest.approx((now / 20 + now / 10.5) / 2)
        assert users.cost_jumped and not users.walks_non_pending
        assert (shared.baseline_cost, shared.cost_jumped) == (None, False)  # no record
        assert claim_health(db).degraded == 1
        # 12 newer costs equal to now's: the new normal (the baseline is the newest 12 only)
        for seconds in range(20, 80, 5):
            insert_plan(conn, "users_claim", now, f"{seconds} seconds")
        users = claim_health(db).plans[0]
        assert users.baseline_cost == pytest.approx(now) and not users.cost_jumped


def test_recording_keeps_both_statements_and_prunes_past_the_retention(dsn, conn):
    with Database(load_settings(dsn=dsn, sample_retention=3600)) as db:
        insert_plan(conn, "users_claim", 5.0, "2 hours")
        conn.execute(
            """INSERT INTO outbox_monitor.claim_statement_samples (table_name, kind, sampled_at,
                   calls, total_exec_ms)
               VALUES ('public.integration_outbox', 'shared_claim', now() - interval '2 hours',
                       1, 1.0)"""
        )
        recorded = record_claim_plans(db)
        assert recorded["pruned"] == 2
        assert recorded["statements"].available is False  # not installed here
        series = plan_series(db, window=3600).rows
        assert [row["statement"] for row in series] == ["shared_claim", "users_claim"]
        assert {row["sampled_at"] for row in series} == {recorded["sampled_at"]}
        assert all(not row["walks_non_pending"] and row["reasons"] == [] for row in series)
        record_claim_plans(db)
        assert len(plan_series(db, window=3600).shape_changes()) == 2  # same shape twice


def test_the_scheduler_records_plans_and_a_failure_shows_in_healthz(dsn, conn, caplog):
    caplog.set_level(logging.ERROR, logger="outbox_monitor.scheduler")
    status = SchedulerStatus()
    settings = load_settings(dsn=dsn, claim_plan_interval=1, sample_interval=60)
    with Database(settings) as db:
        scheduler = build_scheduler(db, blocking=False, status=status)
        scheduler.start()
        try:
            job = scheduler.get_job(CLAIM_PLAN_JOB_ID)
            assert job.max_instances == 1 and job.coalesce

            def recorded() -> int:
                query = "SELECT count(*) AS n FROM outbox_monitor.claim_plans"
                return conn.execute(query).fetchone()["n"]

            assert wait_for(lambda: recorded() >= 4, timeout=10)
            conn.execute("ALTER TABLE outbox_monitor.claim_plans RENAME TO claim_plans_gone")
            failed = wait_for(
                lambda: [r for r in caplog.records if CLAIM_PLAN_JOB_ID in r.getMessage()],
                timeout=10,
            )
            assert failed, "the failure was not logged"
            assert "claim_plans" in failed[0].getMessage()
            healthy, details = status.health()
            assert healthy  # a database problem never turns /healthz red
            assert "claim_plans" in details["last_error"]
            assert details["jobs"][CLAIM_PLAN_JOB_ID] is not None  # still scheduled
        finally:
            scheduler.shutdown(wait=True)


def test_without_migration_011_the_error_says_run_init_db(dsn, conn):
    conn.execute("DROP TABLE outbox_monitor.claim_plans")
    with Database(load_settings(dsn=dsn)) as db, pytest.raises(SchemaNotInitialised):
        claim_health(db)


def test_the_read_login_plans_and_the_scheduler_login_records(dsn, logins, conn):
    """The printed grants suffice: EXPLAIN needs only SELECT on the outbox (the viewer's),
    recording needs INSERT and DELETE on migration 011's tables (the scheduler's)."""
    with Database(load_settings(dsn=logins.dsn(dsn, logins.read))) as viewer:
        assert claim_health(viewer).degraded == 0
        with pytest.raises(PermissionDenied):
            record_claim_plans(viewer)
    with Database(load_settings(dsn=logins.dsn(dsn, logins.scheduler))) as scheduler:
        recorded = record_claim_plans(scheduler)
    assert recorded["statements"].note is not None  # said plainly, whatever the login
    count = "SELECT count(*) AS n FROM outbox_monitor.claim_plans"
    assert conn.execute(count).fetchone()["n"] == 2


def test_a_never_analyzed_table_counts_its_live_rows_not_0(db, dsn, conn, monkeypatch):
    autovacuum_off(conn)  # no autoanalyze meanwhile: the table stays never analyzed
    assert (
        conn.execute(
            "SELECT reltuples FROM pg_class WHERE oid = 'integration_outbox'::regclass"
        ).fetchone()["reltuples"]
        == -1
    )  # PostgreSQL 14+: never analyzed nor vacuumed
    conn.execute(
        "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
        " payload, status, processed_at) SELECT 'order.paid', 'order', g::text, 'k:' || g,"
        " '{}', 'done', now() FROM generate_series(1, 12000) AS g"
    )
    conn.execute("DELETE FROM integration_outbox WHERE id <= 500")
    flush_statistics(conn)

    health = claim_health(db)
    assert health.table_rows == 11_500  # inserted less deleted, not 0
    assert health.table_analyzed is False
    found = status_json(dsn, monkeypatch)["health"]["claim_plan"]
    assert (found["table_rows"], found["table_analyzed"]) == (11_500, False)

    conn.execute("ANALYZE integration_outbox")
    health = claim_health(db)
    assert (health.table_rows, health.table_analyzed) == (11_500, True)
