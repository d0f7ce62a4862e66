"""The sampler records the headline figures computed by hand from inserted rows."""

import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.figures import metrics
from outbox_monitor.service.sampler import HEADLINE, record_sample
from outbox_monitor.store.db import Database

TOLERANCE = 2.0  # seconds between inserting the rows and sampling them


def stored_samples(conn, table_name="public.integration_outbox"):
    return conn.execute(
        "SELECT * FROM outbox_monitor.samples WHERE table_name = %s ORDER BY sampled_at",
        (table_name,),
    ).fetchall()


def test_record_sample_stores_hand_computed_figures(db, rows, conn):
    rows.add(status="pending", created_ago=120)  # due
    rows.add(status="pending", created_ago=30)  # due
    rows.add(status="pending", created_ago=600, available_ago=-60, attempts=1)  # scheduled
    rows.add(status="processing", created_ago=70, locked_ago=60)  # fresh claim
    rows.add(status="processing", created_ago=2100, locked_ago=2000)  # stuck (> 15 min)
    rows.add(status="done", created_ago=20, processed_ago=10)  # latency 10
    rows.add(status="done", created_ago=100, processed_ago=70)  # latency 30
    rows.add(status="done", created_ago=50, processed_ago=45)  # latency 5
    rows.add(status="done", created_ago=8000, processed_ago=7200)  # outside the 1 h window
    rows.add(status="failed", created_ago=200, processed_ago=100, attempts=1)  # in window
    rows.add(status="failed", created_ago=6000, processed_ago=5000, attempts=10)  # outside

    recorded = record_sample(db)

    expected_counts = {
        "queue_depth": 2,
        "pending_total": 3,
        "scheduled_retries": 1,
        "processing": 2,
        "stuck_locks": 1,
        "failed_in_window": 1,
    }
    (stored,) = stored_samples(conn)
    for column, value in expected_counts.items():
        assert recorded[column] == value, column
        assert stored[column] == value, column
    # oldest pending: created 600 s before t0; sampled a little after t0
    assert 600 <= stored["oldest_pending_age_seconds"] < 600 + TOLERANCE
    # latencies {5, 10, 30}: P50 = 10; P95 = 10 + 0.9 * (30 - 10) = 28 (continuous)
    assert stored["latency_p50_seconds"] == pytest.approx(10)
    assert stored["latency_p95_seconds"] == pytest.approx(28)
    assert recorded["sampled_at"] == stored["sampled_at"]
    assert recorded["table_name"] == "public.integration_outbox"
    assert set(HEADLINE) <= set(recorded)


def test_empty_outbox_records_zeros_and_nulls(db, conn):
    record_sample(db)
    (stored,) = stored_samples(conn)
    assert stored["queue_depth"] == stored["pending_total"] == stored["stuck_locks"] == 0
    assert stored["oldest_pending_age_seconds"] is None
    assert stored["latency_p50_seconds"] is None
    assert stored["latency_p95_seconds"] is None


def test_retention_deletes_only_old_samples_of_this_table(dsn, conn):
    insert = (
        "INSERT INTO outbox_monitor.samples (table_name, sampled_at, queue_depth, pending_total,"
        " scheduled_retries, processing, stuck_locks, failed_in_window)"
        " VALUES (%s, now() - make_interval(secs => %s), 0, 0, 0, 0, 0, 0)"
    )
    conn.execute(insert, ("public.integration_outbox", 7200))  # older than 1 h: deleted
    conn.execute(insert, ("public.integration_outbox", 3700))  # older than 1 h: deleted
    conn.execute(insert, ("public.integration_outbox", 1800))  # kept
    conn.execute(insert, ("other.outbox", 7200))  # another table's sample: kept

    with Database(load_settings(dsn=dsn, sample_retention="1h")) as db:
        recorded = record_sample(db)

    assert recorded["pruned"] == 2
    ages = [
        row["age"]
        for row in conn.execute(
            "SELECT round(extract(epoch FROM now() - sampled_at)) AS age"
            " FROM outbox_monitor.samples WHERE table_name = 'public.integration_outbox'"
            " ORDER BY sampled_at"
        )
    ]
    assert len(ages) == 2 and 1795 <= ages[0] <= 1805 and ages[1] <= 5
    assert len(stored_samples(conn, "other.outbox")) == 1


def test_samples_store_retrying_scheduled_retries_and_each_types_p95(db, rows, conn):
    """Issue 30 item 1: the stored retrying and scheduled retries, and the stored P95 of
    each event type, against values worked out from the rows."""
    rows.add(event_type="order.paid", created_ago=30)  # due, never tried
    rows.add(event_type="order.paid", attempts=2, created_ago=300, available_ago=10)  # due again
    rows.add(event_type="order.paid", attempts=1, created_ago=300, available_ago=-60)  # backoff
    rows.add(event_type="mail.sent", created_ago=30, available_ago=-600)  # published for later
    rows.add(event_type="mail.sent", attempts=3, created_ago=900, available_ago=-120)  # backoff
    rows.add(event_type="order.paid", status="processing", attempts=4, locked_ago=5)  # claimed
    rows.add(event_type="mail.sent", status="failed", attempts=10, processed_ago=50)
    # order.paid done with latencies 10, 20 and 40 s; mail.sent with 4 and 8 s
    for event_type, created, processed in (
        ("order.paid", 110, 100),
        ("order.paid", 220, 200),
        ("order.paid", 340, 300),
        ("mail.sent", 54, 50),
        ("mail.sent", 68, 60),
    ):
        rows.add(event_type=event_type, status="done", created_ago=created, processed_ago=processed)

    recorded = record_sample(db)

    (stored,) = stored_samples(conn)
    # retrying: pending with attempts > 0 — order.paid's due one and its one in backoff,
    # mail.sent's in backoff; scheduled retries: pending not yet due — order.paid's backoff,
    # mail.sent's row published for later and its backoff
    assert (stored["retrying"], stored["scheduled_retries"]) == (3, 3)
    assert (recorded["retrying"], recorded["scheduled_retries"]) == (3, 3)
    by_type = {
        row["event_type"]: row
        for row in conn.execute(
            "SELECT * FROM outbox_monitor.event_type_samples WHERE sampled_at = %s",
            (stored["sampled_at"],),
        ).fetchall()
    }
    assert set(by_type) == {"order.paid", "mail.sent"}
    # continuous P95: order.paid {10, 20, 40}: 20 + 0.9 * (40 - 20) = 38;
    # mail.sent {4, 8}: 4 + 0.95 * (8 - 4) = 7.8
    assert by_type["order.paid"]["latency_p95_seconds"] == pytest.approx(38)
    assert by_type["mail.sent"]["latency_p95_seconds"] == pytest.approx(7.8)
    assert (by_type["order.paid"]["retrying"], by_type["mail.sent"]["retrying"]) == (2, 1)
    (series,) = metrics.samples_series(db)
    assert (series["retrying"], series["scheduled_retries"]) == (3, 3)
