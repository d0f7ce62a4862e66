"""One trend per series and badges that say whose verdict they are (issue 30 items 3 and 4) in
a real headless Chromium: the queue-depth tile states the trend once with its window, the
per-type table says the same, and a badge names the scope of the rules it shows (the
dashboard runs in the repository: the shipped alerts.yml)."""

import pytest
from playwright.sync_api import expect

from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from tests.alerting import evaluate_as_scheduler
from tests.sampler_rows import sampler_pass

pytestmark = pytest.mark.browser


def test_the_trend_is_stated_once_and_badges_name_their_scope(
    dashboard, page, rows, settings, db, conn, screenshot
):
    for _ in range(10):  # 10 due now
        rows.add(event_type="order.paid", created_ago=600)
    rows.add_failed(event_type="order.paid", processed_ago=3600)  # not payment.%
    for ago, depth in ((600, 4), (300, 7), (0, 10)):  # +3 per 5 min: +0.60 rows/min
        sampler_pass(conn, ago, depth, types={"order.paid": (depth, 0)})
    evaluate_as_scheduler(settings, db, load_rules(SHIPPED_RULES_PATH))

    page.goto(dashboard)

    trend = page.get_by_text("Trend over 15m: +0.60 rows/min · drains never", exact=True)
    expect(trend).to_be_visible()
    expect(page.get_by_text("ok for all types: 10", exact=True)).to_be_visible()  # backlog
    # payment-failed watches payment.% over 15 min: it says nothing of this 24 h tile
    expect(page.get_by_text("no rule watches this", exact=True).first).to_be_visible()
    screenshot("overview-one-trend")
    grid = page.locator('[data-testid="stDataFrame"]').filter(has_text="order.paid")
    expect(grid.get_by_text("+0.60 rows/min", exact=True)).to_be_attached()
    expect(grid.get_by_text("trend (15m)", exact=True)).to_be_attached()
