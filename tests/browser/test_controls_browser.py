"""The Controls page in a real headless Chromium (issue 13 item 2): opened from an alert's
pause link, pause previewed and confirmed, the held rows shown and refused to the workers'
claim, then resumed."""

import pytest
from playwright.sync_api import expect

from outbox_monitor import outbox
from outbox_monitor.alerts.links import pause_link

pytestmark = pytest.mark.browser


def claimed_types(conn) -> list[str]:
    return sorted(row["event_type"] for row in outbox.claim(conn, "w1"))


def test_pause_from_the_page_shows_the_held_rows_then_resume(
    dashboard, page, rows, conn, screenshot
):
    for _ in range(3):
        rows.add(event_type="crm.contact", created_ago=120)
    rows.add(event_type="crm.deal", created_ago=60)
    rows.add(event_type="crm.deal", created_ago=60, available_ago=-600)  # not due: not held
    rows.add(event_type="order.paid", created_ago=30)

    page.goto(pause_link(dashboard, "crm.%", reason="CRM API down"))
    expect(page.get_by_role("heading", name="Controls", exact=True)).to_be_visible()
    expect(page.get_by_text("Pre-filled from the link: pause crm.%")).to_be_visible()
    expect(page.get_by_text("No due row is held now.")).to_be_visible()
    expect(page.get_by_text("bypasses them")).to_be_hidden()  # definitions after the data
    page.get_by_text("What controls do").click()
    expect(page.get_by_text("bypasses them")).to_be_visible()

    page.get_by_role("button", name="Preview pause").click()
    expect(page.get_by_text("matches 4 due rows now, of 2 event types")).to_be_visible()
    page.get_by_role("button", name="Confirm pause of crm.%").click()

    expect(page.get_by_text("Paused crm.%: now paused.")).to_be_visible()
    expect(page.get_by_text("4 due rows held now: crm.contact 3, crm.deal 1.")).to_be_visible()
    screenshot("controls")
    assert claimed_types(conn) == ["order.paid"]

    page.get_by_role("button", name="Preview resume").click()
    page.get_by_role("button", name="Confirm resume of crm.%").click()

    expect(page.get_by_text("Resumed crm.%")).to_be_visible()
    expect(page.get_by_text("No due row is held now.")).to_be_visible()
    assert claimed_types(conn) == ["crm.contact", "crm.contact", "crm.contact", "crm.deal"]
