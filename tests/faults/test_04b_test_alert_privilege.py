"""Issue 10 item 4, least privilege: recording the "send test alert" message must not let
the operator role write notifications. With INSERT on ``outbox_monitor.notifications`` an
operator login could queue a ``pending`` row the leader's sender posts to Slack, or take
the dedupe key of a future "alerting is stalled" episode or alert transition and so
suppress the real alert (``ON CONFLICT DO NOTHING``). The test message is recorded only
through ``outbox_monitor.record_test_notification`` (SECURITY DEFINER, as
``record_audit``): kind ``test``, ``sent`` or ``failed``, a ``test|<uuid>`` dedupe key and
the database's time, all set by the function; the operator role may EXECUTE it and has no
INSERT on the table.

Real logins of ``init-db --print-grants`` (``tests.least_privilege``), the local Slack
sink, the Alerts page in AppTest.
"""

import re
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.route_check import send_test
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from outbox_monitor.config.settings import load_settings
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import rules_file
from tests.least_privilege import grant_in
from tests.ui.conftest import environment, fresh_caches, open_page  # noqa: F401 (AppTest)
from tests.ui.rendered import plain
from tests.upgrades import UNDO_SINCE_008, since

RULES = """
version: 1
defaults: {interval: 30s, for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 2, route: oncall}
"""
FUNCTION = "outbox_monitor.record_test_notification(text, jsonb, text, integer, text, text, text)"
RECORD = (
    "SELECT outbox_monitor.record_test_notification("
    "p_route => %(route)s, p_payload => %(payload)s, p_status => %(status)s, "
    "p_last_status => %(last_status)s, p_last_error => %(last_error)s, "
    "p_slack_channel => NULL, p_slack_ts => NULL) AS id"
)
# The dedupe key of the next "alerting is stalled" episode (alerts/stall.py) and of the
# next firing of rule backlog (state_machine.dedupe_key): a row holding either would make the
# real alert's INSERT … ON CONFLICT DO NOTHING skip it.
STALL_KEY = "alerting-stalled|public.integration_outbox|1/oncall|error"
FIRING_KEY = "backlog||1|firing"
FORGE = (
    "INSERT INTO outbox_monitor.notifications (dedupe_key, rule, instance, kind, route, "
    "payload, status) VALUES (%s, 'backlog', '', 'firing', 'oncall', '{}', %s)"
)
UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def connect(logins, dsn, login):
    return psycopg.connect(logins.dsn(dsn, login), row_factory=dict_row)


def fields(**changes):
    fields = {
        "route": "oncall",
        "payload": Jsonb({"summary": "test", "requested_by": "ops@example.com"}),
        "status": "sent",
        "last_status": 200,
        "last_error": None,
    }
    return {**fields, **changes}


def count(conn) -> int:
    return conn.execute("SELECT count(*) AS n FROM outbox_monitor.notifications").fetchone()["n"]


@pytest.mark.parametrize(
    ("key", "status"),
    [(STALL_KEY, "sent"), (FIRING_KEY, "sent"), ("forged|to-slack", "pending")],
)
def test_the_operator_login_cannot_insert_a_notification(dsn, logins, conn, key, status):
    with (
        connect(logins, dsn, logins.actions) as ops,
        pytest.raises(
            psycopg.errors.InsufficientPrivilege,
            match="permission denied for table notifications",
        ),
    ):
        ops.execute(FORGE, (key, status))
    assert count(conn) == 0


def test_the_operator_records_a_test_message_stamped_by_the_database(
    dsn, logins, conn, slack_sink, tmp_path
):
    ruleset = load_rules(rules_file(tmp_path, RULES))
    env = {"SLACK_WEBHOOK_URL": slack_sink.webhook_url}
    settings = load_settings(dsn=dsn, actions_dsn=logins.dsn(dsn, logins.actions))
    before = conn.execute("SELECT now() AS now").fetchone()["now"]

    with Database(settings, purpose="actions") as db:
        outcome = send_test(
            db, ruleset, requested_by="ops@example.com", transports=transports_for(ruleset, env)
        )["oncall"]

    after = conn.execute("SELECT now() AS now").fetchone()["now"]
    assert outcome["ok"] and "record_error" not in outcome, outcome
    [row] = conn.execute("SELECT * FROM outbox_monitor.notifications").fetchall()
    assert row["id"] == outcome["notification_id"]
    assert re.fullmatch(f"test\\|{UUID}", row["dedupe_key"]), row["dedupe_key"]
    assert (row["rule"], row["instance"], row["kind"], row["route"], row["status"]) == (
        "test",
        "",
        "test",
        "oncall",
        "sent",
    )
    assert (row["attempts"], row["last_status"], row["last_error"]) == (1, 200, None)
    assert before <= row["created_at"] == row["available_at"] == row["sent_at"] <= after
    assert row["payload"]["requested_by"] == "ops@example.com"
    assert len(slack_sink.messages()) == 1


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"status": "pending"}, "status"),
        ({"status": "suppressed"}, "status"),
        ({"status": None}, "status"),
        ({"route": ""}, "route"),
        ({"route": "on\ncall"}, "route"),
        ({"payload": Jsonb(["not", "an", "object"])}, "payload"),
        ({"payload": Jsonb({"summary": "x" * 5000})}, "payload"),
        ({"last_status": 42}, "last_status"),
    ],
)
def test_the_function_refuses_anything_but_a_sent_or_failed_test_message(
    dsn, logins, conn, changes, complaint
):
    with (
        connect(logins, dsn, logins.actions) as ops,
        pytest.raises(
            psycopg.errors.InvalidParameterValue, match=f"test notification: {complaint}"
        ),
    ):
        ops.execute(RECORD, fields(**changes))
    assert count(conn) == 0


def test_no_kind_dedupe_key_or_time_can_be_passed(dsn, logins, conn):
    for extra in ("p_kind => 'firing'", "p_dedupe_key => 'backlog||1|firing'", "p_at => now()"):
        with (
            connect(logins, dsn, logins.actions) as ops,
            pytest.raises(psycopg.errors.UndefinedFunction),
        ):
            ops.execute(RECORD.replace(") AS id", f", {extra}) AS id"), fields())
    assert count(conn) == 0


def test_the_viewer_and_the_scheduler_may_not_call_it(dsn, logins, conn):
    for login in (logins.read, logins.scheduler):
        with (
            connect(logins, dsn, login) as other,
            pytest.raises(
                psycopg.errors.InsufficientPrivilege,
                match="permission denied for function record_test_notification",
            ),
        ):
            other.execute(RECORD, fields())
    assert count(conn) == 0


def test_the_alerts_page_lists_the_test_message_sent_through_the_operator_login(
    open_page,  # noqa: F811
    environment,  # noqa: F811
    dsn,
    logins,
    conn,
    slack_sink,
    tmp_path: Path,
):
    environment.setenv(RULES_ENV, str(rules_file(tmp_path, RULES)))
    environment.setenv("SLACK_WEBHOOK_URL", slack_sink.webhook_url)
    environment.setenv("OUTBOX_MONITOR_DSN", logins.dsn(dsn, logins.read))
    environment.setenv("OUTBOX_MONITOR_ACTIONS_DSN", logins.dsn(dsn, logins.actions))

    at = open_page("alerts")
    at.button(key="alerts.send_test").click().run()

    assert not at.exception
    [row] = conn.execute("SELECT id, kind, status FROM outbox_monitor.notifications").fetchall()
    assert (row["kind"], row["status"]) == ("test", "sent")
    listed = [
        record
        for frame in at.dataframe
        for record in frame.value.to_dict("records")
        if {"kind", "route", "status"} <= set(record)
    ]
    assert [(int(r["id"]), r["kind"], r["route"], r["status"]) for r in listed] == [
        (row["id"], "test", "oncall", "sent")
    ]
    assert any(f"Listed under Notifications as #{row['id']}" in plain(s.value) for s in at.success)


def test_upgrading_takes_back_the_operators_insert_on_notifications(dsn, logins, conn):
    """A database of the previous version (migrations up to 004) granted with the previous
    `--print-grants` (INSERT on notifications and USAGE on its sequence for the operator):
    init-db's migration 005 takes both back and leaves the scheduler's INSERT, UPDATE; the
    new grants give the operator EXECUTE on the function, the viewer none."""
    ops, sched, viewer = logins.roles.operator, logins.roles.scheduler, logins.roles.viewer
    with psycopg.connect(dsn, autocommit=True) as su:  # back to the previous version
        su.execute(
            f"DROP FUNCTION {FUNCTION}; "
            "DROP FUNCTION outbox_monitor.refresh_error_groups(regclass, integer); "
            "DROP TABLE outbox_monitor.error_fingerprints, outbox_monitor.error_groups, "
            "outbox_monitor.error_groups_state; "
            + UNDO_SINCE_008
            + "DELETE FROM outbox_monitor.schema_migrations WHERE version >= 5"
        )
        su.execute(
            psycopg.sql.SQL(
                "GRANT INSERT ON outbox_monitor.notifications TO {0}; "
                "GRANT USAGE ON SEQUENCE outbox_monitor.notifications_id_seq TO {0}"
            ).format(psycopg.sql.Identifier(ops))
        )
    with Database(load_settings(dsn=dsn)) as db:
        assert init_db(db, create_indexes=False).applied_migrations == since(5)

    privileges = (
        "SELECT has_table_privilege(%(role)s, 'outbox_monitor.notifications', 'INSERT') "
        "AS insert, has_sequence_privilege(%(role)s, 'outbox_monitor.notifications_id_seq', "
        f"'USAGE') AS sequence, has_function_privilege(%(role)s, '{FUNCTION}', 'EXECUTE') "
        "AS execute"
    )
    roles = (ops, sched, viewer)
    upgraded = {r: conn.execute(privileges, {"role": r}).fetchone() for r in roles}
    grant_in(dsn, logins)  # the new version's --print-grants
    granted = {r: conn.execute(privileges, {"role": r}).fetchone() for r in roles}

    assert upgraded == {
        ops: {"insert": False, "sequence": False, "execute": False},
        sched: {"insert": True, "sequence": True, "execute": False},
        viewer: {"insert": False, "sequence": False, "execute": False},
    }
    assert granted == {
        ops: {"insert": False, "sequence": False, "execute": True},
        sched: {"insert": True, "sequence": True, "execute": False},
        viewer: {"insert": False, "sequence": False, "execute": False},
    }


def test_a_transaction_held_open_does_not_back_date_the_test_message(dsn, logins, conn):
    """Stamped with the time of the call (clock_timestamp()), not the caller's
    transaction start: a login holding a transaction open 2 s cannot back-date it."""
    with connect(logins, dsn, logins.actions) as ops:
        started = ops.execute("SELECT now() AS t").fetchone()["t"]
        ops.execute("SELECT pg_sleep(2)")
        before = ops.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        ops.execute(RECORD, fields())
        after = ops.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        ops.commit()

    [row] = conn.execute(
        "SELECT created_at, available_at, sent_at FROM outbox_monitor.notifications"
    ).fetchall()
    assert before <= row["created_at"] == row["available_at"] == row["sent_at"] <= after
    assert (row["created_at"] - started).total_seconds() >= 2.0
