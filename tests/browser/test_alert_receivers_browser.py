"""The Alerts page in a real headless Chromium names a receiver that keeps failing: the
shipped route ``oncall`` whose newest message was refused for good."""

import pytest
from playwright.sync_api import expect
from psycopg.types.json import Jsonb

pytestmark = pytest.mark.browser


def test_a_failing_receiver_shows_on_the_alerts_page(dashboard, page, conn, screenshot):
    # the served dashboard reads the shipped alerts.yml: its route `oncall`
    conn.execute(
        "INSERT INTO outbox_monitor.notifications (dedupe_key, rule, instance, kind, route,"
        " payload, status, attempts, last_status, last_error)"
        " VALUES ('backlog||1|firing', 'backlog', '', 'firing', 'oncall', %s, 'failed', 1, 404,"
        " 'incoming webhook: Slack refused the message: HTTP 404 no_service')",
        (Jsonb({"summary": "Backlog: 3 rows due", "episode": 7}),),
    )
    page.goto(f"{dashboard}/alerts")
    expect(page.get_by_role("heading", name="Alerts")).to_be_visible()
    banner = page.locator('[data-testid="stAlertContentError"]').filter(has_text="keeps failing")
    expect(banner).to_contain_text("Receiver oncall (slack) keeps failing")
    expect(banner).to_contain_text("HTTP 404 no_service")
    screenshot("alerts-receiver-failing")
