"""Issue 17 item 5: the product's own tables have a stated retention, applied by the
scheduler's ``retention`` job (``maintenance.prune_own_tables``) in batches under the
statement timeout; a failure is logged and shown on ``/healthz``. The samples keep theirs,
deleted by the sampler at most a batch a pass."""

import logging
from datetime import UTC, datetime

import psycopg
import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.service import maintenance, sampler
from outbox_monitor.service.jobs import RETENTION_JOB_ID
from outbox_monitor.service.maintenance import prune_own_tables
from outbox_monitor.service.sampler import record_sample
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database
from tests.alerting import wait_for

TABLE = "public.integration_outbox"
OTHER = "public.other_outbox"
DAY = 86400


def audit(conn, days: float, table: str = TABLE) -> int:
    return conn.execute(
        "INSERT INTO outbox_monitor.audit_log (run_id, at, actor, action, table_name, filter,"
        " affected_count, affected_ids) VALUES (gen_random_uuid(),"
        " now() - make_interval(secs => %s), 'ops', 'reap', %s, '{}', 0, '{}') RETURNING id",
        (days * DAY, table),
    ).fetchone()["id"]


def transition(conn, days: float) -> int:
    return conn.execute(
        "INSERT INTO outbox_monitor.alert_transitions (rule, instance, from_state, to_state, at)"
        " VALUES ('stuck-lock', '', 'inactive', 'firing', now() - make_interval(secs => %s))"
        " RETURNING id",
        (days * DAY,),
    ).fetchone()["id"]


def notification(
    conn, days: float, status: str = "sent", rule: str = "stuck-lock", key: str | None = None
) -> int:
    """A notification ``days`` old; with ``key`` (``…|error`` or ``…|resolved``) a scheduler
    alert's (``alerts.own_alerts``), its kind the key's end."""
    kind = "firing" if key is None else key.rsplit("|", 1)[1]
    return conn.execute(
        "INSERT INTO outbox_monitor.notifications (dedupe_key, rule, instance, kind, route,"
        " payload, status, created_at) VALUES (coalesce(%s, gen_random_uuid()::text), %s, '',"
        " %s, 'oncall', '{}', %s, now() - make_interval(secs => %s)) RETURNING id",
        (key, rule, kind, status, days * DAY),
    ).fetchone()["id"]


def breaker(conn, days: float, table: str = TABLE) -> int:
    return conn.execute(
        "INSERT INTO outbox_monitor.breaker_transitions (outbox, event_type_filter, transition,"
        " at) VALUES (%s::regclass, 'order.%%', 'opened', now() - make_interval(secs => %s))"
        " RETURNING id",
        (table, days * DAY),
    ).fetchone()["id"]


def ids(conn, table: str) -> list[int]:
    return [row["id"] for row in conn.execute(f"SELECT id FROM outbox_monitor.{table} ORDER BY id")]


def test_the_defaults_keep_the_audit_log_400_days_and_the_rest_90(db, conn):
    conn.execute(f"CREATE TABLE {OTHER} (LIKE {TABLE})")
    kept_audit = [audit(conn, 399), audit(conn, 500, OTHER)]  # young; another table's
    gone_audit = [audit(conn, 401), audit(conn, 1000)]
    kept_transitions, gone_transitions = [transition(conn, 89)], [transition(conn, 91)]
    conn.execute(
        "INSERT INTO outbox_monitor.alert_instances (rule, instance, state)"
        " VALUES ('firing-rule', '', 'firing'), ('stuck-lock', '', 'inactive')"
    )
    kept_notifications = [
        notification(conn, 89),  # young
        notification(conn, 91, status="pending"),  # not delivered yet
        notification(conn, 91, rule="firing-rule"),  # its resolve threads under it
        # a stall episode still open: its resolve must find it
        notification(conn, 95, rule="alerting-stalled", key="alerting-stalled||7/oncall|error"),
    ]
    gone_notifications = [
        notification(conn, 91),
        notification(conn, 200, status="failed"),
        notification(conn, 99, rule="alerting-stalled", key="alerting-stalled||6/oncall|error"),
        notification(conn, 98, rule="alerting-stalled", key="alerting-stalled||6/oncall|resolved"),
    ]
    kept_breakers = [breaker(conn, 89), breaker(conn, 91, OTHER)]
    gone_breakers = [breaker(conn, 91)]

    assert prune_own_tables(db) == {
        "audit_log": 2,
        "alert_transitions": 1,
        "notifications": 4,
        "breaker_transitions": 1,
    }
    assert ids(conn, "audit_log") == kept_audit
    assert ids(conn, "alert_transitions") == kept_transitions
    assert ids(conn, "notifications") == kept_notifications
    assert ids(conn, "breaker_transitions") == kept_breakers
    assert gone_audit and gone_transitions and gone_notifications and gone_breakers
    assert set(prune_own_tables(db).values()) == {0}  # nothing left to delete


def test_the_retention_settings_apply_and_deletes_go_in_capped_batches(dsn, conn, monkeypatch):
    monkeypatch.setattr(maintenance, "RETENTION_BATCH_ROWS", 2)
    monkeypatch.setattr(maintenance, "MAX_RETENTION_BATCHES", 2)
    old = [audit(conn, days) for days in (11, 12, 13, 14, 15)]
    young = audit(conn, 9)
    settings = load_settings(
        dsn=dsn, audit_retention="10d", alert_history_retention="2d", breaker_log_retention="1d"
    )
    transition(conn, 3)
    transition(conn, 1)
    with Database(settings) as db:
        assert prune_own_tables(db)["audit_log"] == 4  # 2 batches of 2: the cap of one run
        assert ids(conn, "audit_log") == [old[0], young]  # oldest (15 days) first
        assert prune_own_tables(db)["audit_log"] == 1
        assert prune_own_tables(db)["alert_transitions"] == 0  # one old, gone in the first
    assert ids(conn, "audit_log") == [young]


def test_a_retention_under_a_day_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_AUDIT_RETENTION", "12h")
    with pytest.raises(Exception, match="OUTBOX_MONITOR_AUDIT_RETENTION: retention is written"):
        load_settings()


def test_the_scheduler_runs_it_and_a_failure_is_logged_and_shown_on_healthz(dsn, caplog):
    caplog.set_level(logging.ERROR, logger="outbox_monitor.scheduler")
    status = SchedulerStatus()
    settings = load_settings(dsn=dsn, statement_timeout=0.5, sample_interval=60)
    with psycopg.connect(dsn) as locker, Database(settings) as db:
        locker.execute("LOCK TABLE outbox_monitor.audit_log IN ACCESS EXCLUSIVE MODE")
        scheduler = build_scheduler(db, blocking=False, status=status)
        scheduler.start()
        try:
            failed = wait_for(
                lambda: [r for r in caplog.records if RETENTION_JOB_ID in r.getMessage()], 15
            )
            assert failed, "the failure was not logged"
            assert "statement timeout" in failed[0].getMessage().lower()
            healthy, details = status.health()
            assert healthy  # a database problem never turns /healthz red: a notice says it
            assert details["notice"].startswith("the retention of outbox-monitor's own tables")
            assert details["retention"]["deleted"] is None and details["retention"]["error"]
            assert details["jobs"][RETENTION_JOB_ID] is not None  # runs again next hour
            locker.rollback()
            scheduler.get_job(RETENTION_JOB_ID).modify(next_run_time=datetime.now(UTC))
            assert wait_for(lambda: status.health()[1]["retention"]["deleted"] is not None, 15)
            assert status.health()[1]["notice"] is None
        finally:
            scheduler.shutdown(wait=True)


def test_the_sampler_deletes_old_samples_in_batches_a_pass(db, conn, monkeypatch):
    monkeypatch.setattr(sampler, "SAMPLES_PRUNE_BATCH_ROWS", 2)
    for days in (8, 9, 10, 11, 12):  # past the default 7 days
        conn.execute(
            "INSERT INTO outbox_monitor.samples (table_name, sampled_at, queue_depth,"
            " pending_total, scheduled_retries, processing, stuck_locks, failed_in_window)"
            " VALUES (%s, now() - make_interval(days => %s), 0, 0, 0, 0, 0, 0)",
            (TABLE, days),
        )
        conn.execute(
            "INSERT INTO outbox_monitor.event_type_samples (table_name, sampled_at, event_type,"
            " queue_depth, failed_in_window, retrying)"
            " VALUES (%s, now() - make_interval(days => %s), 'order.paid', 0, 0, 0)",
            (TABLE, days),
        )
    passes = [record_sample(db) for _ in range(4)]
    assert [p["pruned"] for p in passes] == [2, 2, 1, 0]
    assert [p["event_types_pruned"] for p in passes] == [2, 2, 1, 0]
    oldest = (
        "SELECT min(sampled_at) > now() - interval '7 days' AS young FROM outbox_monitor.samples"
    )
    assert conn.execute(oldest).fetchone()["young"]  # the 4 samples of the passes remain


def test_the_scheduler_role_prunes_through_its_grants_never_young_audit_rows(logins, dsn, conn):
    audit(conn, 401)
    kept = audit(conn, 2)
    transition(conn, 91)
    notification(conn, 91)
    breaker(conn, 91)
    scheduler_dsn = logins.dsn(dsn, logins.scheduler)
    with Database(load_settings(dsn=scheduler_dsn)) as db:
        assert prune_own_tables(db) == dict.fromkeys(
            ("audit_log", "alert_transitions", "notifications", "breaker_transitions"), 1
        )
    with psycopg.connect(scheduler_dsn) as scheduler:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            scheduler.execute("DELETE FROM outbox_monitor.audit_log")
        scheduler.rollback()
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="at least one day"):
            scheduler.execute("SELECT outbox_monitor.prune_audit_log(%s, 3600, 10)", (TABLE,))
    viewer = logins.dsn(dsn, logins.read)
    with psycopg.connect(viewer) as viewer, pytest.raises(psycopg.errors.InsufficientPrivilege):
        viewer.execute("SELECT outbox_monitor.prune_audit_log(%s, 86400, 10)", (TABLE,))
    assert ids(conn, "audit_log") == [kept]
