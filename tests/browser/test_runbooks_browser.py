"""Issue 30 items 7 and 10 in a real headless Chromium: a firing alert's card on the Overview
opens its rule's runbook steps (the shipped alerts.yml's), the Alerts page lists every rule's,
and an event-type filter naming no event type says so and switches to the closest in one
click."""

import re

import pytest
from playwright.sync_api import expect

from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from tests.alerting import evaluate_as_scheduler

pytestmark = pytest.mark.browser


def test_the_alert_card_and_the_alerts_page_open_the_runbook(
    dashboard, page, settings, db, rows, screenshot
):
    rows.add(status="processing", created_ago=25 * 60, locked_ago=20 * 60)  # a stuck lock
    shipped = load_rules(SHIPPED_RULES_PATH)
    # the served dashboard runs in the repository, so it shows the shipped alerts.yml
    evaluate_as_scheduler(settings, db, shipped)  # the Overview reads a scheduler's states
    steps = shipped.rule("stuck-lock").runbook_steps

    page.goto(f"{dashboard}/overview")
    card = page.get_by_text(f"Runbook · stuck-lock ({len(steps)} steps)")
    expect(card).to_be_visible()
    card.click()
    expect(page.get_by_text("Refresh stuck locks → Confirm reap of N rows")).to_be_visible()
    expect(page.get_by_text("outbox-monitor reap --dry-run", exact=True)).to_be_visible()
    screenshot("runbook-card")

    page.goto(f"{dashboard}/alerts")
    expect(page.get_by_role("heading", name="Runbooks")).to_be_visible()
    for rule in shipped.rules:
        expect(
            page.get_by_text(f"Runbook · {rule.name} ({len(rule.runbook_steps)} steps)")
        ).to_be_visible()


def test_a_filter_naming_no_event_type_says_so_and_one_click_fixes_it(dashboard, page, rows):
    rows.add(event_type="order.paid")
    page.goto(f"{dashboard}/dead_letters?event_type=nope.%25")
    expect(page.get_by_text("No event type matches")).to_be_visible()
    expect(page.get_by_text("Known event types: order.paid.")).to_be_visible()

    page.goto(f"{dashboard}/dead_letters?event_type=order.payd")
    expect(page.get_by_text("Did you mean order.paid?")).to_be_visible()
    page.get_by_role("button", name="Show order.paid").click()
    expect(page).to_have_url(re.compile(r"/dead_letters\?(.*&)?event_type=order\.paid(&|$)"))
    expect(page.get_by_text("No event type matches")).to_have_count(0)
