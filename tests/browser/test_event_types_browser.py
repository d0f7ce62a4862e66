"""The Overview's table by event type in a real headless Chromium (issue 15 item 1): it
renders each type's status, the rule that set it with a chosen row, and its link opens Dead letters
pre-filtered on that type."""

import pytest
from playwright.sync_api import expect

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from tests.browser_support import choose_row

pytestmark = pytest.mark.browser


def test_the_table_shows_statuses_with_their_rules_and_links(dashboard, page, db, rows, screenshot):
    # the dashboard runs in the repository: its alerts.yml is the shipped one
    for ago in (120, 60):
        rows.add_failed(event_type="payment.captured", created_ago=400, processed_ago=ago)
    rows.add(event_type="notification.email", created_ago=1200)  # 20 min > 5 min: late
    rows.add(event_type="order.paid", created_ago=30)
    Evaluator(db, load_rules(SHIPPED_RULES_PATH)).run_once()

    page.goto(dashboard)
    expect(page.get_by_role("heading", name="By event type", exact=True)).to_be_visible()
    grid = page.locator('[data-testid="stDataFrame"]').filter(has_text="payment.captured")
    expect(grid).to_be_visible()
    for text in ("failing", "backlogged", "notification.email", "order.paid"):
        expect(grid.get_by_text(text, exact=True).first).to_be_attached()
    screenshot("overview-by-event-type")
    # the rule that set a status is in the chosen row's detail (the key columns fit at 1440 px)
    texts = grid.locator('table[role="grid"] tbody tr[role="row"]').all_inner_texts()
    choose_row(page, grid, next(i for i, text in enumerate(texts) if "payment.captured" in text))
    detail = page.get_by_test_id("stExpander").filter(has_text="status set by")
    # each rule named with its scope
    expect(detail).to_contain_text("payment-failed [payment.%, per event type, over 15m]")

    # the grid's accessible table holds each cell's value: the link column's is its URL
    row = grid.locator('tr[role="row"]').filter(has_text="payment.captured")
    link = row.locator("td").filter(has_text="dead_letters?")
    expect(link).to_have_text("dead_letters?event_type=payment.captured&window=1h")
    page.goto(f"{dashboard}/{link.inner_text()}")
    expect(page.get_by_role("heading", name="Dead letters")).to_be_visible()
    expect(page.get_by_text("payment.captured").filter(visible=True).first).to_be_visible()
