"""Issue 29 item 5 in a real browser: an operator of billing who is a viewer of orders, on
billing's Actions page, switches the sidebar to orders: no action button of orders is
offered — the navigation follows the role on orders, and the page lands on orders' Overview
(it raised "This app has encountered an error" before) — and back on billing the buttons are
there again."""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.fleet_rows import seed_fleet, write_fleet
from tests.oidc_support import Dashboard, serve
from tests.proxy_support import header_proxy

pytestmark = pytest.mark.browser

PERSON = "op@example.com"
FILE = """
version: 1
outboxes:
  - {name: orders, dsn_env: ORDERS_DSN, access: {viewers: [op@example.com]}}
  - {name: billing, dsn_env: BILLING_DSN, access: {operators: [op@example.com]}}
"""


def test_action_buttons_follow_the_role_on_the_outbox_acted_on(
    page: Page, choose, dsn, make_dsn, rows, tmp_path, monkeypatch
):
    billing = make_dsn()
    seed_fleet(dsn, billing, rows)
    path = write_fleet(tmp_path, monkeypatch, dsn, billing)
    path.write_text(FILE)
    served = Dashboard(
        "fleet", {"outboxes": str(path), "auth": "proxy", "viewers": "x@nowhere.test"}
    )
    with serve([served], tmp_path), header_proxy(served.url, {"X-Forwarded-Email": PERSON}) as url:
        page.goto(f"{url}/actions?outbox=billing")
        expect(page.get_by_role("tab", name="Replay by filter")).to_be_visible()
        page.get_by_role("tab", name="Replay by filter").click()
        expect(page.get_by_role("button", name="Preview replay")).to_be_enabled()

        choose("Outbox", "orders", within=page.locator('[data-testid="stSidebar"]'))
        expect(page).to_have_url(re.compile(r"/overview\?.*outbox=orders"))
        expect(page.get_by_text(f"Signed in as {PERSON} · viewer")).to_be_visible()
        expect(page.get_by_text("This app has encountered an error")).to_have_count(0)
        links = page.locator('[data-testid="stSidebarNav"] [data-testid="stSidebarNavLink"]')
        expect(links.filter(has_text="Actions")).to_have_count(0)
        expect(page.get_by_role("button", name="Preview replay")).to_have_count(0)

        choose("Outbox", "billing", within=page.locator('[data-testid="stSidebar"]'))
        expect(page.get_by_text(f"Signed in as {PERSON} · operator")).to_be_visible()
        expect(links.filter(has_text="Actions")).to_have_count(1)
