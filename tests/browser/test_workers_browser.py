"""The Workers page in a real headless Chromium (issue 15 item 7): a worker holding rows is
listed with its locked_by (the grid's cell text, in full), a due row waiting 20 min with no
claim says so, and the /workers URL opens it."""

import pytest
from playwright.sync_api import expect

from outbox_monitor.figures.worker_sightings import record_workers

pytestmark = pytest.mark.browser

WORKER = "n8n-worker-7:wf-outbox-poller-with-a-long-workflow-id-0042"


def test_the_workers_page_lists_a_worker_and_a_silent_fleet(dashboard, page, db, rows, screenshot):
    rows.add(status="processing", locked_by=WORKER, locked_ago=1800)  # stuck for 15 min
    rows.add(status="processing", locked_by=WORKER, locked_ago=2400)
    rows.add(status="pending", created_ago=1200)
    record_workers(db)
    page.goto(f"{dashboard}/workers")
    expect(page.get_by_role("heading", name="Workers", exact=True).first).to_be_visible()
    expect(page.get_by_role("heading", name="Liveness")).to_be_visible()
    expect(
        page.get_by_text("1 row due; the latest claim, outcome or row becoming due")
    ).to_be_visible()
    expect(page.get_by_text("No claim while due")).to_be_visible()
    table = page.locator('[data-testid="stDataFrame"]')
    expect(table).to_be_visible()
    screenshot("workers")
    # the grid is a canvas: its cells' text is in the table Glide renders inside it
    cells = table.locator('table[role="grid"] td')
    expect(cells.filter(has_text=WORKER).first).to_have_text(WORKER)
