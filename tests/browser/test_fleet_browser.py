"""The Fleet page in a real headless Chromium (issue 16 items 2 and 6): a dashboard behind
an authenticating proxy over three outboxes in two databases; the root lands on the Fleet
page, a row's link opens that outbox's Overview, the sidebar's navigation keeps the outbox in
the URL, and the role is the one of the outbox shown (operator of orders, viewer of billing).
"""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser_support import DOCS_IMAGES, SCREEN_1440
from tests.fleet_rows import seed_fleet, write_fleet
from tests.oidc_support import Dashboard, serve
from tests.proxy_support import header_proxy

pytestmark = pytest.mark.browser

OPS = "ops@example.com"
FILE = """
version: 1
outboxes:  # ops: operator of orders (its own mapping), viewer of billing and shipping
  - {name: orders, dsn_env: ORDERS_DSN, access: {operators: [ops@example.com]}}
  - {name: shipping, dsn_env: ORDERS_DSN, table: shipping.outbox}
  - {name: billing, dsn_env: BILLING_DSN, access: {viewers: ["@example.com"]}}
  - {name: secret, dsn_env: BILLING_DSN, table: public.secret, access: {admins: [boss@example.com]}}
"""


def metric_value(page: Page, label: str) -> str:
    tile = page.locator('[data-testid="stMetric"]').filter(has_text=label)
    return tile.locator('[data-testid="stMetricValue"]').inner_text()


def navigation(page: Page) -> list[str]:
    links = page.locator('[data-testid="stSidebarNav"] [data-testid="stSidebarNavLink"]')
    expect(links.first).to_be_visible()
    return [text.strip().splitlines()[-1] for text in links.all_inner_texts()]


def test_fleet_page_links_into_each_outbox_with_its_role(
    page: Page, dsn, make_dsn, rows, tmp_path, monkeypatch, screenshot, choose
):
    billing = make_dsn()
    seed_fleet(dsn, billing, rows)
    path = write_fleet(tmp_path, monkeypatch, dsn, billing)
    path.write_text(FILE)
    served = Dashboard("fleet", {"outboxes": str(path), "auth": "proxy", "viewers": "@example.com"})
    with serve([served], tmp_path), header_proxy(served.url, {"X-Forwarded-Email": OPS}) as url:
        page.goto(url)  # the root of a fleet: its Fleet page
        expect(page.get_by_role("heading", name="Fleet")).to_be_visible()
        table = page.locator("table").filter(has_text="Queue depth")
        expect(table.locator("tbody tr")).to_have_count(3)  # no row of secret
        billing_row = table.locator("tbody tr").filter(has_text="billing")
        expect(billing_row).to_contain_text("firing")
        expect(billing_row.locator("td").nth(3)).to_have_text("1")  # queue depth
        screenshot("fleet")
        # at 1440 px with the sidebar open every column is within the main area (issue 30)
        page.set_viewport_size(SCREEN_1440)
        block = page.get_by_test_id("stMainBlockContainer").bounding_box()
        box = table.bounding_box()
        assert box["x"] + box["width"] <= block["x"] + block["width"], (box, block)
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOCS_IMAGES / "1440-fleet.png"))

        billing_row.get_by_role("link", name="billing").click()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        expect(page).to_have_url(re.compile(r"/overview\?.*outbox=billing"))
        expect(page.get_by_text(f"Signed in as {OPS} · viewer")).to_be_visible()
        expect(page.locator('[data-testid="stMetric"]').first).to_be_visible()
        assert metric_value(page, "Queue depth") == "1"
        assert "Actions" not in navigation(page)

        page.goto(f"{url}/overview?outbox=orders")  # a Slack message's link
        expect(page.get_by_text(f"Signed in as {OPS} · operator")).to_be_visible()
        expect(page.locator('[data-testid="stMetric"]').first).to_be_visible()
        assert metric_value(page, "Queue depth") == "2"
        assert navigation(page)[-1] == "Actions"
        page.locator('[data-testid="stSidebarNav"]').get_by_role(
            "link", name="Dead letters"
        ).click()
        expect(page.get_by_role("heading", name="Dead letters")).to_be_visible()
        expect(page).to_have_url(re.compile(r"/dead_letters\?.*outbox=orders"))

        choose("Outbox", "billing", within=page.locator('[data-testid="stSidebar"]'))
        expect(page).to_have_url(re.compile(r"/dead_letters\?.*outbox=billing"))
        expect(page.get_by_text(f"Signed in as {OPS} · viewer")).to_be_visible()
        assert "Actions" not in navigation(page)

        # no role on orders, the file's first: the root lands on the outboxes they may view
        with header_proxy(served.url, {"X-Forwarded-Email": "ann@example.com"}) as ann:
            page.goto(ann)
            expect(page.get_by_role("heading", name="Fleet")).to_be_visible()
            expect(table.locator("tbody tr")).to_have_count(2)  # shipping, billing
            expect(page.get_by_role("combobox", name="Outbox")).to_have_value("shipping")
        with header_proxy(served.url, {"X-Forwarded-Email": "eve@other.org"}) as eve:
            page.goto(eve)  # a role on no outbox: one page saying so
            expect(page.get_by_role("heading", name="Ask for access")).to_be_visible()
            expect(page.get_by_text("none of this dashboard's outboxes")).to_be_visible()
