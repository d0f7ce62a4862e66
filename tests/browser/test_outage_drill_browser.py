"""The demo's outage drill in a real Chromium (issue 30, "Done means"): ``outbox-monitor
demo``, then ``demo-downstream break`` on order.paid; the Overview's first screen (1440×900)
says what is wrong — the failing type, its retry error's text, since when, one trend, the
breaker and the likely cause — and its Controls link opens the type's controls. The
screenshot is kept in the docs (docs/images/overview-outage.png, `make docs-images`)."""

import re
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from outbox_monitor.demo.outage import OUTAGE_ERROR
from tests.browser_support import DOCS_IMAGES, ELEMENT_TIMEOUT_MS
from tests.integration.test_demo import running_demo
from tests.integration.test_demo_outage import BROKEN, demo_downstream

pytestmark = pytest.mark.browser

SCREENSHOT = DOCS_IMAGES / "overview-outage.png"
DRILL_DEADLINE_MS = 4 * ELEMENT_TIMEOUT_MS
"""From the break to a line naming its cause and trend: the breaker opens within a minute
(tests/integration/test_demo_outage.py) and the trend needs three samples of the type (one
each 5 s); under load, several times that."""


def test_the_outage_drills_first_screen_says_what_is_wrong(tmp_path, browser):
    with running_demo(tmp_path) as output:
        dashboard = re.search(r"dashboard\s+(http://127\.0\.0\.1:\d+)", output).group(1)
        url = re.search(r"demo-downstream break --url (\S+)", output).group(1)
        assert demo_downstream(url, "break") == {"broken": [BROKEN]}
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        try:
            page = context.new_page()
            page.goto(f"{dashboard}/overview")
            main = page.locator('[data-testid="stMain"]')
            line = (
                main.locator('[data-testid="stMarkdown"]')
                .filter(has_text=f"{BROKEN} — ")
                .filter(has_text="likely cause: downstream failing")
                .filter(has_text="breaker open")
                .filter(has_text=re.compile(r"(growing|draining) [\d.,]+/min|steady"))
                .first
            )
            expect(line).to_be_visible(timeout=DRILL_DEADLINE_MS)
            expect(line).to_be_in_viewport()  # the first screen, no scrolling
            text = line.inner_text()
            assert f"retrying with “DownstreamError: {OUTAGE_ERROR}”" in text
            # the clock time; the date too when the trouble began on an earlier UTC day (the
            # drill run across midnight)
            since = re.search(r"since (?:(\d{4}-\d\d-\d\d) )?\d\d:\d\d UTC \(", text)
            assert since, text
            assert since.group(1) is None or since.group(1) < f"{datetime.now(UTC):%Y-%m-%d}", text
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))  # the viewport: what the first screen shows

            line.get_by_role("link", name="Controls", exact=True).click()
            expect(page).to_have_url(re.compile(r"/controls\?event_type=order\.paid$"))
            expect(page.get_by_role("heading", name="Controls").first).to_be_visible()
            expect(page.get_by_text(BROKEN).first).to_be_visible()
        finally:
            context.close()
