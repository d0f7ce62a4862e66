"""The Health page in a real headless Chromium (issue 14 item 1): a session left idle in a
transaction is named on the page with its application and the command that ends it; the
command, run as the page says, clears it."""

import pytest
from playwright.sync_api import expect

from outbox_monitor.ui.health import NOTABLE_HOLD
from tests.alerting import wait_for
from tests.health import idle_in_transaction

pytestmark = pytest.mark.browser


def test_the_health_page_names_the_holder_of_the_horizon(dashboard, page, dsn, conn, screenshot):
    with idle_in_transaction(dsn, "forgotten-report") as pid:
        # named on the page once held longer than a running statement's hold
        held_long = (
            "SELECT clock_timestamp() - xact_start > make_interval(secs => %s) AS held "
            "FROM pg_stat_activity WHERE pid = %s"
        )
        assert wait_for(
            lambda: conn.execute(held_long, (NOTABLE_HOLD, pid)).fetchone()["held"],
            timeout=NOTABLE_HOLD + 10,  # a wall-clock age: it comes ≈ 1 s after the BEGIN
        )
        page.goto(f"{dashboard}/health")
        expect(page.get_by_role("heading", name="Health", exact=True)).to_be_visible()
        expect(page.get_by_text("The xmin horizon has been held for")).to_be_visible()
        expect(
            page.get_by_text(f"session pid {pid} (forgotten-report, idle in transaction").first
        ).to_be_visible()
        command = f"SELECT pg_terminate_backend({pid});"
        expect(page.locator('[data-testid="stCode"]').filter(has_text=command)).to_be_visible()
        expect(page.get_by_role("heading", name="Dead tuples and vacuum")).to_be_visible()
        screenshot("health")

        conn.execute(command)  # as the page says, by hand
        page.reload()
        expect(page.get_by_text("Nothing holds the xmin horizon now")).to_be_visible()
