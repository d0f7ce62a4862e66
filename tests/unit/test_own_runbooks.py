"""The scheduler's own alerts carry runbook steps as the shipped rules do (issue 30 item 10):
static text within a rule's limit, in their Slack message as a rule's runbook shows
(``notification_text.runbook_section``: numbered, escaped), none in a resolve; the page "When
the scheduler pages" is generated from them (``tests/unit/test_reference.py`` holds it
current)."""

import json
from datetime import UTC, datetime

import pytest

from outbox_monitor.alerts import (
    alertmanager_health,
    outage,
    own_runbooks,
    receiver_health,
    replica_lag,
    stall,
    write_health,
)
from outbox_monitor.alerts.message import render_notifications
from outbox_monitor.alerts.rule_values import MAX_RUNBOOK_LENGTH
from outbox_monitor.alerts.rules import steps_of

SINCE = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)
PAGING = [
    outage.RULE_NAME,
    stall.RULE_NAME,
    replica_lag.RULE_NAME,
    write_health.RULE_NAME,
    receiver_health.RULE_NAME,
    alertmanager_health.RULE_NAME,
]


def test_every_own_alert_that_pages_has_numbered_steps_within_a_rules_limit():
    by_name = {alert.name: alert for alert in own_runbooks.OWN_ALERTS}
    for name in PAGING:
        runbook = by_name[name].runbook
        assert runbook is not None and len(runbook) <= MAX_RUNBOOK_LENGTH, name
        found = own_runbooks.steps(name)
        # one step per numbered line, the wrapped lines joined to it
        numbered = [line for line in runbook.splitlines() if line[:1].isdigit()]
        assert len(found) == len(numbered) >= 4, name
        assert found == list(steps_of(runbook))
        assert all("\n" not in step and "  " not in step for step in found), name
        assert found[-1].startswith("Over when"), name


def direct(rule: str, kind: str) -> dict:
    return outage.direct_row(
        rule,
        "vm:3600",
        episode="7",
        route="oncall",
        kind=kind,
        summary="outbox-monitor cannot reach the database postgres@db:5432/app",
        error="connection refused <!channel> & co",
        since=SINCE,
        outbox="",
    )


@pytest.mark.parametrize("rule", [outage.RULE_NAME, write_health.RULE_NAME])
def test_a_direct_alerts_slack_message_shows_its_runbook_steps(rule):
    message = render_notifications([direct(rule, "error")], now=SINCE)

    texts = [b["text"]["text"] for b in message.blocks if b.get("type") == "section"]
    [runbook] = [t for t in texts if t.startswith("📋 ")]
    steps = own_runbooks.steps(rule)
    lines = runbook.splitlines()
    assert lines[0] == f"📋 *Runbook · {rule}*"
    assert len(lines) == len(steps) + 1
    for number, (line, step) in enumerate(zip(lines[1:], steps, strict=True), 1):
        assert line.startswith(f"{number}. ")
        # escaped for Slack's mrkdwn as a rule's steps are (nothing here needs more than &<>)
        expected = step.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert line == f"{number}. {expected}"


def test_a_direct_alerts_resolve_has_no_runbook():
    row = direct(outage.RULE_NAME, "resolved")
    assert row["payload"]["runbook"] == []
    message = render_notifications([row], now=SINCE)
    assert "Runbook" not in json.dumps(message.blocks, ensure_ascii=False)
