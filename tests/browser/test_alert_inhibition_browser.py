"""The Alerts page in a real headless Chromium marks an inhibited alert with what inhibits
it (issue 31 item 4): the served dashboard reads the shipped alerts.yml, whose `inhibit`
mutes every per-type alert of the outbox while its `alerting-stalled` alert is open."""

import pytest
from playwright.sync_api import expect

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from tests.alerting import open_stall_episode

pytestmark = pytest.mark.browser


def test_the_alerts_page_marks_an_inhibited_alert(dashboard, page, db, rows, conn, screenshot):
    open_stall_episode(db, db.fetch_one("db_now")["now"])
    rows.add_failed(event_type="payment.captured")
    report = Evaluator(db, load_rules(SHIPPED_RULES_PATH)).run_once()
    source = f"alerting-stalled {db.table_name}"
    assert report.instance("payment-failed", "event_type=payment.captured").inhibited_by == source
    [row] = conn.execute(
        "SELECT status, payload->>'inhibited_by' AS why FROM outbox_monitor.notifications"
        " WHERE rule = 'payment-failed'"
    ).fetchall()
    assert (row["status"], row["why"]) == ("suppressed", source)

    page.goto(f"{dashboard}/alerts")
    expect(page.get_by_role("heading", name="Alerts")).to_be_visible()
    firing = page.locator('[data-testid="stMetric"]').filter(has_text="Firing")
    expect(firing.locator('[data-testid="stMetricValue"]')).to_have_text("1")
    expect(
        page.get_by_text(f"Inhibited (1): payment-failed event_type=payment.captured by {source}")
    ).to_be_visible()
    grid = page.locator('[data-testid="stDataFrame"]').first
    # the grid's accessible table holds each cell's value
    expect(grid.get_by_text(f"FIRING · inhibited by {source}", exact=True)).to_be_attached()
    screenshot("alerts-inhibited")
