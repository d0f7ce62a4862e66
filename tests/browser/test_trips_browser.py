"""What the newcomer tripped on (issue 15 item 8), in a real headless Chromium: the Overview
has a URL of its own, and ``/`` still opens it."""

import re

import pytest
from playwright.sync_api import expect

from outbox_monitor.alerts.links import OVERVIEW_PATH
from outbox_monitor.alerts.message import dashboard_link

pytestmark = pytest.mark.browser


def test_the_overview_opens_at_its_own_url_and_at_the_root(dashboard, page, rows):
    rows.add(created_ago=60)

    page.goto(dashboard_link(dashboard, f"{OVERVIEW_PATH}?window=1h&event_type=order.paid"))
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.get_by_text("Queue depth").first).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    assert page.url.startswith(f"{dashboard}/overview?") and "event_type=order.paid" in page.url

    page.goto(f"{dashboard}/?event_type=order.paid")
    expect(page).to_have_url(re.compile(r"/overview\?event_type=order.paid$"))
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.get_by_text("Queue depth").first).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    # the sidebar's Overview entry is the page shown, and it links to /overview
    link = page.locator('[data-testid="stSidebarNav"] a').filter(has_text="Overview")
    expect(link).to_have_attribute("href", re.compile(r"/overview$"))
