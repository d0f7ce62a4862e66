"""What is wrong, from evidence built by hand (``diagnosis.diagnose`` is pure): the share of a
retry error group when the groups and the table were read at different instants."""

from datetime import UTC, datetime, timedelta

from outbox_monitor.figures.diagnosis import Evidence, diagnose

NOW = datetime(2026, 12, 4, 2, 30, tzinfo=UTC)


def test_a_group_read_after_the_table_is_a_share_of_the_larger_count():
    row = {
        "event_type": "mail.sent",
        "queue_depth": 0,
        "retrying": 10,  # the table's count, read first
        "failed_in_window": 0,
        "stuck_locks": 0,
        "oldest_pending_age": 60.0,
    }
    group = {  # the groups' read, a moment later: one more row failed meanwhile
        "retrying": 11,
        "sample_error": "SMTP 421 too many connections",
        "oldest_created_at": NOW - timedelta(minutes=1),
    }
    evidence = Evidence(
        now=NOW,
        window_seconds=3600,
        rows=[row],
        flows={},
        controls=[],
        trends={},
        workers={"no_claim_while_due_seconds": 0.0, "due_rows": 0},
        retry_groups={"mail.sent": [group]},
    )

    [line] = diagnose(evidence).lines

    assert line.text == (
        "mail.sent — 10 retrying with “SMTP 421 too many connections” since 02:29 UTC (1m 0s); "
        "likely cause: downstream failing (one error for 11 of 11 retrying rows) "
        "→ Controls · Events"
    )
