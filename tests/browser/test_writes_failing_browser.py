"""Issue 29 item 7 in a real browser: while the leading scheduler's writes fail (a test-owned
trigger raising SQLSTATE 53100 "disk full" on every table it writes, reads untouched), the
Overview shows "The scheduler cannot write"; once writes work again and the resolve is
posted, the banner is gone."""

import pytest
from playwright.sync_api import Page, expect

from outbox_monitor.demo.slack_sink import SlackSink
from tests.alerting import (
    Scheduler,
    fail_writes,
    rules_file,
    stuck_lock_rules,
    subprocess_env,
    wait_for,
    writes_work_again,
)

pytestmark = pytest.mark.browser

BANNER = "The scheduler cannot write"


def writes_messages(sink: SlackSink) -> list[dict]:
    return [m for m in sink.messages() if "writes-failing" in m["text"]]


def test_the_overview_says_the_scheduler_cannot_write(
    dashboard, page: Page, dsn, conn, logins, slack_sink: SlackSink, tmp_path, screenshot
):
    env = subprocess_env(
        logins.dsn(dsn, logins.scheduler), SLACK_WEBHOOK_URL=slack_sink.webhook_url
    )
    scheduler = Scheduler(env, rules_file(tmp_path, stuck_lock_rules("0.5s")), tmp_path / "s.log")
    try:
        evaluated = wait_for(
            lambda: conn.execute(
                "SELECT count(*) AS n FROM outbox_monitor.leader_leases"
                " WHERE evaluated_at IS NOT NULL"
            ).fetchone()["n"],
            timeout=60,
        )
        assert evaluated, scheduler.output
        fail_writes(conn)
        assert wait_for(lambda: writes_messages(slack_sink), timeout=60), scheduler.output
        page.goto(f"{dashboard}/overview")
        expect(page.get_by_text(BANNER)).to_be_visible()
        screenshot("writes-failing-banner")
        writes_work_again(conn)
        assert wait_for(lambda: len(writes_messages(slack_sink)) == 2, timeout=60)
        page.goto(f"{dashboard}/overview")
        # the tiles render after the banners: once they show, the banner would have too
        expect(page.get_by_text("Queue depth", exact=True).first).to_be_visible()
        expect(page.get_by_text(BANNER)).to_have_count(0)
    finally:
        scheduler.stop()
