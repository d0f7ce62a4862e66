"""The backlog snapshot (issue 32 item 3, migration 031): the sampler stores its one pass over
the backlog; read back, it adds up to the figures of the rows it saw, filtered like a live pass,
and only while fresh."""

import pytest

from outbox_monitor.figures import by_event_type
from outbox_monitor.figures.backlog import backlog_pass, record_snapshot, sampled_pass
from outbox_monitor.figures.workers import liveness
from outbox_monitor.service.sampler import record_sample

TOLERANCE = 5.0  # seconds between inserting the rows and sampling them (a loaded machine)


def test_the_sampled_pass_is_the_sampler_pass_read_back(db, rows, conn):
    # order.paid: 2 due (300, 60 s ago), 1 processing locked 20 min ago (stuck)
    rows.add(event_type="order.paid", created_ago=300)
    rows.add(event_type="order.paid", created_ago=60)
    rows.add(event_type="order.paid", status="processing", created_ago=1300, locked_ago=1200)
    # payment.captured: 1 retry (attempts 2) in backoff for 5 more minutes
    rows.add(event_type="payment.captured", created_ago=900, available_ago=-300, attempts=2)
    rows.add(event_type="order.paid", status="done", created_ago=100, processed_ago=50)

    record_sample(db)
    rows.add(event_type="order.paid", created_ago=1)  # after the sample: not in it
    sampled = sampled_pass(db)

    assert sampled is not None and sampled.backlog_rows == 4
    assert 0 <= sampled.age_seconds < TOLERANCE
    figures = sampled.backlog()
    assert (figures["queue_depth"], figures["pending_total"], figures["scheduled_retries"]) == (
        2,
        3,
        1,
    )
    assert (figures["processing"], figures["stuck_locks"], figures["retrying"]) == (1, 1, 1)
    assert figures["attempts_histogram"] == {0: 3, 2: 1}
    assert 900 <= figures["oldest_pending_age_seconds"] < 900 + TOLERANCE
    by_type = {row["event_type"]: row for row in sampled.by_event_type()}
    assert (by_type["order.paid"]["queue_depth"], by_type["order.paid"]["stuck_locks"]) == (2, 1)
    assert by_type["payment.captured"]["retrying"] == 1
    # the liveness from the snapshot: as of the sample, the newest claim 20 min before it
    workers = liveness(db, backlog=sampled)
    assert workers.due_rows == 2 and workers.now == sampled.sampled_at
    assert 1200 <= (workers.now - workers.newest_claim).total_seconds() < 1200 + TOLERANCE
    # a filter applies to the stored groups as to the table's rows (SPEC §2)
    payments = sampled_pass(db, event_type="payment.%")
    assert [g["event_type"] for g in payments.groups] == ["payment.captured"]
    assert payments.backlog_rows == 4  # every type's, whatever the filter
    # live, the row added after the sample counts
    assert backlog_pass(db).backlog()["queue_depth"] == 3


def test_an_old_snapshot_is_not_read(db, rows, conn):
    rows.add(event_type="order.paid", created_ago=60)
    record_sample(db)
    interval = db.settings.sample_interval
    conn.execute(
        "UPDATE outbox_monitor.backlog_snapshots SET sampled_at = sampled_at - %s * interval '1s'",
        (3 * interval + 1,),
    )
    assert sampled_pass(db) is None
    assert sampled_pass(db, max_age=3600) is not None


def test_a_filtered_pass_is_never_stored(db, conn):
    with pytest.raises(ValueError, match="every event type"), db.connection() as c:
        record_snapshot(c, db.compose, db.table_name, backlog_pass(db, event_type="x"))


def test_the_snapshot_holds_the_windows_finished_rows_of_every_event_type(db, rows, conn):
    """Migration 033: every type with finished rows in the window, counted by hand: order.paid
    done 10 and 30 s after creation (P95 29 s), one dead letter of mail.sent created in the
    hour, and a row done 2 h ago (outside the 1 h window) of sms.sent."""
    rows.add(event_type="order.paid", status="done", created_ago=110, processed_ago=100)
    rows.add(event_type="order.paid", status="done", created_ago=130, processed_ago=100)
    rows.add_failed(event_type="mail.sent", created_ago=300, processed_ago=60)
    rows.add(event_type="sms.sent", status="done", created_ago=7300, processed_ago=7200)

    record_sample(db)
    sampled = sampled_pass(db)

    assert sampled.finished_window == db.settings.window == 3600
    assert sampled.finished == {
        "order.paid": {"latency_p95": pytest.approx(29.0), "processed": 2, "created_finished": 2},
        "mail.sent": {"latency_p95": None, "processed": 0, "created_finished": 1},
    }
    assert sampled.finished_over(3600) is sampled.finished
    assert sampled.finished_over(6 * 3600) is None


def test_more_event_types_than_kept_leave_the_finished_rows_to_the_page(db, rows, monkeypatch):
    from outbox_monitor.figures import backlog

    monkeypatch.setattr(backlog, "FINISHED_SAMPLE_MAX_TYPES", 1)
    for event_type in ("order.paid", "mail.sent"):
        rows.add(event_type=event_type, status="done", created_ago=110, processed_ago=100)

    record_sample(db)

    sampled = sampled_pass(db)
    assert sampled is not None and sampled.finished is None and sampled.finished_window is None


def test_the_finished_rows_keep_unicode_long_and_percent_event_types(db, rows):
    """attack33: keys and counts survive the jsonb round trip: a Cyrillic type with an emoji,
    a 5,000-character type and one holding ``%`` and ``_``, each done once 10 s after its
    creation (P95 10 s), 1 processed, 1 created."""
    names = ("заказ.оплачен ✓🚀", "x" * 5000, "50%_off\\sale")
    for name in names:
        rows.add(event_type=name, status="done", created_ago=110, processed_ago=100)

    record_sample(db)

    assert sampled_pass(db).finished == {
        name: {"latency_p95": pytest.approx(10.0), "processed": 1, "created_finished": 1}
        for name in names
    }


def test_the_snapshot_holds_its_window_and_another_window_is_counted_now(db, rows, conn):
    """Migration 035 (attack33): the groups' open rows created in the window are of the
    sampler's window (the settings' 1 h), stored with them. order.paid: 3 pending rows
    created 2 h ago and 1 created 10 min ago. Over 1 h the snapshot's count is 1; over 6 h
    the table by event type counts 4 now, not the snapshot's 1; a snapshot of unknown window
    (taken before migration 035) is counted now too."""
    for ago in (7200, 7200, 7200, 600):
        rows.add(event_type="order.paid", created_ago=ago)
    record_sample(db)
    sampled = sampled_pass(db)
    assert sampled.window == db.settings.window == 3600
    assert sampled.created_open_in_window() == 1

    def created(backlog, window):
        table = by_event_type.measure(db, top=5, window=window, backlog=backlog)
        return {row["event_type"]: row["created_in_window"] for row in table}

    assert created(sampled, 3600)["order.paid"] == 1
    assert created(sampled, 6 * 3600)["order.paid"] == 4
    rows.add(event_type="order.paid", created_ago=1)  # after the sample
    assert created(sampled_pass(db), 3600)["order.paid"] == 1  # the sample's
    conn.execute("UPDATE outbox_monitor.backlog_snapshots SET backlog_window = NULL")
    unknown = sampled_pass(db)
    assert unknown.window is None
    assert created(unknown, 3600)["order.paid"] == 2  # counted now
