"""SPEC §2 figures against rows inserted by hand; each expected value is worked out here."""

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from outbox_monitor.figures import error_grouping, metrics
from outbox_monitor.figures.registry import CLAIM_FIGURES, FIGURES

# Rows inserted at t0 are read back some milliseconds later: ages may exceed the hand
# value by that much, never fall below it.
SLACK_SECONDS = 5


def test_queue_depth_counts_only_due_pending_rows(db, rows):
    rows.add(status="pending", available_ago=10)
    rows.add(status="pending", available_ago=0.5)
    rows.add(status="pending", available_ago=-60)  # backoff: due in a minute
    rows.add(status="processing", locked_ago=5)
    rows.add(status="done", processed_ago=1)
    assert metrics.queue_depth(db) == 2
    assert metrics.scheduled_retries(db) == 1
    assert metrics.pending_total(db) == 3
    assert metrics.processing(db) == 1


def test_oldest_pending_age_is_null_without_pending_rows(db, rows):
    rows.add(status="done", created_ago=900, processed_ago=800)
    rows.add(status="failed", created_ago=900, processed_ago=800)
    assert metrics.oldest_pending_age(db) is None


def test_oldest_pending_age_includes_rows_waiting_in_backoff(db, rows):
    rows.add(status="pending", created_ago=100)
    rows.add(status="pending", created_ago=500, available_ago=-3600)
    rows.add(status="processing", created_ago=9000, locked_ago=10)
    age = metrics.oldest_pending_age(db)
    assert 500 <= age < 500 + SLACK_SECONDS


def test_stuck_locks_follow_the_lock_timeout(db, rows):
    rows.add(status="processing", locked_ago=1000)
    rows.add(status="processing", locked_ago=10)
    rows.add(status="pending", locked_ago=5000)  # not processing: never stuck
    assert metrics.stuck_locks(db) == 1  # default 15 min
    assert metrics.stuck_locks(db, lock_timeout=5) == 2
    assert metrics.stuck_locks(db, lock_timeout=2000) == 0


def _done(rows, duration, processed_ago=100, **fields):
    rows.add(
        status="done", created_ago=processed_ago + duration, processed_ago=processed_ago, **fields
    )


def test_latency_percentiles_are_continuous(db, rows):
    for duration in (10, 20, 30, 40, 50):
        _done(rows, duration)
    _done(rows, 999, processed_ago=7200)  # outside the 1 h window
    rows.add(status="failed", created_ago=5000, processed_ago=100)  # not done
    # positions (n-1)·q over [10,20,30,40,50]: 2 → 30; 3.8 → 48; 3.96 → 49.6
    assert metrics.latency_percentiles(db) == pytest.approx({"p50": 30, "p95": 48, "p99": 49.6})


def test_negative_latency_from_clock_skew_counts_as_zero(db, rows):
    for duration in (10, 20, 30, 40, 50):
        _done(rows, duration)
    rows.add(status="done", created_ago=50, processed_ago=60)  # processed "before" created
    # [0,10,20,30,40,50]: 2.5 → 25; 4.75 → 47.5; 4.95 → 49.5
    assert metrics.latency_percentiles(db) == pytest.approx({"p50": 25, "p95": 47.5, "p99": 49.5})


def test_latency_is_null_when_nothing_was_done_in_the_window(db, rows):
    _done(rows, 10, processed_ago=7200)
    assert metrics.latency_percentiles(db) == {"p50": None, "p95": None, "p99": None}


def test_throughput_per_minute_over_the_window(db, rows):
    for processed_ago in (30, 200, 590):
        _done(rows, 5, processed_ago=processed_ago)
    _done(rows, 5, processed_ago=700)  # outside a 10 min window
    rows.add(status="pending", created_ago=20)
    # created in the last 600 s: 35, 205, 595 (done rows) and 20 → 4; processed: 3
    figures = metrics.throughput(db, window=600)
    assert figures == pytest.approx({"processed_per_minute": 0.3, "created_per_minute": 0.4})


def _add_created_in_window_cases(rows):
    """Rows of every status and clock; 5 were created in the last 600 s (marked +)."""
    rows.add(status="pending", created_ago=100)  # +
    rows.add(status="processing", created_ago=590, locked_ago=5)  # +
    rows.add(status="pending", created_ago=700)
    rows.add(status="done", created_ago=200, processed_ago=30)  # +
    rows.add(status="done", created_ago=900, processed_ago=30)  # processed in, created before
    # clock skew: processed "before" created, before the window starts
    rows.add(status="done", created_ago=300, processed_ago=1200)  # +
    rows.add(status="failed", created_ago=400, processed_ago=None)  # + (no processed_at)
    rows.add(status="failed", created_ago=4000, processed_ago=None)
    rows.add(status="done", created_ago=-120, processed_ago=30)  # created "in the future"


def test_created_in_window_counts_every_status_and_clock_skew(db, rows):
    _add_created_in_window_cases(rows)
    assert metrics.throughput(db, window=600)["created_per_minute"] == pytest.approx(5 / 10)


def test_created_series_counts_every_status_and_clock_skew(db, rows):
    _add_created_in_window_cases(rows)
    series = metrics.throughput_series(db, window=600, bucket=600)
    created = sum(row["rows"] for row in series if row["kind"] == "created")
    assert created == 6  # the 5, and the row created "in the future" (the series has no end)


def test_failures_are_counted_by_time_of_failure(db, rows):
    rows.add(
        event_type="payment.captured", status="failed", created_ago=2 * 86400, processed_ago=60
    )
    rows.add(event_type="payment.captured", status="failed", created_ago=300, processed_ago=200)
    rows.add(event_type="order.paid", status="failed", created_ago=100, processed_ago=50)
    rows.add(event_type="order.paid", status="failed", created_ago=9000, processed_ago=7200)
    rows.add(event_type="order.paid", status="done", created_ago=100, processed_ago=50)
    assert metrics.failed_by_event_type(db) == {"payment.captured": 2, "order.paid": 1}
    assert metrics.failed_by_event_type(db, window=100) == {"payment.captured": 1, "order.paid": 1}


def test_retry_pressure_histogram_skips_done_rows(db, rows):
    rows.add(status="pending", attempts=0)
    rows.add(status="pending", attempts=0)
    rows.add(status="pending", attempts=2, available_ago=-30)
    rows.add(status="processing", attempts=1, locked_ago=3)
    rows.add(status="failed", attempts=10, processed_ago=5)
    rows.add(status="failed", attempts=2, processed_ago=5)
    rows.add(status="done", attempts=3, processed_ago=5)
    assert metrics.attempts_histogram(db) == {0: 2, 1: 1, 2: 2, 10: 1}
    assert metrics.attempts_at_least(db, 2) == 3
    assert metrics.attempts_at_least(db, 11) == 0


def test_backlog_adds_up_every_backlog_figure_across_attempts(db, rows):
    rows.add(event_type="order.paid", status="pending", attempts=0, created_ago=100)
    rows.add(event_type="order.paid", status="pending", attempts=3, created_ago=700)
    rows.add(
        event_type="order.paid", status="pending", attempts=3, created_ago=50, available_ago=-60
    )
    rows.add(event_type="order.paid", status="processing", attempts=0, locked_ago=1000)
    rows.add(event_type="mail.sent", status="processing", attempts=3)
    rows.add(event_type="mail.sent", status="processing", attempts=1, locked_ago=10)
    rows.add(event_type="mail.sent", status="pending", attempts=1, created_ago=9000)
    rows.add(event_type="mail.sent", status="failed", attempts=10, processed_ago=5)
    rows.add(event_type="mail.sent", status="done", attempts=2, processed_ago=5)
    # due: 100, 700, 9000 s old; in backoff: one; processing 3, of which stuck: locked 1000 s
    # ago and the orphan (no locked_at); attempts 0: 2 rows, 1: 2, 3: 3
    figures = metrics.backlog(db)
    age = figures.pop("oldest_pending_age_seconds")
    assert 9000 <= age < 9000 + SLACK_SECONDS
    assert figures == {
        "queue_depth": 3,
        "pending_total": 4,
        "scheduled_retries": 1,
        "retrying": 3,  # pending with attempts 3, 3 and 1
        "processing": 3,
        "stuck_locks": 2,
        "attempts_histogram": {0: 2, 1: 2, 3: 3},
    }
    paid = metrics.backlog(db, event_type="order.%", lock_timeout=2000)
    age = paid.pop("oldest_pending_age_seconds")
    assert 700 <= age < 700 + SLACK_SECONDS
    assert paid == {
        "queue_depth": 2,
        "pending_total": 3,
        "scheduled_retries": 1,
        "retrying": 2,
        "processing": 1,
        "stuck_locks": 0,
        "attempts_histogram": {0: 2, 3: 2},
    }
    for name in ("queue_depth", "pending_total", "scheduled_retries", "retrying", "processing"):
        assert getattr(metrics, name)(db) == metrics.backlog(db)[name]


def test_backlog_of_an_empty_outbox(db, rows):
    rows.add(status="done", processed_ago=5)
    assert metrics.backlog(db) == {
        "queue_depth": 0,
        "pending_total": 0,
        "scheduled_retries": 0,
        "retrying": 0,
        "oldest_pending_age_seconds": None,
        "processing": 0,
        "stuck_locks": 0,
        "attempts_histogram": {},
    }


def test_retrying_counts_only_pending_rows_after_a_failure(db, rows):
    rows.add(event_type="order.paid", status="pending", attempts=0)  # never tried
    rows.add(event_type="order.paid", status="pending", attempts=2, available_ago=5)  # due
    rows.add(event_type="order.paid", status="pending", attempts=2, available_ago=-60)  # backoff
    rows.add(event_type="order.paid", status="processing", attempts=3, locked_ago=10)
    rows.add(event_type="order.paid", status="failed", attempts=10, processed_ago=30)
    rows.add(event_type="invoice.sent", status="pending", attempts=1, available_ago=-600)
    rows.add(event_type="invoice.sent", status="done", attempts=1, processed_ago=30)
    # pending with attempts > 0: order.paid's due one and its one in backoff, invoice.sent's
    assert metrics.retrying(db) == 3
    assert metrics.retrying(db, event_type="order.paid") == 2
    assert metrics.retrying(db, event_type="invoice.%") == 1
    assert metrics.retrying(db, event_type="mail.sent") == 0
    assert metrics.backlog(db)["retrying"] == 3
    assert metrics.status(db)["retrying"] == 3
    assert metrics.status(db, event_type="order.paid")["retrying"] == 2
    assert FIGURES["retrying"].measure(db, None, "invoice.sent", 1) == 1


def test_every_registry_figure_measures_what_status_json_shows(db, rows):
    rows.add(event_type="order.paid", status="pending", attempts=0, created_ago=100)
    rows.add(event_type="order.paid", status="pending", attempts=3, available_ago=-60)
    rows.add(event_type="order.paid", status="processing", attempts=1, locked_ago=1000)
    rows.add(event_type="mail.sent", status="processing", attempts=4)  # orphan lock
    rows.add(event_type="mail.sent", status="failed", attempts=10, processed_ago=30)
    for duration in (10, 20, 30, 40, 50):
        _done(rows, duration, event_type="order.paid")
    figures = metrics.status(db)
    for name, figure in FIGURES.items():
        if name in CLAIM_FIGURES:  # status --json's health.claim_plan: test_claim_health.py
            continue
        key, _, part = figure.status_key.partition(".")
        shown = figures[key][part] if part else figures[key]
        if name == "attempts_at_least":  # rows not done with attempts >= 3: 3, 4 and 10
            assert figure.measure(db, None, None, 3) == 3
            assert sum(n for a, n in shown.items() if int(a) >= 3) == 3
            continue
        value = figure.measure(db, None, None, 1)
        if figure.is_duration and key != "latency_seconds":  # an age grows while measured
            assert value == pytest.approx(shown, abs=SLACK_SECONDS), name
        else:
            assert value == pytest.approx(shown), name
    assert figures["queue_depth"] == 1 and figures["stuck_locks"] == 2
    assert figures["latency_seconds"]["p50"] == pytest.approx(30)


def _group_id(event_type, normalised):
    return hashlib.md5(f"{event_type}:{normalised}".encode()).hexdigest()[:12]


def test_error_groups_normalise_variable_parts_and_keep_status_codes(db, rows):
    def failed(event_type, error, ago=60):
        rows.add(event_type=event_type, status="failed", processed_ago=ago, last_error=error)

    failed("crm.upsert", "HTTP 401 invalid API key for account 12345", ago=300)
    failed("crm.upsert", "HTTP 401 invalid API key for account 67890", ago=100)
    failed("crm.upsert", "HTTP 500 upstream 'svc-a' failed for 9f8e7d6c5b4a")
    failed("crm.upsert", 'HTTP 500 upstream "svc-b" failed for 0a1b2c3d4e5f6a7b')
    failed("order.paid", "timeout for order 3fa85f64-5717-4562-b3fc-2c963f66afa6")
    failed("order.paid", "no route req_deadbeef for order 20261129")
    failed("order.paid", "no route req_cafebabe01 for order 20261130")
    groups = {g["group_id"]: g for g in error_grouping.error_groups(db)}
    key_401 = _group_id("crm.upsert", "HTTP 401 invalid API key for account <n>")
    key_500 = _group_id("crm.upsert", "HTTP 500 upstream <str> failed for <hex>")
    key_uuid = _group_id("order.paid", "timeout for order <uuid>")
    key_route = _group_id("order.paid", "no route req_<hex> for order <n>")
    assert set(groups) == {key_401, key_500, key_uuid, key_route}
    assert groups[key_route]["failed"] == 2
    assert groups[key_401]["failed"] == 2
    assert groups[key_401]["fingerprint"] == "HTTP 401 invalid API key for account <n>"
    assert groups[key_401]["sample_error"].endswith("67890")  # newest row's error
    assert groups[key_500]["failed"] == 2
    assert groups[key_401]["first_seen"] == rows.at(300)
    assert groups[key_401]["last_seen"] == rows.at(100)


def test_retry_error_groups_group_retrying_rows_like_error_groups(db, rows):
    def retrying(event_type, error, **fields):
        fields.setdefault("attempts", 1)
        return rows.add(event_type=event_type, status="pending", last_error=error, **fields)

    api_key = "HTTP 401 invalid API key for account "
    retrying("crm.upsert", api_key + "12345", created_ago=300, available_ago=-30)
    retrying("crm.upsert", api_key + "67890", created_ago=100, available_ago=5, attempts=2)
    retrying("crm.upsert", "HTTP 500 upstream 'svc-a' failed", available_ago=-60)
    retrying("order.paid", api_key + "12345", created_ago=50)  # due since 50 s ago
    # not retrying: never tried, claimed now, dead-lettered
    retrying("crm.upsert", "HTTP 500 upstream 'svc-b' failed", attempts=0)
    rows.add(event_type="crm.upsert", status="processing", attempts=3, last_error=api_key + "1111")
    rows.add(
        event_type="crm.upsert",
        status="failed",
        attempts=10,
        processed_ago=30,
        last_error=api_key + "99999",
    )
    key_401 = _group_id("crm.upsert", "HTTP 401 invalid API key for account <n>")
    key_500 = _group_id("crm.upsert", "HTTP 500 upstream <str> failed")
    key_order = _group_id("order.paid", "HTTP 401 invalid API key for account <n>")
    groups = error_grouping.retry_error_groups(db)
    # biggest first; the two of one row: the one due latest (in 60 s) first
    assert [g["group_id"] for g in groups] == [key_401, key_500, key_order]
    first = groups[0]
    assert (first["event_type"], first["retrying"], first["due_now"]) == ("crm.upsert", 2, 1)
    assert first["fingerprint"] == "HTTP 401 invalid API key for account <n>"
    assert first["sample_error"] == api_key + "67890"  # the group's newest row
    assert first["oldest_created_at"] == rows.at(300)
    assert first["last_due_at"] == rows.at(-30)
    assert (groups[1]["retrying"], groups[1]["due_now"]) == (1, 0)
    assert (groups[2]["retrying"], groups[2]["due_now"]) == (1, 1)
    # the same group id as the dead letters the retries turn into
    assert key_401 in {g["group_id"] for g in error_grouping.error_groups(db)}
    assert [g["group_id"] for g in error_grouping.retry_error_groups(db, limit=1)] == [key_401]
    assert metrics.status(db)["retry_error_groups"] == groups
    filtered = metrics.status(db, event_type="order.%")["retry_error_groups"]
    assert [g["group_id"] for g in filtered] == [key_order]
    # the dashboard (count_cap) reads them elsewhere, never through this live query
    assert "retry_error_groups" not in metrics.status(db, count_cap=1000)


@pytest.mark.parametrize(
    ("value", "matches"),
    [
        ("order.paid", {"order.paid"}),
        ("order_%", {"order_paid"}),  # "_" is literal, not "any character"
        ("order%", {"order.paid", "order_paid", "orderXpaid"}),
        ("notification.%", {"notification.email"}),
        ("a\\%", {"a\\b"}),  # a backslash is literal too
        ("nothing%", set()),
    ],
)
def test_event_type_filter_exact_or_like(db, rows, value, matches):
    for event_type in ("order.paid", "order_paid", "orderXpaid", "notification.email", "a\\b"):
        rows.add(event_type=event_type, status="pending")
        rows.add(event_type=event_type, status="failed", processed_ago=10)
    assert metrics.queue_depth(db, event_type=value) == len(matches)
    assert set(metrics.failed_by_event_type(db, event_type=value)) == matches


def _bucket(instant: datetime, seconds: int) -> datetime:
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    return origin + timedelta(seconds=(instant - origin).total_seconds() // seconds * seconds)


def test_throughput_series_counts_per_bucket(db, rows):
    _done(rows, 10, processed_ago=100)
    _done(rows, 10, processed_ago=400)
    rows.add(status="failed", created_ago=500, processed_ago=450)
    rows.add(status="pending", created_ago=30)
    series = metrics.throughput_series(db, window=3600, bucket=60)
    got = {(row["bucket"], row["kind"]): row["rows"] for row in series}
    expected: dict = {}
    for kind, ago in [
        ("created", 110),
        ("created", 410),
        ("created", 500),
        ("created", 30),
        ("processed", 100),
        ("processed", 400),
        ("dead-lettered", 450),
    ]:
        key = (_bucket(rows.at(ago), 60), kind)
        expected[key] = expected.get(key, 0) + 1
    assert got == expected


def test_latency_series_per_bucket(db, rows):
    _done(rows, 10, processed_ago=100)
    _done(rows, 30, processed_ago=100)
    series = metrics.latency_series(db, window=3600, bucket=3600)
    assert len(series) == 1
    assert (series[0]["p50"], series[0]["p95"]) == pytest.approx((20, 29))


def test_status_json_shape_and_values(db, rows):
    rows.add(event_type="order.paid", status="pending", created_ago=120)
    rows.add(event_type="order.paid", status="failed", processed_ago=30, attempts=4)
    _done(rows, 12, processed_ago=60, event_type="invoice.sent")
    figures = metrics.status(db, window=3600, lock_timeout=900)
    assert figures["queue_depth"] == 1
    assert figures["pending_total"] == 1
    assert figures["scheduled_retries"] == 0
    assert 120 <= figures["oldest_pending_age_seconds"] < 120 + SLACK_SECONDS
    assert figures["latency_seconds"] == {"p50": 12.0, "p95": 12.0, "p99": 12.0}
    assert figures["processed_per_minute"] == pytest.approx(1 / 60)
    assert figures["created_per_minute"] == pytest.approx(3 / 60)
    assert figures["failed_in_window"] == 1
    assert figures["failed_by_event_type"] == {"order.paid": 1}
    assert figures["attempts_histogram"] == {"0": 1, "4": 1}
    filtered = metrics.status(db, event_type="invoice.%")
    assert (filtered["queue_depth"], filtered["failed_in_window"]) == (0, 0)
    assert filtered["latency_seconds"]["p50"] == 12.0
