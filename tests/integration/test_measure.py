"""A rule's value per alert instance, against rows inserted by hand (values worked out here)."""

from typing import Any

import pytest

from outbox_monitor.alerts import measure
from outbox_monitor.alerts.measure import Measurement
from outbox_monitor.alerts.rules import Rule

# Rows inserted at t0 are measured some milliseconds later: ages may exceed the hand value
# by that much, never fall below it.
SLACK_SECONDS = 5


def make_rule(**fields: Any) -> Rule:
    base = {"name": "r", "op": ">", "threshold": 0, "route": "oncall"}
    return Rule.model_validate({**base, **fields})


def per_type(event_type: str, value: float, breached: bool) -> Measurement:
    """The measurement of one ``by: [event_type]`` instance."""
    return Measurement(f"event_type={event_type}", {"event_type": event_type}, value, breached)


def test_rule_without_by_has_one_instance_over_its_filter(db, rows):
    rows.add(event_type="notification.email", status="pending", available_ago=5)
    rows.add(event_type="notification.sms", status="pending", available_ago=5)
    rows.add(event_type="notification.sms", status="pending", available_ago=-60)  # backoff
    rows.add(event_type="order.paid", status="pending", available_ago=5)
    rows.add(event_type="notification.email", status="processing", locked_ago=5)
    depth = make_rule(metric="queue_depth", event_type="notification.%", threshold=1)
    assert measure.measure(db, depth) == [Measurement("", {}, 2.0, True)]
    everything = make_rule(metric="queue_depth", threshold=3)
    assert measure.measure(db, everything) == [Measurement("", {}, 3.0, False)]
    pending = make_rule(metric="pending_total", event_type="notification.sms", threshold=1)
    assert measure.measure(db, pending) == [Measurement("", {}, 2.0, True)]
    retries = make_rule(metric="scheduled_retries", op=">=", threshold=1)
    assert measure.measure(db, retries) == [Measurement("", {}, 1.0, True)]
    claimed = make_rule(metric="processing", op="==", threshold=1)
    assert measure.measure(db, claimed) == [Measurement("", {}, 1.0, True)]


def test_oldest_pending_age_in_seconds_and_none_when_nothing_pending(db, rows):
    late = make_rule(metric="oldest_pending_age", event_type="notification.%", threshold="5m")
    rows.add(event_type="notification.email", status="done", created_ago=900, processed_ago=800)
    assert measure.measure(db, late) == [Measurement("", {}, None, False)]
    rows.add(event_type="notification.email", status="pending", created_ago=400)
    rows.add(event_type="notification.sms", status="pending", created_ago=200, available_ago=-900)
    rows.add(event_type="order.paid", status="pending", created_ago=5000)  # other type
    (only,) = measure.measure(db, late)
    assert 400 <= only.value < 400 + SLACK_SECONDS
    assert only.breached  # 400 s > 5 min


def test_failed_in_window_by_event_type_one_instance_per_type(db, rows):
    rows.add(event_type="payment.captured", status="failed", processed_ago=300)
    rows.add(event_type="payment.captured", status="failed", processed_ago=600)
    rows.add(event_type="payment.refunded", status="failed", processed_ago=120)
    rows.add(event_type="payment.voided", status="failed", processed_ago=1200)  # before 15 min
    rows.add(event_type="payment.authorized", status="done", processed_ago=60)  # not failed
    rows.add(event_type="payment.pending", status="pending")  # not failed
    rows.add(event_type="order.paid", status="failed", processed_ago=60)  # outside the filter
    rule = make_rule(
        metric="failed_in_window",
        event_type="payment.%",
        window="15m",
        by=["event_type"],
        threshold=1,
    )
    assert measure.measure(db, rule) == [
        per_type("payment.captured", 2.0, True),
        per_type("payment.refunded", 1.0, False),
    ]
    no_filter = make_rule(metric="failed_in_window", window="15m", by=["event_type"])
    assert [(m.instance, m.value) for m in measure.measure(db, no_filter)] == [
        ("event_type=order.paid", 1.0),
        ("event_type=payment.captured", 2.0),
        ("event_type=payment.refunded", 1.0),
    ]
    wider = make_rule(metric="failed_in_window", window="1h", event_type="payment.%")
    assert measure.measure(db, wider) == [Measurement("", {}, 4.0, True)]


def test_by_rule_with_no_relevant_rows_has_no_instances(db, rows):
    rows.add(event_type="order.paid", status="done", processed_ago=60)
    rule = make_rule(metric="queue_depth", by=["event_type"])
    assert measure.measure(db, rule) == []


def test_depth_by_event_type_lists_types_with_pending_rows_even_at_zero(db, rows):
    rows.add(event_type="order.paid", status="pending", available_ago=10)
    rows.add(event_type="order.paid", status="pending", available_ago=10)
    rows.add(event_type="invoice.sent", status="pending", available_ago=-300)  # backoff only
    rows.add(event_type="crm.upsert", status="processing", locked_ago=10)  # not pending
    rule = make_rule(metric="queue_depth", by=["event_type"], threshold=1)
    assert measure.measure(db, rule) == [
        per_type("invoice.sent", 0.0, False),
        per_type("order.paid", 2.0, True),
    ]


def test_retrying_by_event_type_counts_pending_rows_after_a_failure(db, rows):
    rows.add(event_type="order.paid", status="pending", attempts=2, available_ago=5)
    rows.add(event_type="order.paid", status="pending", attempts=1, available_ago=-60)  # backoff
    rows.add(event_type="order.paid", status="pending", attempts=0)
    rows.add(event_type="order.refunded", status="pending", attempts=0)  # nothing retrying
    rows.add(event_type="crm.upsert", status="processing", attempts=3, locked_ago=10)
    rows.add(event_type="payment.captured", status="failed", attempts=10, processed_ago=30)
    rule = make_rule(metric="retrying", by=["event_type"], threshold=1)
    # instances: the types with pending rows, as for queue_depth
    assert measure.measure(db, rule) == [
        per_type("order.paid", 2.0, True),
        per_type("order.refunded", 0.0, False),
    ]
    orders = make_rule(metric="retrying", event_type="order.%", op=">=", threshold=2)
    assert measure.measure(db, orders) == [Measurement("", {}, 2.0, True)]


def test_latency_percentile_over_the_rules_window_per_event_type(db, rows):
    for duration in (10, 20, 30, 40, 50):
        rows.add(
            event_type="order.paid", status="done", created_ago=100 + duration, processed_ago=100
        )
    rows.add(event_type="order.paid", status="done", created_ago=9000, processed_ago=7200)
    rows.add(event_type="invoice.sent", status="done", created_ago=400, processed_ago=100)
    rows.add(event_type="crm.upsert", status="done", created_ago=9000, processed_ago=7200)
    # order.paid in the last hour: 10..50 → p95 = 40 + 0.8·10 = 48, p50 = 30
    p95 = make_rule(metric="latency_p95", window="1h", by=["event_type"], threshold="45s")
    assert measure.measure(db, p95) == [
        per_type("invoice.sent", 300.0, True),
        per_type("order.paid", 48.0, True),
    ]
    p50 = make_rule(metric="latency_p50", event_type="order.paid", threshold=30)
    assert measure.measure(db, p50) == [Measurement("", {}, 30.0, False)]  # default window 1 h
    # 3 h window takes the 7200 s-ago row (duration 1800) as well: 6 rows of order.paid
    p99 = make_rule(metric="latency_p99", window="3h", event_type="order.paid", threshold=1000)
    ((value, flag),) = [(m.value, m.breached) for m in measure.measure(db, p99)]
    assert value == pytest.approx(50 + 0.95 * (1800 - 50))  # continuous: 5·0.99 = 4.95
    assert flag


def test_processed_per_minute_watches_types_with_a_backlog_and_nothing_processed(db, rows):
    for _ in range(6):
        rows.add(event_type="order.paid", status="done", processed_ago=60)
    rows.add(event_type="invoice.sent", status="pending", available_ago=30)
    rows.add(event_type="old.type", status="done", processed_ago=5000)  # outside 10 min
    rule = make_rule(
        metric="processed_per_minute", window="10m", by=["event_type"], op="<", threshold=0.5
    )
    assert measure.measure(db, rule) == [
        per_type("invoice.sent", 0.0, True),
        per_type("order.paid", 0.6, False),
    ]


def test_created_per_minute_and_attempts_at_least(db, rows):
    for ago in (30, 90, 150):
        rows.add(event_type="order.paid", created_ago=ago)
    rows.add(event_type="order.paid", created_ago=4000)
    created = make_rule(metric="created_per_minute", window="5m", threshold=0.5)
    assert measure.measure(db, created) == [Measurement("", {}, 0.6, True)]
    rows.add(event_type="crm.upsert", status="pending", attempts=5)
    rows.add(event_type="crm.upsert", status="failed", attempts=7, processed_ago=99999)
    rows.add(event_type="crm.upsert", status="done", attempts=9, processed_ago=10)  # done
    rows.add(event_type="invoice.sent", status="processing", attempts=4, locked_ago=5)
    attempts = make_rule(metric="attempts_at_least", attempts=5, by=["event_type"])
    assert measure.measure(db, attempts) == [
        per_type("crm.upsert", 2.0, True),
        per_type("invoice.sent", 0.0, False),
        per_type("order.paid", 0.0, False),
    ]


def test_stuck_locks_use_the_configured_lock_timeout(db, rows):
    rows.add(event_type="crm.upsert", status="processing", locked_ago=1000)
    rows.add(event_type="crm.upsert", status="processing", locked_ago=10)
    rows.add(event_type="order.paid", status="processing", locked_ago=5)
    rule = make_rule(metric="stuck_locks", by=["event_type"])
    assert measure.measure(db, rule) == [
        per_type("crm.upsert", 1.0, True),
        per_type("order.paid", 0.0, False),
    ]


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        (">", 5, False),
        (">", 5.01, True),
        (">=", 5, True),
        ("<", 4.99, True),
        ("<", 5, False),
        ("<=", 5, True),
        ("==", 5, True),
        ("==", 4, False),
        ("!=", 4, True),
        ("!=", 5, False),
        (">", None, False),
        ("<", None, False),
        ("!=", None, False),
    ],
)
def test_breached_compares_value_with_threshold_and_none_never_breaches(op, value, expected):
    assert measure.breached(make_rule(metric="queue_depth", op=op, threshold=5), value) is expected


def test_offenders_of_failures_are_event_types_then_error_groups(db, rows):
    for _ in range(3):
        rows.add(event_type="payment.captured", status="failed", processed_ago=60,
                 last_error="HTTP 401 Unauthorized")  # fmt: skip
    rows.add(event_type="payment.captured", status="failed", processed_ago=60,
             last_error="HTTP 500 from psp (request 12345678)")  # fmt: skip
    rows.add(event_type="payment.refunded", status="failed", processed_ago=120,
             last_error="HTTP 500 from psp (request 87654321)")  # fmt: skip
    rows.add(event_type="order.paid", status="failed", processed_ago=60, last_error="boom")
    rule = make_rule(metric="failed_in_window", window="15m", event_type="payment.%")
    found = measure.offenders(db, rule)
    assert [item for item in found if item["kind"] == "event_type"] == [
        {"kind": "event_type", "event_type": "payment.captured", "value": 4.0},
        {"kind": "event_type", "event_type": "payment.refunded", "value": 1.0},
    ]
    groups = [item for item in found if item["kind"] == "error_group"]
    assert [(g["event_type"], g["failed"], g["sample_error"]) for g in groups] == [
        ("payment.captured", 3, "HTTP 401 Unauthorized"),
        ("payment.captured", 1, "HTTP 500 from psp (request 12345678)"),
        ("payment.refunded", 1, "HTTP 500 from psp (request 87654321)"),
    ]
    assert all(len(g["group_id"]) == 12 and isinstance(g["last_seen"], str) for g in groups)
    # one instance of a `by` rule: only its own event type
    mine = measure.offenders(db, rule, event_type="payment.refunded")
    assert {item["event_type"] for item in mine} == {"payment.refunded"}
    assert len(mine) == 2


def test_offenders_of_depth_are_the_deepest_event_types_limited(db, rows):
    depths = {"a.one": 1, "b.two": 4, "c.three": 2, "d.four": 3}
    for event_type, depth in depths.items():
        for _ in range(depth):
            rows.add(event_type=event_type, status="pending", available_ago=5)
    rule = make_rule(metric="queue_depth", threshold=5)
    assert measure.offenders(db, rule, limit=3) == [
        {"kind": "event_type", "event_type": "b.two", "value": 4.0},
        {"kind": "event_type", "event_type": "d.four", "value": 3.0},
        {"kind": "event_type", "event_type": "c.three", "value": 2.0},
    ]
    slowest = make_rule(metric="queue_depth", op="<", threshold=5)
    assert [o["event_type"] for o in measure.offenders(db, slowest, limit=2)] == [
        "a.one",
        "c.three",
    ]
