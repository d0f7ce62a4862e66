"""/metrics and /healthz of a running scheduler, scraped over HTTP on hand-computed rows;
the optional reaper and pruner jobs; the exporter's settings."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from outbox_monitor.alerts.leader import Leadership
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from outbox_monitor.config.settings import ENV_PREFIX, load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.errors import ConfigError, OutboxMonitorError
from outbox_monitor.export.labels import OTHER, bound_event_types
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.figures import metrics
from outbox_monitor.service.jobs import PRUNER_JOB_ID, REAPER_JOB_ID
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import running_scheduler, stuck_lock_rules, wait_for

REPO = Path(__file__).resolve().parents[2]

RULES = stuck_lock_rules(
    "0.5s",
    """\
  - name: recent-failures
    metric: failed_in_window
    window: 15m
    op: ">"
    threshold: 100
    route: oncall
""",
)

Samples = dict[str, list[tuple[dict[str, str], float]]]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(url: str) -> Samples:
    """``{sample name: [(labels, value), ...]}`` of one /metrics scrape; every family also
    appears under its own name (possibly with no samples)."""
    status, text = get(url + "/metrics")
    assert status == 200, text
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        found.setdefault(family.name, [])
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def by(samples: Samples, name: str, label: str, **where: str) -> dict[str, float]:
    """``{labels[label]: value}`` of the samples of ``name`` whose labels match ``where``."""
    return {
        labels[label]: value
        for labels, value in samples.get(name, [])
        if all(labels.get(key) == wanted for key, wanted in where.items())
    }


def single(samples: Samples, name: str) -> float:
    [(labels, value)] = samples[name]
    assert labels == {}
    return value


@dataclass
class Running:
    scheduler: Any
    status: SchedulerStatus
    server: MetricsServer

    @property
    def url(self) -> str:
        return self.server.url


@contextmanager
def running_exporter(
    db: Database,
    *,
    ruleset: RuleSet | None = None,
    sink: SlackSink | None = None,
    top: int = 2,
    cache: float = 0.0,
    **options: Any,
) -> Iterator[Running]:
    """A started BackgroundScheduler (``tests.alerting.running_scheduler``: Slack to ``sink``)
    and its HTTP server on a free port."""
    status = SchedulerStatus()
    with running_scheduler(db, ruleset=ruleset, sink=sink, status=status, **options) as scheduler:
        server = MetricsServer(
            db, status, ruleset=ruleset, port=0, top_event_types=top, cache_seconds=cache
        )
        server.start()
        try:
            yield Running(scheduler, status, server)
        finally:
            server.stop()


def seed(rows) -> None:
    """The rows whose figures the tests computed by hand (ages in seconds before t0)."""
    # pending: order.paid ×2 due (600 s, 300 s old), invoice.sent due (120 s),
    # notification.email waiting in backoff (30 s old, due in 10 min)
    rows.add(event_type="order.paid", status="pending", created_ago=600)
    rows.add(event_type="order.paid", status="pending", created_ago=300)
    rows.add(event_type="invoice.sent", status="pending", created_ago=120)
    rows.add(
        event_type="notification.email",
        status="pending",
        created_ago=30,
        available_ago=-600,
        attempts=1,
    )
    # processing: one stuck lock (2000 s > 15 min), one fresh
    rows.add(
        event_type="order.paid", status="processing", created_ago=3000, locked_ago=2000, attempts=2
    )
    rows.add(event_type="invoice.sent", status="processing", created_ago=20, locked_ago=10)
    # done in the 1 h window with latencies 10, 20, 30, 40, 100 s; one done 2 h ago
    for processed, latency in ((100, 10), (200, 20), (300, 30), (400, 40), (500, 100)):
        rows.add(status="done", processed_ago=processed, created_ago=processed + latency)
    rows.add(status="done", processed_ago=7200, created_ago=12200)
    # dead-lettered: (event type, failed s ago, attempts, how many)
    for event_type, failed_ago, attempts, count in (
        ("payment.captured", 60, 10, 3),
        ("order.paid", 1200, 3, 2),  # in 1 h, not in 15 min
        ("invoice.sent", 100, 10, 1),
        ("payment.refunded", 200, 1, 1),
        ("webhook.ping", 300, 10, 1),
        ("order.paid", 5000, 10, 1),  # outside every window
    ):
        for _ in range(count):
            rows.add(
                event_type=event_type,
                status="failed",
                processed_ago=failed_ago,
                created_ago=failed_ago + 100,
                attempts=attempts,
                last_error="boom",
            )


def assert_age(value: float, age: float, seeded_at: float) -> None:
    elapsed = time.monotonic() - seeded_at
    assert age <= value <= age + elapsed + 1.0, (value, age, elapsed)


def test_metrics_are_the_hand_computed_figures(db, rows, write_rules, slack_sink):
    seed(rows)
    seeded_at = time.monotonic()
    with running_exporter(db, ruleset=write_rules(RULES), sink=slack_sink) as run:
        assert wait_for(lambda: slack_sink.messages(), timeout=10), "stuck-lock never fired"
        found = wait_for(
            lambda: (
                (s := scrape(run.url))
                and s["outbox_monitor_sampler_lag_seconds"]
                and by(s, "outbox_monitor_notifications_total", "outcome").get("sent")
                and s
            ),
            timeout=10,
        )
        status_now = metrics.status(db)

    assert single(found, "outbox_monitor_up") == 1
    assert single(found, "outbox_monitor_leader") == 1
    assert single(found, "outbox_monitor_evaluation_duration_seconds") > 0
    assert 0 <= single(found, "outbox_monitor_sampler_lag_seconds") < 5
    assert single(found, "outbox_monitor_figures_duration_seconds") > 0

    # open rows, top 2 event types + other (ties by name)
    assert by(found, "outbox_queue_depth", "event_type") == {
        "order.paid": 2,
        "invoice.sent": 1,
        OTHER: 0,
    }
    assert by(found, "outbox_pending", "event_type") == {
        "order.paid": 2,
        "invoice.sent": 1,
        OTHER: 1,
    }
    assert by(found, "outbox_scheduled_retries", "event_type") == {
        "notification.email": 1,
        "invoice.sent": 0,
        OTHER: 0,
    }
    assert by(found, "outbox_processing", "event_type") == {
        "invoice.sent": 1,
        "order.paid": 1,
        OTHER: 0,
    }
    assert by(found, "outbox_stuck_locks", "event_type") == {
        "order.paid": 1,
        "invoice.sent": 0,
        OTHER: 0,
    }
    ages = by(found, "outbox_oldest_pending_age_seconds", "event_type")
    assert set(ages) == {"order.paid", "invoice.sent", OTHER}
    assert_age(ages["order.paid"], 600, seeded_at)
    assert_age(ages["invoice.sent"], 120, seeded_at)
    assert_age(ages[OTHER], 30, seeded_at)  # notification.email, the oldest of the rest

    # one definition: summed over event types, each family is the metrics.py figure
    for family, key in (
        ("outbox_queue_depth", "queue_depth"),
        ("outbox_pending", "pending_total"),
        ("outbox_scheduled_retries", "scheduled_retries"),
        ("outbox_processing", "processing"),
        ("outbox_stuck_locks", "stuck_locks"),
        ("outbox_retrying", "retrying"),
    ):
        assert sum(by(found, family, "event_type").values()) == status_now[key], family
    assert max(ages.values()) == pytest.approx(status_now["oldest_pending_age_seconds"], abs=5)

    # latency of 10, 20, 30, 40, 100 s: P50 30, P95 40 + 0.8·60 = 88, P99 40 + 0.96·60 = 97.6
    assert by(found, "outbox_latency_seconds", "quantile", window="1h") == pytest.approx(
        {"0.5": 30.0, "0.95": 88.0, "0.99": 97.6}
    )
    assert set(by(found, "outbox_latency_seconds", "window")) == {"1h"}
    assert by(found, "outbox_processed_per_minute", "window") == pytest.approx({"1h": 5 / 60})
    # created in the last hour: 6 open + 5 done + 8 failed
    assert by(found, "outbox_created_per_minute", "window") == pytest.approx({"1h": 19 / 60})

    # failures per window (1 h from the settings, 15 m from the recent-failures rule)
    assert by(found, "outbox_failed_in_window", "event_type", window="1h") == {
        "payment.captured": 3,
        "order.paid": 2,
        OTHER: 3,  # invoice.sent, payment.refunded, webhook.ping
    }
    assert by(found, "outbox_failed_in_window", "event_type", window="15m") == {
        "payment.captured": 3,
        "invoice.sent": 1,
        OTHER: 2,  # payment.refunded, webhook.ping
    }
    assert (
        sum(by(found, "outbox_failed_in_window", "event_type", window="1h").values())
        == (status_now["failed_in_window"])
    )

    # retry pressure: pending 0,0,0,1; processing 2,0; failed 10×3, 3×2, 10, 1, 10, 10
    assert by(found, "outbox_rows_by_attempts", "attempts") == {
        "0": 4,
        "1": 2,
        "2": 1,
        "3": 2,
        "10": 6,
    }

    states = {
        (labels["rule"], labels["alert_instance"], labels["state"]): value
        for labels, value in found["outbox_monitor_alert_state"]
    }
    assert states[("stuck-lock", "", "firing")] == 1
    assert states[("stuck-lock", "", "inactive")] == 0
    assert states[("recent-failures", "", "inactive")] == 1
    assert sum(v for (rule, _, _), v in states.items() if rule == "stuck-lock") == 1
    outcomes = by(found, "outbox_monitor_notifications_total", "outcome")
    assert outcomes == {"sent": 1, "failed": 0, "suppressed": 0, "rate_limited": 0, "retrying": 0}


def test_retrying_per_event_type_counts_pending_rows_after_a_failure(db, rows):
    rows.add(event_type="order.paid", status="pending", attempts=0)
    rows.add(event_type="order.paid", status="pending", attempts=2, available_ago=5)  # due
    rows.add(event_type="order.paid", status="pending", attempts=2, available_ago=-60)  # backoff
    rows.add(event_type="invoice.sent", status="pending", attempts=1, available_ago=-600)
    rows.add(event_type="mail.sent", status="pending", attempts=4)
    rows.add(event_type="crm.upsert", status="processing", attempts=3, locked_ago=10)
    rows.add(event_type="webhook.ping", status="failed", attempts=10, processed_ago=30)
    with running_exporter(db) as run:
        found = scrape(run.url)
    # order.paid 2, then the ties at 1 by name: invoice.sent; other: mail.sent 1, crm.upsert 0
    assert by(found, "outbox_retrying", "event_type") == {
        "order.paid": 2,
        "invoice.sent": 1,
        OTHER: 1,
    }


def test_event_types_of_alert_filters_keep_their_own_label(db, rows):
    """The shipped rules filter notification.% and payment.%: those types are ranked first,
    so with N=2 they stay visible although others are bigger."""
    seed(rows)
    seeded_at = time.monotonic()
    with running_exporter(db, ruleset=load_rules(SHIPPED_RULES_PATH)) as run:
        found = scrape(run.url)
    assert by(found, "outbox_failed_in_window", "event_type", window="15m") == {
        "payment.captured": 3,
        "payment.refunded": 1,
        OTHER: 2,  # invoice.sent, webhook.ping
    }
    assert by(found, "outbox_failed_in_window", "event_type", window="1h") == {
        "payment.captured": 3,
        "payment.refunded": 1,
        OTHER: 4,  # order.paid 2 (bigger, but not pinned), invoice.sent, webhook.ping
    }
    ages = by(found, "outbox_oldest_pending_age_seconds", "event_type")
    assert set(ages) == {"notification.email", "order.paid", OTHER}
    assert_age(ages["notification.email"], 30, seeded_at)
    assert_age(ages[OTHER], 120, seeded_at)  # invoice.sent
    # the shipped latency rule's window is the settings' 1 h: no second window
    assert set(by(found, "outbox_latency_seconds", "window")) == {"1h"}


def test_figures_are_cached_between_scrapes(db, rows):
    rows.add(status="pending", created_ago=10)
    with running_exporter(db, cache=1.0) as run:
        first = scrape(run.url)
        rows.add(status="pending", created_ago=5)
        cached = scrape(run.url)
        time.sleep(1.1)
        fresh = scrape(run.url)
    assert by(first, "outbox_queue_depth", "event_type")["order.paid"] == 1
    assert by(cached, "outbox_queue_depth", "event_type")["order.paid"] == 1
    assert single(cached, "outbox_monitor_figures_duration_seconds") == single(
        first, "outbox_monitor_figures_duration_seconds"
    )
    assert by(fresh, "outbox_queue_depth", "event_type")["order.paid"] == 2


def test_up_follows_the_database_and_healthz_this_process():
    with TemporaryCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE outbox")
        dsn = cluster.dsn_for("outbox")
        settings = load_settings(dsn=dsn, sample_interval=1)
        with Database(settings) as db:
            init_db(db, create_table=True, create_indexes=False)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO integration_outbox "
                    "(event_type, aggregate_type, aggregate_id, event_key, payload) "
                    "VALUES ('order.paid', 'order', '1', 'k1', '{}')"
                )
            with running_exporter(db) as run:
                assert wait_for(lambda: get(run.url + "/healthz") == (200, "ok"), timeout=10)
                # the retention job's first run done before the outage (one it fails leaves a
                # 200 "ok: …" notice until the next run, an hour on)
                assert wait_for(lambda: run.status.health()[1]["retention"] is not None, 30)
                healthy = scrape(run.url)
                assert single(healthy, "outbox_monitor_up") == 1
                assert by(healthy, "outbox_queue_depth", "event_type")["order.paid"] == 1

                cluster.pause()
                # HTTP 200, never 500.
                down = scrape(run.url)
                assert single(down, "outbox_monitor_up") == 0
                assert "outbox_queue_depth" not in down
                assert "outbox_failed_in_window" not in down
                assert "outbox_monitor_alert_state" not in down
                assert single(down, "outbox_monitor_leader") == 0
                assert "outbox_monitor_notifications_total" in down  # the process's own
                # /healthz reports this process, not the database: a restart cannot bring
                # the database back (issue 10 item 1); the outage shows as outbox_monitor_up 0
                # and as /healthz's notice once a job met it (issue 29 item 13)
                deadline = time.monotonic() + 4  # > the 3 intervals that turned it red before
                while time.monotonic() < deadline:
                    code, text = get(run.url + "/healthz")
                    said = text == "ok" or text.startswith("ok: database unreachable: ")
                    assert code == 200 and said, text  # "ok" until a job met the outage
                    time.sleep(0.2)
                assert text.startswith("ok: database unreachable: "), text

                cluster.resume()
                assert wait_for(lambda: get(run.url + "/healthz") == (200, "ok"), timeout=20)
                again = scrape(run.url)
                assert single(again, "outbox_monitor_up") == 1
                assert by(again, "outbox_queue_depth", "event_type")["order.paid"] == 1

                run.scheduler.shutdown(wait=True)
                status, body = get(run.url + "/healthz")
                assert status == 503
                assert json.loads(body)["reason"] == "the scheduler is not running"
                assert get(run.url + "/nope")[0] == 404


def audit_rows(conn) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT actor, action, run_id, affected_ids, filter FROM outbox_monitor.audit_log "
        "ORDER BY id"
    ).fetchall()


def test_reaper_and_pruner_jobs_act_on_the_leader_only_and_are_audited(dsn, conn, rows):
    days = 86400
    with Database(load_settings(dsn=dsn)) as plain:
        default = build_scheduler(plain, blocking=False)
        assert default.get_job(REAPER_JOB_ID) is None, "the reaper is off by default"
        assert default.get_job(PRUNER_JOB_ID) is None, "the pruner is off by default"
    stuck = rows.add(status="processing", created_ago=600, locked_ago=120)
    stuck_at_max = rows.add(status="processing", created_ago=600, locked_ago=120, attempts=9)
    fresh = rows.add(status="processing", created_ago=60, locked_ago=5)
    done_old = rows.add(status="done", created_ago=3 * days, processed_ago=2 * days)
    done_recent = rows.add(status="done", created_ago=4000, processed_ago=3600)
    failed_old = rows.add(status="failed", created_ago=5 * days, processed_ago=4 * days)
    failed_kept = rows.add(status="failed", created_ago=3 * days, processed_ago=2 * days)
    pending_old = rows.add(status="pending", created_ago=10 * days)
    settings = load_settings(
        dsn=dsn,
        lock_timeout=60,
        auto_reap=True,
        auto_reap_max_share="100%",  # both stuck rows in the first run
        auto_prune_done="1d",
        auto_prune_failed="3d",
    )
    with Database(settings) as db:
        # another process leads: this scheduler must not reap or prune
        with Leadership(settings) as other:
            assert other.try_acquire()
            with running_exporter(db) as run:
                assert run.scheduler.get_job(REAPER_JOB_ID).trigger.interval.total_seconds() == 20
                assert run.scheduler.get_job(PRUNER_JOB_ID).trigger.interval.days == 1
                time.sleep(1.5)
                assert single(scrape(run.url), "outbox_monitor_leader") == 0
        assert rows.get(stuck)["status"] == "processing"
        assert rows.get(done_old) is not None
        assert audit_rows(conn) == []
        # now this one leads: the first runs reap and prune at once
        with running_exporter(db) as run:
            assert wait_for(lambda: len(audit_rows(conn)) >= 3, timeout=10)
            time.sleep(0.5)
    assert rows.get(stuck)["status"] == "pending" and rows.get(stuck)["attempts"] == 1
    assert rows.get(stuck_at_max)["status"] == "failed"
    assert rows.get(fresh)["status"] == "processing"
    for gone in (done_old, failed_old):
        assert rows.get(gone) is None
    for kept in (done_recent, failed_kept, pending_old, stuck_at_max):
        assert rows.get(kept) is not None
    audits = audit_rows(conn)
    assert {a["actor"] for a in audits} == {"scheduler"}
    reaps = [a for a in audits if a["action"] == "reap"]
    prunes = [a for a in audits if a["action"] == "prune"]
    assert len(reaps) + len(prunes) == len(audits)
    [reap] = reaps  # one batch
    assert sorted(reap["affected_ids"]) == sorted([stuck, stuck_at_max])
    assert reap["filter"]["lock_timeout_seconds"] == 60
    # one batch per status (done, failed), one run
    assert len({a["run_id"] for a in prunes}) == 1
    assert sorted(i for a in prunes for i in a["affected_ids"]) == sorted([done_old, failed_old])


def test_scheduler_command_serves_metrics_and_healthz(dsn, rows):
    rows.add(status="pending", created_ago=42)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(OUTBOX_MONITOR_DSN=dsn, OUTBOX_MONITOR_SAMPLE_INTERVAL="1")
    process = subprocess.Popen(
        [sys.executable, "-m", "outbox_monitor", "scheduler", "--metrics-port", str(port)],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # a scheduler process starting on a loaded machine: 20 s was short at load 12
        healthy = wait_for(lambda: _reachable(url + "/healthz") == (200, "ok"), timeout=60)
        found = scrape(url) if healthy else {}
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert healthy, stderr
    assert process.returncode == 0, stderr
    assert by(found, "outbox_queue_depth", "event_type") == {"order.paid": 1, OTHER: 0}
    assert f"serving {url}/metrics" in stderr


def _reachable(url: str) -> tuple[int, str] | None:
    try:
        return get(url)
    except OSError:
        return None


def test_a_taken_port_is_an_error_with_the_fix(db):
    with running_exporter(db) as run:
        taken = MetricsServer(db, SchedulerStatus(), port=run.server.port)
        with pytest.raises(OutboxMonitorError) as caught:
            taken.start()
    assert f"127.0.0.1:{run.server.port}" in str(caught.value)
    assert "--metrics-port" in caught.value.hint


# ------------------------------------------------------------------ no database needed


def test_bound_event_types_folds_the_rest_into_other():
    values = {"a": 5, "b": 1, "c": 3, OTHER: 2, "d": None}
    assert bound_event_types(values, top=2) == {"a": 5, "c": 3, OTHER: 3}
    assert bound_event_types(values, top=2, pinned={"b"}) == {"b": 1, "a": 5, OTHER: 5}
    assert bound_event_types({"a": 1}, top=2) == {"a": 1, OTHER: 0}
    assert bound_event_types({"a": 9, "b": 4}, top=1, combine=max, empty_other=None) == {
        "a": 9,
        OTHER: 4,
    }
    assert bound_event_types({"a": 9}, top=1, combine=max, empty_other=None) == {"a": 9}


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


def test_exporter_settings_defaults_and_validation(clean_env, monkeypatch):
    settings = load_settings()
    assert (settings.metrics_port, settings.metrics_address) == (9108, "127.0.0.1")
    assert (settings.metrics_top_event_types, settings.metrics_cache) == (10, 5.0)
    assert settings.auto_reap is False
    assert settings.auto_prune_done is None and settings.auto_prune_failed is None
    monkeypatch.setenv("OUTBOX_MONITOR_AUTO_REAP", "true")
    monkeypatch.setenv("OUTBOX_MONITOR_AUTO_PRUNE_DONE", "30d")
    monkeypatch.setenv("OUTBOX_MONITOR_AUTO_PRUNE_FAILED", "off")
    monkeypatch.setenv("OUTBOX_MONITOR_METRICS_PORT", "0")
    settings = load_settings()
    assert settings.auto_reap is True and settings.auto_prune_done == 30 * 86400
    assert settings.auto_prune_failed is None and settings.metrics_port == 0
    monkeypatch.setenv("OUTBOX_MONITOR_AUTO_PRUNE_DONE", "30m")
    monkeypatch.setenv("OUTBOX_MONITOR_METRICS_PORT", "70000")
    monkeypatch.setenv("OUTBOX_MONITOR_METRICS_CACHE", "1h")
    monkeypatch.setenv("OUTBOX_MONITOR_METRICS_ADDRESS", "0.0.0.0 ")
    monkeypatch.setenv("OUTBOX_MONITOR_METRICS_TOP_EVENT_TYPES", "0")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "OUTBOX_MONITOR_AUTO_PRUNE_DONE: retention is written in days" in message
    assert "OUTBOX_MONITOR_METRICS_PORT:" in message
    assert "OUTBOX_MONITOR_METRICS_CACHE: at most 300 s" in message
    assert "OUTBOX_MONITOR_METRICS_TOP_EVENT_TYPES:" in message
    assert "OUTBOX_MONITOR_METRICS_ADDRESS" not in message  # surrounding blanks are trimmed
    monkeypatch.delenv("OUTBOX_MONITOR_AUTO_PRUNE_DONE")
    monkeypatch.delenv("OUTBOX_MONITOR_METRICS_PORT")
    monkeypatch.delenv("OUTBOX_MONITOR_METRICS_CACHE")
    monkeypatch.delenv("OUTBOX_MONITOR_METRICS_TOP_EVENT_TYPES")
    monkeypatch.setenv("OUTBOX_MONITOR_METRICS_ADDRESS", "http://x/")
    with pytest.raises(ConfigError, match="OUTBOX_MONITOR_METRICS_ADDRESS: expected an interface"):
        load_settings()
