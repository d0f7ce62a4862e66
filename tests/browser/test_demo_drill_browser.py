"""The demo's paging drill in a real Chromium (issue 31, "Done means"): ``outbox-monitor demo``
with its drill rules (evaluations every 2 s, tests/integration/test_demo_drill.py), then
``demo-downstream break``; the Alerts page says order.paid's ``backlog-by-type`` is inhibited
by its ``breaker-open``, and the Acknowledge button on the Slack sink's page — pressed by a
person, signed by the sink as Slack signs — turns the card ACKED."""

import re

import pytest
from playwright.sync_api import expect

from outbox_monitor.alerts.rules_file import RULES_ENV
from outbox_monitor.demo.alertmanager_run import BINARY_ENV
from outbox_monitor.demo.drill import BACKLOG_BY_TYPE, DEMO_OPERATOR, PAGED_RULE
from tests.alerting import LOADED_DEADLINE, wait_for
from tests.alertmanager_support import alertmanager_binary
from tests.browser_support import ELEMENT_TIMEOUT_MS
from tests.integration.test_demo import running_demo
from tests.integration.test_demo_drill import DRILL_DEADLINE, cards, drill_rules, inhibited
from tests.integration.test_demo_outage import BROKEN, demo_downstream

pytestmark = pytest.mark.browser


def test_the_drill_shows_the_inhibited_alert_and_a_press_acks_the_card(
    tmp_path, monkeypatch, browser
):
    environment = {RULES_ENV: str(drill_rules(tmp_path, monkeypatch))}
    environment[BINARY_ENV] = alertmanager_binary()
    with running_demo(tmp_path, environment=environment, timeout=2 * LOADED_DEADLINE) as output:
        dsn = re.search(r"database\s+(postgresql://\S+)", output).group(1)
        dashboard = re.search(r"dashboard\s+(http://127\.0\.0\.1:\d+)", output).group(1)
        downstream = re.search(r"demo-downstream break --url (\S+)", output).group(1)
        sink = re.search(r"local Slack sink (http://\S+)", output).group(1)
        assert demo_downstream(downstream, "break") == {"broken": [BROKEN]}
        assert wait_for(lambda: inhibited(dsn).get(BACKLOG_BY_TYPE), DRILL_DEADLINE, step=1)
        source = f"{PAGED_RULE} event_type={BROKEN}"
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        try:
            page = context.new_page()
            page.goto(f"{dashboard}/alerts")
            expect(page.get_by_role("heading", name="Alerts")).to_be_visible(
                timeout=4 * ELEMENT_TIMEOUT_MS
            )
            expect(
                page.get_by_text(f"{BACKLOG_BY_TYPE} event_type={BROKEN} by {source}").first
            ).to_be_visible(timeout=2 * ELEMENT_TIMEOUT_MS)
            # (the grid's state column: tests/integration/test_demo_drill.py, AppTest)

            [card] = wait_for(lambda: cards(sink), LOADED_DEADLINE, step=0.5)
            page.goto(f"{sink}/_sink/")
            item = page.locator("li").filter(has_text=f"ts={card['ts']}")
            item.get_by_role("button", name="Acknowledge").click()
            expect(page).to_have_url(f"{sink}/_sink/")  # the form's answer: back to the page
            acked = wait_for(
                lambda: cards(sink)[0]["versions"][-1]["header"].startswith(
                    f"👀 ACKED by {DEMO_OPERATOR}"
                ),
                LOADED_DEADLINE,
                step=0.2,
            )
            assert acked, cards(sink)[0]["versions"]
        finally:
            context.close()
