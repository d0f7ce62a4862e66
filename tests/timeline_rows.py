"""Changes at known instants for the incident timeline's tests (issue 15 item 5): alert
transitions, audit rows and breaker transitions inserted by hand, dead letters whose error
group the cache finds. Import as ``from tests.timeline_rows import …``."""

from datetime import timedelta

from psycopg.types.json import Jsonb


def seed(conn, db, rows) -> None:
    """Changes at t0 − 50 min … t0 − 1 min, and some outside a 1 h range or not paging."""
    t0 = rows.t0
    transitions = [
        ("stuck-lock", "", "pending", "firing", 3.0, 40 * 60, None),
        ("stuck-lock", "", "firing", "inactive", 0.0, 10 * 60, "resolved: clear for 0s"),
        ("backlog", "", "inactive", "pending", 900.0, 30 * 60, "pending for 5m"),  # not shown
        ("backlog", "event_type=a.b", "inactive", "firing", 12.0, 90 * 60, None),  # too old
    ]
    for rule, instance, before, after, value, ago, detail in transitions:
        conn.execute(
            "INSERT INTO outbox_monitor.alert_transitions "
            "(rule, instance, from_state, to_state, value, at, detail) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (rule, instance, before, after, value, t0 - timedelta(seconds=ago), detail),
        )
    audit = [
        ("alice@example.com", "pause", {"event_type": "order.%", "reason": "deploy"}, 0, 35 * 60),
        ("bob", "replay", {"event_type": "order.paid", "status": "failed"}, 3, 20 * 60),
        ("bob", "reap", {"older_than": 300}, 1, 2 * 60 * 60),  # too old
    ]
    for actor, action, details, count, ago in audit:
        conn.execute(
            "INSERT INTO outbox_monitor.audit_log (run_id, at, actor, action, table_name, "
            "filter, affected_count, affected_ids) "
            "VALUES (gen_random_uuid(), %s, %s, %s, %s, %s, %s, '{}')",
            (t0 - timedelta(seconds=ago), actor, action, db.table_name, Jsonb(details), count),
        )
    for transition, outcomes, failures, cooldown, ago in (
        ("opened", 20, 19, 30.0, 45 * 60),
        ("closed", None, None, None, 25 * 60),
    ):
        conn.execute(
            "INSERT INTO outbox_monitor.breaker_transitions (outbox, event_type_filter, "
            "transition, at, outcomes, failures, cooldown_seconds) "
            "VALUES (%s::regclass, 'order.%%', %s, %s, %s, %s, %s)",
            (db.table_name, transition, t0 - timedelta(seconds=ago), outcomes, failures, cooldown),
        )
    # one error group first seen 50 min ago (its second row later), one 3 h ago
    rows.add_failed(
        event_type="order.paid",
        processed_ago=50 * 60,
        last_error="mail to gina@example.com failed, order 10001",
    )
    rows.add_failed(
        event_type="order.paid",
        processed_ago=5 * 60,
        last_error="mail to gina@example.com failed, order 10002",
    )
    rows.add_failed(event_type="order.old", processed_ago=3 * 60 * 60, last_error="gone")


def group_id(conn, event_type: str) -> str:
    return conn.execute(
        "SELECT group_id FROM outbox_monitor.error_groups WHERE event_type = %s", (event_type,)
    ).fetchone()["group_id"]
