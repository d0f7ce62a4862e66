"""Issue 31 item 1 in a real browser, with a real scheduler process and Alertmanager: the
scheduler posts to an Alertmanager that is down; after 3 intervals the Alerts page says
"refuses alerts" (``/healthz`` and ``/metrics`` already did); once the Alertmanager starts on
that port it holds the firing alert and the Watchdog, and the banner is gone."""

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from outbox_monitor.demo.pgcluster import free_port
from tests.alerting import LOADED_DEADLINE, Scheduler, rules_file, subprocess_env, wait_for
from tests.alertmanager_support import active_alerts, running_alertmanager

pytestmark = pytest.mark.browser

BANNER = "refuses alerts"


def test_the_alerts_page_says_an_alertmanager_refuses_alerts_until_it_accepts_them(
    dashboard, page: Page, dsn, conn, rows, tmp_path: Path
):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    rules = f"""
version: 1
defaults: {{interval: 0.5s, for: 0s, keep_firing_for: 0s}}
routes:
  am: {{type: alertmanager, alertmanager_urls: [{url}]}}
rules:
  - {{name: backlog, metric: queue_depth, by: [event_type], op: ">", threshold: 0, route: am}}
"""
    rows.add(event_type="order.paid")
    scheduler = Scheduler(subprocess_env(dsn), rules_file(tmp_path, rules), tmp_path / "s.log")
    try:

        def healthz() -> str:
            try:
                return scheduler.get("/healthz")[1]
            except OSError:  # not serving yet
                return ""

        notice = wait_for(
            lambda: f"ok: alertmanager {url} failing since" in healthz(), LOADED_DEADLINE, 0.2
        )
        assert notice, scheduler.output
        assert "alert(s) failed: connection refused" in scheduler.output
        assert "connection refused" in healthz()
        failures = scheduler.get("/metrics")[1]
        assert f'outbox_monitor_alertmanager_post_failures_total{{url="{url}"}}' in failures

        page.goto(f"{dashboard}/alerts")
        expect(page.get_by_text(BANNER)).to_be_visible()
        expect(page.get_by_text(url).first).to_be_visible()

        with running_alertmanager(tmp_path / "am", port=port):
            held = wait_for(
                lambda: sorted(a["labels"]["alertname"] for a in active_alerts(url)),
                LOADED_DEADLINE,
            )
            assert held == ["Watchdog", "backlog"], scheduler.output
            page.goto(f"{dashboard}/alerts")
            # the state tiles render after the banners: once they show, the banner would too
            expect(page.get_by_text("Evaluation errors", exact=True).first).to_be_visible()
            expect(page.get_by_text(BANNER)).to_have_count(0)
    finally:
        scheduler.stop()
