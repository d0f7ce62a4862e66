"""The incident timeline (issue 15 item 5): hand-inserted alert transitions, audit rows,
breaker transitions and dead letters at known instants come back as exactly these entries,
newest first; what a viewer sees of an audit row; a source that cannot be read is named
while the others are still shown."""

from datetime import timedelta

import pytest

from outbox_monitor.alerts.timeline import SourceFailure, TimelineEntry, read_timeline
from outbox_monitor.config.settings import load_settings
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.store.db import Database
from tests.timeline_rows import group_id, seed


def expected(conn, rows, *, operator: bool) -> list[TimelineEntry]:
    t0 = rows.t0

    def at(minutes: int):
        return t0 - timedelta(minutes=minutes)

    # each filter key in words, no JSON; a pause says no row count (it changes no row)
    pause = "event_type order.% · reason deploy" if operator else "event_type order.%"
    replay = "3 rows · event_type order.paid" + (" · status failed" if operator else "")
    group = group_id(conn, "order.paid")
    breakers = "/controls?event_type=order.%25"
    return [
        TimelineEntry(at(10), "alert", "stuck-lock resolved", "value 0 · resolved: clear for 0s",
                      "/alerts?rule=stuck-lock"),
        TimelineEntry(at(20), "action", "replay by bob", replay,
                      "/actions" if operator else None),
        TimelineEntry(at(25), "breaker", "breaker closed · order.%", "", breakers),
        TimelineEntry(at(35), "action", "pause by alice@example.com", pause,
                      "/actions" if operator else None),
        TimelineEntry(at(40), "alert", "stuck-lock firing", "value 3", "/alerts?rule=stuck-lock"),
        TimelineEntry(at(45), "breaker", "breaker opened · order.%",
                      "19 of 20 outcomes failed · cool-down 30s", breakers),
        TimelineEntry(at(50), "error group", f"new error group {group} · order.paid",
                      "2 failed so far · mail to [redacted] failed, order <n>",
                      f"/dead_letters?event_type=order.paid&error_group={group}"),
    ]  # fmt: skip


def test_every_source_merged_newest_first_within_the_range(db, conn, rows):
    seed(conn, db, rows)

    found = read_timeline(
        db,
        since=rows.t0 - timedelta(hours=1),
        until=rows.t0,
        redactor=redactor_for(db.settings),
        full_audit=True,
    )

    assert found.failures == [] and found.more == [] and found.notes == []
    assert found.entries == expected(conn, rows, operator=True)


def test_a_viewer_sees_only_the_event_type_of_an_audit_row(db, conn, rows):
    seed(conn, db, rows)

    found = read_timeline(
        db,
        since=rows.t0 - timedelta(hours=1),
        until=rows.t0,
        redactor=redactor_for(db.settings),
        full_audit=False,
    )

    assert found.entries == expected(conn, rows, operator=False)


def test_the_limit_keeps_the_newest_and_says_which_sources_had_more(db, conn, rows):
    seed(conn, db, rows)

    found = read_timeline(
        db,
        since=rows.t0 - timedelta(hours=1),
        until=rows.t0,
        redactor=redactor_for(db.settings),
        full_audit=True,
        limit=3,
    )

    assert found.entries == expected(conn, rows, operator=True)[:3]
    assert found.more == ["alert", "action", "error group", "breaker"]  # each left one out


def test_a_source_that_cannot_be_read_is_named_and_the_others_still_show(
    dsn, db, conn, rows, logins
):
    seed(conn, db, rows)
    db.fetch_one("error_groups_refresh", {"table_regclass": db.table_name, "batch": 100})
    conn.execute(f'REVOKE SELECT ON outbox_monitor.audit_log FROM "{logins.roles.viewer}"')
    conn.execute("DROP TABLE outbox_monitor.breaker_transitions")
    settings = load_settings(dsn=logins.dsn(dsn, logins.read))

    with Database(settings) as read:
        found = read_timeline(
            read,
            since=rows.t0 - timedelta(hours=1),
            until=rows.t0,
            redactor=redactor_for(settings),
            full_audit=False,
        )

    assert [f.kind for f in found.failures] == ["action", "breaker"]
    assert "audit_log" in found.failures[0].reason
    assert found.failures[1] == SourceFailure("breaker", found.failures[1].reason)
    assert "breaker_transitions" in found.failures[1].reason
    assert found.entries == [
        e for e in expected(conn, rows, operator=False) if e.kind in ("alert", "error group")
    ]


def test_a_range_that_ends_before_it_starts_is_refused(db):
    now = db.fetch_one("db_now")["now"]
    with pytest.raises(ValueError, match="starts"):
        read_timeline(db, since=now, until=now - timedelta(seconds=1),
                      redactor=redactor_for(db.settings), full_audit=True)  # fmt: skip


def test_an_alert_value_is_written_in_its_rules_unit(db, conn, rows):
    """Issue 30 item 6: 876.719 s of oldest pending age reads "14m 37s", a rule of no
    known unit keeps the number, and no value reads "no value" (never "None")."""
    now = db.fetch_one("db_now")["now"]
    for rule, value, ago in (("oldest-pending", 876.719, 3), ("gone", 0.089715, 2),
                             ("backlog", None, 1)):  # fmt: skip
        conn.execute(
            "INSERT INTO outbox_monitor.alert_transitions "
            "(rule, instance, from_state, to_state, value, at, detail) "
            "VALUES (%s, '', 'inactive', 'firing', %s, %s, NULL)",
            (rule, value, now - timedelta(seconds=ago)),
        )

    found = read_timeline(
        db,
        since=now - timedelta(minutes=1),
        until=now,
        redactor=redactor_for(db.settings),
        full_audit=True,
        units={"oldest-pending": "seconds", "backlog": "rows"},
    )

    assert [(e.title, e.detail) for e in found.entries] == [
        ("backlog firing", "no value"),
        ("gone firing", "value 0.089715"),
        ("oldest-pending firing", "value 14m 37s"),
    ]
