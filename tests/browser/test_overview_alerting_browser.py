"""The Overview's firing alerts in a real headless Chromium (issue 15 item 3): a stuck lock
evaluated by the shipped rules shows as its instance, with the badge of its rule, and the
link opens that instance on the Alerts page."""

import pytest
from playwright.sync_api import expect

from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from tests.alerting import evaluate_as_scheduler

pytestmark = pytest.mark.browser


def test_the_firing_section_shows_the_instance(dashboard, page, rows, settings, db, screenshot):
    rows.add(status="processing", created_ago=25 * 60, locked_ago=20 * 60)  # a stuck lock
    evaluate_as_scheduler(settings, db, load_rules(SHIPPED_RULES_PATH))

    page.goto(dashboard)
    expect(page.get_by_role("heading", name="Firing alerts")).to_be_visible()
    shown = page.get_by_text("stuck-lock [all types]: 1 vs > 0", exact=False).filter(visible=True)
    expect(shown.first).to_be_visible()
    expect(page.get_by_text("FIRING for all types: 1", exact=True)).to_be_visible()  # badge
    screenshot("overview-firing-alerts")

    page.get_by_role("link", name="Open alert").click()
    expect(page.get_by_role("heading", name="Alerts", exact=True)).to_be_visible()
    expect(page.get_by_text("as linked from the Overview")).to_be_visible()
    assert "rule=stuck-lock" in page.url
