from outbox_monitor import metrics


def test_status_on_seeded_rows(db, rows):
    rows.add(status="pending", created_ago=120)
    rows.add(status="pending", created_ago=30, available_ago=-60)
    rows.add(status="done", created_ago=100, processed_ago=90)
    rows.add(status="done", created_ago=100, processed_ago=70)
    rows.add(
        status="failed",
        created_ago=100,
        processed_ago=50,
        attempts=10,
        last_error="HTTP 401 key 'abc'",
    )
    s = metrics.status(db)
    print(s)
    assert s["queue_depth"] == 1
    assert s["scheduled_retries"] == 1
    assert s["pending_total"] == 2
    assert 120 <= s["oldest_pending_age_seconds"] < 125
    assert s["latency_seconds"]["p50"] == 20.0
    assert s["failed_by_event_type"] == {"order.paid": 1}
    print(metrics.error_groups(db))
