"""Breaker transitions as alerts (SPEC §5, issue 13 item 3): the shipped breaker-open rule
gives one "firing" (opened) and one "resolved" (closed) notification per episode and per
breaker's filter, re-opening after a failed probe staying one episode."""

import json
import time

from outbox_monitor import outbox
from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.message import render_notifications
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from outbox_monitor.flow import controls as flow
from tests.alerting import notifications

OPERATOR = Identity("oncall@example.com", Role.operator, "cli")
BREAKER = {
    "breaker": True,
    "breaker_min_attempts": 2,
    "breaker_ratio": 1,
    "breaker_cooldown_seconds": 1,
}


def fail_all(conn, rows, n: int, event_type: str = "crm.contact") -> None:
    for _ in range(n):
        rows.add(event_type=event_type, created_ago=0)
    due_now(conn)
    for row in outbox.claim(conn, "w1", limit=n):
        outbox.fail(conn, row["id"], "w1", "503 upstream")


def due_now(conn) -> None:
    conn.execute("UPDATE integration_outbox SET available_at = now() WHERE status = 'pending'")


def test_one_opened_and_one_closed_message_per_episode(db, conn, rows, fake_clock):
    ruleset = load_rules(SHIPPED_RULES_PATH)
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    flow.change(db, "crm.%", actor=OPERATOR, action="breaker", changes=BREAKER)
    flow.change(db, "sms.%", actor=OPERATOR, action="breaker", changes=BREAKER)
    evaluator.run_once()
    assert notifications(conn, "breaker-open") == []

    fail_all(conn, rows, 2)  # crm.% opens
    report = evaluator.run_once()
    assert report.instance("breaker-open", "event_type=crm.%").state == "firing"
    fake_clock.advance(30)
    evaluator.run_once()  # still open: nothing new

    time.sleep(1.1)  # the cool-down: a probe, which fails: open again, same episode
    due_now(conn)
    (probe,) = outbox.claim(conn, "w1")
    outbox.fail(conn, probe["id"], "w1", "503 again")
    fake_clock.advance(30)
    evaluator.run_once()

    time.sleep(2.1)  # the doubled cool-down: a probe that succeeds closes it
    due_now(conn)
    (probe,) = outbox.claim(conn, "w1")
    assert outbox.ack(conn, probe["id"], "w1")
    fake_clock.advance(30)
    evaluator.run_once()
    fake_clock.advance(150)  # past the shipped keep_firing_for (2m)
    evaluator.run_once()

    sent = notifications(conn, "breaker-open")
    assert [(n["kind"], n["payload"]["labels"]["event_type"]) for n in sent] == [
        ("firing", "crm.%"),
        ("resolved", "crm.%"),
    ]
    assert "Circuit breaker open for crm.%" in sent[0]["payload"]["summary"]


RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h, send_resolved: true}
rules:
  - name: backlog
    metric: queue_depth
    op: ">"
    threshold: 2
    severity: warning
    route: oncall
  - name: payment-failed
    metric: failed_in_window
    event_type: "payment.%"
    window: 15m
    by: [event_type]
    op: ">"
    threshold: 0
    severity: critical
    route: oncall
"""


def test_an_alert_over_held_rows_says_how_many_a_pause_holds(
    db, conn, rows, fake_clock, write_rules
):
    for _ in range(3):
        rows.add(event_type="crm.contact")
    rows.add(event_type="order.paid")
    flow.pause(db, "crm.%", actor=OPERATOR, reason="planned CRM migration")
    Evaluator(db, write_rules(RULES), clock=fake_clock).run_once()
    (firing,) = notifications(conn, "backlog")
    assert (firing["payload"]["held_rows"], firing["payload"]["held_by"]) == (3, ["pause crm.%"])
    message = render_notifications([firing], dashboard_url="https://ops.example.com")
    assert "*3 held* by flow control (pause crm.%)" in json.dumps(message.blocks)
    assert "pause_path" not in firing["payload"]  # a backlog alert links to the overview


def test_failure_and_breaker_alerts_carry_a_pre_filled_pause_link(
    db, conn, rows, fake_clock, write_rules
):
    rows.add(event_type="payment.captured", status="failed", processed_ago=60)
    Evaluator(db, write_rules(RULES), clock=fake_clock).run_once()
    (firing,) = notifications(conn, "payment-failed")
    assert firing["payload"]["pause_path"] == (
        "/controls?event_type=payment.captured&action=pause&reason=alert+payment-failed"
    )
    message = render_notifications([firing], dashboard_url="https://ops.example.com/outbox")
    assert (
        "<https://ops.example.com/outbox/controls?event_type=payment.captured&amp;action=pause"
        "&amp;reason=alert+payment-failed|Pause these events>"
    ) in json.dumps(message.blocks)
    assert "held_rows" not in firing["payload"]  # dead letters are not held rows
