"""Issue 29 item 3 in a real headless Chromium, the fleet case: two outboxes with different
roles (``op@example.com`` an operator of ``orders``; everyone of ``@example.com`` a viewer of
``billing``) behind an authenticating proxy.

On main, ``op\\xad@example.com`` (a soft hyphen) got the viewer role of billing from the raw
value, was then cleaned to ``op@example.com`` and given orders' operator role under that
name: it paused ``shipment.created`` on orders, audited as ``op@example.com``. Now that value
gets no identity on any outbox (a WARNING names the header), and the clean name gets each
outbox's own role, shown and audited as exactly the name the proxy sent.

The proxy is ``tests.proxy_support.HeaderProxy``: Playwright's ``extra_http_headers`` are not
sent on Chromium's websocket handshake, which is where Streamlit reads the headers.
"""

import psycopg
import pytest
from playwright.sync_api import Page, expect

from outbox_monitor.alerts.links import pause_link
from tests.fleet_rows import write_fleet
from tests.oidc_support import Dashboard, serve
from tests.proxy_support import header_proxy, log_line

pytestmark = pytest.mark.browser

OPERATOR = "op@example.com"
SOFT_HYPHEN = "op\xad@example.com"
FILE = """
version: 1
outboxes:
  - {name: orders, dsn_env: ORDERS_DSN, access: {operators: [op@example.com]}}
  - {name: billing, dsn_env: BILLING_DSN, access: {viewers: ["@example.com"]}}
"""


def _audit(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT actor, action FROM outbox_monitor.audit_log ORDER BY id"
        ).fetchall()


def test_an_invisible_byte_gets_no_role_on_any_outbox_and_a_clean_name_is_audited_as_sent(
    page: Page, dsn, make_dsn, rows, tmp_path, monkeypatch
):
    billing = make_dsn()
    for _ in range(2):
        rows.add(event_type="shipment.created", created_ago=60)
    path = write_fleet(tmp_path, monkeypatch, dsn, billing)
    path.write_text(FILE)
    served = Dashboard(
        "fleet", {"outboxes": str(path), "auth": "proxy", "viewers": "x@nowhere.test"}
    )
    pause = pause_link("", "shipment.created") + "&outbox=orders"
    with serve([served], tmp_path):
        with header_proxy(served.url, {"X-Forwarded-Email": SOFT_HYPHEN}) as url:
            page.goto(url + pause)
            expect(page.get_by_role("heading", name="No identity")).to_be_visible()
            expect(page.get_by_text("cannot be a name as it is")).to_be_visible()
            expect(page.get_by_text("Signed in as")).to_have_count(0)
            expect(page.get_by_role("button", name="Preview pause")).to_have_count(0)
            page.goto(f"{url}/overview?outbox=billing")  # the outbox its raw value maps on
            expect(page.get_by_role("heading", name="No identity")).to_be_visible()
            expect(page.get_by_text("Queue depth")).to_have_count(0)
        line = log_line(tmp_path / "fleet.log", "WARNING", "X-Forwarded-Email header", "U+00AD")
        assert line is not None, (tmp_path / "fleet.log").read_text()[-2000:]
        assert _audit(dsn) == [] and _audit(billing) == []

        with header_proxy(served.url, {"X-Forwarded-Email": OPERATOR}) as url:
            page.goto(url + pause)
            expect(page.get_by_text(f"Signed in as {OPERATOR} · operator")).to_be_visible()
            page.get_by_role("button", name="Preview pause").click()
            page.get_by_role("button", name="Confirm pause of shipment.created").click()
            expect(page.get_by_text("Paused shipment.created: now paused.")).to_be_visible()
            page.goto(f"{url}/overview?outbox=billing")
            expect(page.get_by_text(f"Signed in as {OPERATOR} · viewer")).to_be_visible()
    assert _audit(dsn) == [(OPERATOR, "pause")]
    assert _audit(billing) == []
