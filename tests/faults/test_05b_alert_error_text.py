"""Issue 10 item 5 for alerting ("never silent"): error text that Postgres cannot hold
never loses an alert state or a notification.

Postgres ``text`` (and ``jsonb``) cannot carry U+0000 and UTF-8 cannot carry a lone
surrogate. Slack's error answers reach the notification table (``last_error``) and an
evaluation error reaches ``alert_instances.error``, the transition's detail and the
error message's payload: each is cleaned as the worker API cleans ``last_error``
(``errors.clean_error``: U+FFFD for each, cut on a character boundary), so the row is
written and delivery goes on.

Slack is the local sink answering HTTP 500 with the bad character in its body (a webhook
answers plain text: U+0000; the Web API answers JSON, whose ``\\ud800`` escape decodes to
a lone surrogate). Postgres never sends either character in an error, so the evaluation
error is injected where a measurement raises: ``measure.measure`` of one rule raises an
exception carrying both (as a driver or a bug might); the database stays real.
"""

import pytest

from outbox_monitor.alerts import measure
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.route_check import send_test
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.alerts.sender import SEND_INTERVAL_SECONDS, deliver_due
from outbox_monitor.demo.slack_sink import DEFAULT_TOKEN
from tests.alerting import rules_file

FFFD = "\ufffd"
RULES = """
version: 1
defaults: {interval: 30s, for: 0s}
routes:
  hook: {webhook_url_env: SLACK_WEBHOOK_URL}
  bot: {channel: "#alerts"}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1, route: ROUTE}
"""
BROKEN_RULES = """
version: 1
defaults: {interval: 30s, for: 0s}
routes:
  hook: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1, route: hook}
  - {name: broken, metric: stuck_locks, op: ">", threshold: 0, route: hook}
"""


def slack_env(sink) -> dict[str, str]:
    return {
        "SLACK_WEBHOOK_URL": sink.webhook_url,
        "SLACK_BOT_TOKEN": DEFAULT_TOKEN,
        "SLACK_API_URL": sink.api_url,
    }


def notification_rows(conn) -> list[dict]:
    return conn.execute(
        "SELECT id, rule, kind, route, status, attempts, last_status, last_error, payload "
        "FROM outbox_monitor.notifications ORDER BY id"
    ).fetchall()


@pytest.mark.parametrize(
    ("route", "answer", "what"),
    [
        ("hook", "bad\x00gateway", "incoming webhook"),  # a plain-text body with U+0000
        ("bot", "bad\ud800gateway", "chat.postMessage to #alerts"),  # JSON "\ud800"
    ],
    ids=["webhook-nul", "web-api-lone-surrogate"],
)
def test_a_slack_error_with_a_bad_character_is_recorded_and_delivery_goes_on(
    db, conn, rows, slack_sink, fake_clock, tmp_path, route, answer, what
):
    for ago in (60, 30):
        rows.add(created_ago=ago)
    ruleset = load_rules(rules_file(tmp_path, RULES.replace("ROUTE", route)))
    transports = transports_for(ruleset, slack_env(slack_sink))
    Evaluator(db, ruleset, clock=fake_clock).run_once()
    slack_sink.fail_next(1, status=500, error=answer)

    first = deliver_due(db, ruleset, clock=fake_clock, transports=transports)
    [failed] = notification_rows(conn)
    fake_clock.advance(SEND_INTERVAL_SECONDS)
    second = deliver_due(db, ruleset, clock=fake_clock, transports=transports)
    [sent] = notification_rows(conn)

    assert (first["retrying"], first["sent"]) == (1, 0)
    assert (failed["status"], failed["attempts"], failed["last_status"]) == ("pending", 1, 500)
    assert failed["last_error"] == f"{what}: Slack error HTTP 500 bad{FFFD}gateway"
    assert (second["sent"], sent["status"], sent["attempts"]) == (1, "sent", 2)
    assert len(slack_sink.messages()) == 1


def test_a_refused_test_message_with_a_bad_character_is_listed_as_failed(
    db, conn, slack_sink, tmp_path
):
    ruleset = load_rules(rules_file(tmp_path, RULES.replace("ROUTE", "hook")))
    slack_sink.fail_next(1, status=500, error="bad\x00gateway")

    outcome = send_test(
        db,
        ruleset,
        "hook",
        requested_by="ops@example.com",
        transports=transports_for(ruleset, slack_env(slack_sink)),
    )["hook"]

    assert outcome["ok"] is False and "record_error" not in outcome, outcome
    [row] = notification_rows(conn)
    assert row["id"] == outcome["notification_id"]
    assert (row["kind"], row["status"], row["last_status"]) == ("test", "failed", 500)
    assert row["last_error"] == f"incoming webhook: Slack error HTTP 500 bad{FFFD}gateway"
    assert outcome["error"] == row["last_error"]


def test_an_evaluation_error_with_a_bad_character_is_stored_and_sent(
    db, conn, rows, slack_sink, fake_clock, tmp_path, monkeypatch
):
    for ago in (60, 30):
        rows.add(created_ago=ago)
    ruleset = load_rules(rules_file(tmp_path, BROKEN_RULES))
    measured = measure.measure

    def measure_or_fail(database, rule):
        if rule.name == "broken":
            raise RuntimeError("bad value 'a\x00b' \ud800 in the rule's query")
        return measured(database, rule)

    monkeypatch.setattr(measure, "measure", measure_or_fail)
    report = Evaluator(db, ruleset, clock=fake_clock).run_once()
    counts = deliver_due(
        db, ruleset, clock=fake_clock, transports=transports_for(ruleset, slack_env(slack_sink))
    )

    text = f"RuntimeError: bad value 'a{FFFD}b' {FFFD} in the rule's query"
    assert {(i.rule, i.state) for i in report.instances} == {
        ("backlog", "firing"),
        ("broken", "error"),
    }
    stored = conn.execute(
        "SELECT state, error FROM outbox_monitor.alert_instances WHERE rule = 'broken'"
    ).fetchone()
    assert stored == {"state": "error", "error": text}
    detail = conn.execute(
        "SELECT detail FROM outbox_monitor.alert_transitions WHERE rule = 'broken'"
    ).fetchone()["detail"]
    assert detail == f"evaluation failed: {text}"
    by_rule = {row["rule"]: row for row in notification_rows(conn)}
    assert by_rule["broken"]["kind"] == "error"
    assert by_rule["broken"]["payload"]["error"] == text
    assert {row["status"] for row in by_rule.values()} == {"sent"}
    assert counts["sent"] == 2
    assert any(FFFD in message["text"] for message in slack_sink.messages())
