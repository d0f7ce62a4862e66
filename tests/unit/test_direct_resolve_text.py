"""The resolve of one of the scheduler's own alerts posted straight to Slack (database
unreachable, writes failing: ``outage.direct_row``, no value and no threshold) says what
happened, not "no value now vs threshold no value (?)" (seen in Slack after each of four
outages of a real scheduler)."""

from datetime import UTC, datetime

from outbox_monitor.alerts.notification_text import fallback_line, section_text
from outbox_monitor.alerts.outage import direct_row

SINCE = datetime(2026, 12, 3, 23, 50, tzinfo=UTC)


def _resolve() -> dict:
    return direct_row(
        "database-unreachable",
        "vm:3600",
        episode="7",
        route="oncall",
        kind="resolved",
        summary="outbox-monitor reaches the database postgres@db:5432/app again",
        error="outbox-monitor cannot reach the database postgres@db:5432/app",
        since=SINCE,
        outbox="",
    )


def test_the_resolve_of_a_direct_alert_has_no_empty_figure():
    row = _resolve()
    assert fallback_line(row, "resolved") == (
        "[RESOLVED] database-unreachable vm:3600 — outbox-monitor reaches the database "
        "postgres@db:5432/app again"
    )
    section = section_text(row, kind="resolved", now=SINCE)
    assert "no value" not in section and "vs threshold" not in section, section


def test_a_rule_resolve_with_a_threshold_keeps_its_figure():
    row = _resolve()
    row["payload"] = {**row["payload"], "threshold": 600, "op": ">", "value": None}
    line = fallback_line(row, "resolved")
    assert ": no value now vs threshold 10m 0s (&gt;)" in line, line
