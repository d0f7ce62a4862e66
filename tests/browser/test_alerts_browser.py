"""The Alerts page in a real headless Chromium: a firing rule from a real evaluation, and a
silence created through the form that shows up in the list and in Postgres."""

import re
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts.acknowledge import Press, acknowledge
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules

pytestmark = pytest.mark.browser

ACTOR = "browser-test"  # tests/browser_fixtures.py's OUTBOX_MONITOR_ACTOR


def card_declined(rows) -> int:
    """A payment.captured dead letter failed a minute ago: ``payment-failed`` fires."""
    return rows.add(
        event_type="payment.captured",
        status="failed",
        attempts=10,
        processed_ago=60,
        last_error="HTTP 402 card declined",
    )


def test_create_a_silence_on_the_alerts_page(dashboard, page, db, rows, conn, screenshot, choose):
    card_declined(rows)
    # the served dashboard runs in the repository, so it shows the shipped alerts.yml
    Evaluator(db, load_rules(SHIPPED_RULES_PATH)).run_once()

    page.goto(f"{dashboard}/alerts")
    expect(page.get_by_role("heading", name="Alerts")).to_be_visible()
    state = page.locator('[data-testid="stMetric"]').filter(has_text="Firing")
    expect(state.locator('[data-testid="stMetricValue"]')).to_have_text("1")

    page.get_by_role("tab", name="Silences").click()
    form = page.locator('[data-testid="stForm"]')
    choose("Rule", "payment-failed", within=form)
    form.get_by_role("textbox", name="Event type").fill("payment.captured")
    form.get_by_role("textbox", name="Until").fill("3h")
    form.get_by_role("textbox", name="Comment").fill("card processor maintenance")
    form.get_by_role("button", name="Create silence").click()

    expect(
        page.get_by_text(
            re.compile(r"Silence #\d+ created: rule=payment-failed, event_type=payment\.captured")
        )
    ).to_be_visible()
    expect(page.get_by_text("Active silences (1)")).to_be_visible()
    expect(page.get_by_text("event_type=payment.captured", exact=True)).to_be_visible()
    expect(
        page.get_by_role("paragraph").filter(has_text="card processor maintenance")
    ).to_be_visible()
    expect(page.get_by_role("button", name="Expire")).to_be_visible()
    [row] = conn.execute("SELECT * FROM outbox_monitor.silences").fetchall()
    assert row["matchers"] == {"rule": "payment-failed", "event_type": "payment.captured"}
    assert row["created_by"] == ACTOR
    assert abs(row["ends_at"] - row["starts_at"] - timedelta(hours=3)) < timedelta(seconds=10)
    screenshot("alerts")


def test_an_acknowledged_episode_shows_on_the_alerts_page(dashboard, page, db, rows, conn):
    card_declined(rows)
    Evaluator(db, load_rules(SHIPPED_RULES_PATH)).run_once()
    (firing,) = conn.execute(
        "SELECT id FROM outbox_monitor.notifications WHERE rule = 'payment-failed'"
    ).fetchall()
    person = Identity("alice@example.com", Role.operator, "slack")
    acknowledge(db, Press(person, "T0ALLOWED", "U0ALICE", firing["id"]))

    page.goto(f"{dashboard}/alerts")
    expect(page.get_by_role("heading", name="Alerts")).to_be_visible()
    acked = page.locator('[data-testid="stAlertContainer"]').filter(has_text="Acknowledged")
    expect(acked).to_contain_text(
        "payment-failed event_type=payment.captured acknowledged by alice@example.com"
    )
    expect(acked).to_contain_text("Slack user U0ALICE")
