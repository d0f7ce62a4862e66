"""The event types the dashboard's event-type filter is checked against (issue 30 item 7):
the backlog's types, the last hour's per-type samples, the dead letters' types and the
planner's statistics of the event_type column — read without scanning the outbox's history."""

from outbox_monitor.figures.by_event_type import known_event_types


def sample(conn, event_type: str, seconds_ago: int) -> None:
    conn.execute(
        "INSERT INTO outbox_monitor.event_type_samples (table_name, sampled_at, event_type,"
        " queue_depth, failed_in_window, retrying)"
        " VALUES ('public.integration_outbox', now() - make_interval(secs => %s), %s, 0, 0, 0)",
        (seconds_ago, event_type),
    )


def test_known_types_are_the_backlogs_the_recent_samples_and_the_statistics(db, rows, conn):
    rows.add(event_type="order.paid")  # pending
    rows.add(event_type="shipment.created", status="processing", locked_ago=10)
    for _ in range(3):  # finished only: known once ANALYZE has seen the column
        rows.add(event_type="invoice.sent", status="done", processed_ago=30)
    rows.add_failed(event_type="crm.upsert")
    sample(conn, "notification.email", 600)  # in the last hour
    sample(conn, "payment.captured", 2 * 3600)  # older
    sample(conn, "other", 60)  # the folded rest: no type

    assert known_event_types(db, window=3600, limit=100, dead_letters=False) == [
        "notification.email",
        "order.paid",
        "shipment.created",
    ]
    # the dead letters' types: one probe of the failed_by_type index each
    assert known_event_types(db, window=3600, limit=100, dead_letters=True) == [
        "crm.upsert",
        "notification.email",
        "order.paid",
        "shipment.created",
    ]
    conn.execute("ANALYZE integration_outbox")
    assert known_event_types(db, window=3600, limit=100, dead_letters=False) == [
        "crm.upsert",
        "invoice.sent",
        "notification.email",
        "order.paid",
        "shipment.created",
    ]
    assert known_event_types(db, window=3 * 3600, limit=3, dead_letters=True) == [
        "crm.upsert",
        "invoice.sent",
        "notification.email",
    ]
