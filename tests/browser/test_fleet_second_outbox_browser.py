"""A person whose only role is on an outbox other than the fleet file's first (issue 16
item 6): the root lands on the Fleet page listing that outbox, not on "Ask for access"; a link
to the first outbox says they have no role there (their role elsewhere does not carry over)."""

import pytest
from playwright.sync_api import Page, expect

from tests.fleet_rows import seed_fleet, write_fleet
from tests.oidc_support import Dashboard, serve
from tests.proxy_support import header_proxy

pytestmark = pytest.mark.browser

BILLER = "biller@example.com"
FILE = """
version: 1
outboxes:
  - {name: orders, dsn_env: ORDERS_DSN, access: {viewers: [ops@example.com]}}
  - {name: billing, dsn_env: BILLING_DSN, access: {operators: [biller@example.com]}}
"""


def test_a_role_on_the_second_outbox_only_opens_the_fleet_page(
    page: Page, dsn, make_dsn, rows, tmp_path, monkeypatch
):
    billing = make_dsn()
    seed_fleet(dsn, billing, rows)
    path = write_fleet(tmp_path, monkeypatch, dsn, billing)
    path.write_text(FILE)
    served = Dashboard(
        "fleet", {"outboxes": str(path), "auth": "proxy", "viewers": "x@nowhere.test"}
    )
    with serve([served], tmp_path), header_proxy(served.url, {"X-Forwarded-Email": BILLER}) as url:
        page.goto(url)
        expect(page.get_by_role("heading", name="Fleet")).to_be_visible()
        table = page.locator("table").filter(has_text="Queue depth")
        expect(table.locator("tbody tr")).to_have_count(1)
        expect(table.locator("tbody tr")).to_contain_text("billing")
        expect(page.get_by_text(f"Signed in as {BILLER} · operator")).to_be_visible()

        page.goto(f"{url}/actions?outbox=orders")  # a link to the outbox they have no role on
        expect(page.get_by_text("has no role on the outbox")).to_be_visible()
        expect(page.get_by_role("button", name="Preview replay")).to_have_count(0)
        expect(page.get_by_role("button", name="Preview prune")).to_have_count(0)
