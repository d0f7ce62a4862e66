"""Issue 10 item 4: the "send test alert" message (the Alerts page button and
``outbox-monitor alerts test``) appears in the Alerts page's notifications with its
outcome, is never posted again by the sender, and leaves alert state and dedupe alone.

The page runs in AppTest on the suite's real Postgres; Slack is the local sink.
"""

from pathlib import Path

import pytest
from click.testing import CliRunner

from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.cli import main
from outbox_monitor.demo.slack_sink import SlackSink
from tests.ui.conftest import environment, fresh_caches, open_page  # noqa: F401 (AppTest)
from tests.ui.rendered import plain

RULES = """
version: 1
defaults: {interval: 30s, for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 2, route: oncall}
"""


@pytest.fixture
def rules_path(environment, tmp_path: Path, slack_sink: SlackSink) -> Path:  # noqa: F811
    path = tmp_path / "alerts.yml"
    path.write_text(RULES)
    environment.setenv(RULES_ENV, str(path))
    environment.setenv("SLACK_WEBHOOK_URL", slack_sink.webhook_url)
    return path


def notification_rows(conn) -> list[dict]:
    return conn.execute(
        "SELECT id, rule, instance, kind, route, status, attempts, last_status, last_error, "
        "sent_at IS NOT NULL AS sent, payload FROM outbox_monitor.notifications ORDER BY id"
    ).fetchall()


def listed(at) -> list[dict]:
    """The Notifications tab's table (the page's second dataframe after State)."""
    for frame in at.dataframe:
        records = frame.value.to_dict("records")
        if records and {"kind", "route", "status", "attempts"} <= set(records[0]):
            return records
    return []


def alert_state(conn) -> tuple[int, int]:
    instances = conn.execute("SELECT count(*) AS n FROM outbox_monitor.alert_instances")
    transitions = conn.execute("SELECT count(*) AS n FROM outbox_monitor.alert_transitions")
    return instances.fetchone()["n"], transitions.fetchone()["n"]


def test_the_button_lists_the_posted_test_message_which_is_never_sent_again(
    open_page,  # noqa: F811
    rules_path,
    slack_sink,
    conn,
    db,
):
    at = open_page("alerts")
    at.button(key="alerts.send_test").click().run()

    assert not at.exception
    assert len(slack_sink.messages()) == 1
    [row] = notification_rows(conn)
    assert (row["kind"], row["rule"], row["instance"], row["route"]) == (
        "test",
        "test",
        "",
        "oncall",
    )
    assert (row["status"], row["attempts"], row["last_status"], row["sent"]) == (
        "sent",
        1,
        200,
        True,
    )
    assert row["payload"]["requested_by"] == "ui-test"
    [shown] = listed(at)
    assert (int(shown["id"]), shown["kind"], shown["route"], shown["status"]) == (
        row["id"],
        "test",
        "oncall",
        "sent",
    )
    assert any(f"Listed under Notifications as #{row['id']}" in plain(s.value) for s in at.success)

    ruleset = load_rules(rules_path)
    env = {"SLACK_WEBHOOK_URL": slack_sink.webhook_url}
    counts = deliver_due(db, ruleset, transports=transports_for(ruleset, env), env=env)
    assert counts["attempts"] == 0  # the sender never posts it again
    assert len(slack_sink.messages()) == 1
    assert alert_state(conn) == (0, 0)  # no alert instance, no transition


def test_a_refused_test_message_is_listed_as_failed_with_its_status(
    open_page,  # noqa: F811
    rules_path,
    slack_sink,
    conn,
):
    slack_sink.fail_next(1, status=500)
    at = open_page("alerts")
    at.button(key="alerts.send_test").click().run()

    assert not at.exception
    assert slack_sink.messages() == []
    [row] = notification_rows(conn)
    assert (row["kind"], row["status"], row["last_status"], row["sent"]) == (
        "test",
        "failed",
        500,
        False,
    )
    assert "HTTP 500" in row["last_error"]
    [shown] = listed(at)
    assert (shown["kind"], shown["status"], str(shown["last_status"])) == ("test", "failed", "500")
    assert any("failed (HTTP 500)" in plain(e.value) for e in at.error)


def test_alerts_test_command_records_its_message(rules_path, slack_sink, conn):
    result = CliRunner().invoke(main, ["alerts", "test", "--actor", "ops@example.com"])
    assert result.exit_code == 0, result.output
    [row] = notification_rows(conn)
    assert (row["kind"], row["route"], row["status"]) == ("test", "oncall", "sent")
    assert row["payload"]["requested_by"] == "ops@example.com"
    assert f"(notification #{row['id']})" in result.stdout
    assert len(slack_sink.messages()) == 1
