"""Issue 3's "Done means", end to end: breaking an SLO gives exactly one Slack message, its
link opens the dashboard view of the fix, replaying there heals the figure, and exactly one
resolved message follows.

Real parts only: the scheduler (evaluator + sender, leadership lock) on a fresh database,
the local Slack-compatible sink behind slack-sdk's webhook client, ``streamlit run
dashboard.py`` served on a free port, and the system's headless Chromium clicking through
the page the message links to.
"""

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from outbox_monitor.alerts.message import DASHBOARD_URL_ENV
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.figures import error_grouping, metrics
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.service.serve import streamlit_command
from tests.alerting import wait_for
from tests.browser_support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ELEMENT_TIMEOUT_MS,
    guard_navigation,
    stop,
    wait_healthy,
)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ACTOR = "flow-test"
EVALUATION_INTERVAL = 1.0  # the rules file's `interval`
SENDER_INTERVAL = 0.25
SETTLE_SECONDS = 3 * EVALUATION_INTERVAL + 2 * SENDER_INTERVAL
"""After the resolve: long enough for any extra message (a repeat, a duplicate) to show."""

RULES = """
version: 1
defaults: {interval: 1s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h, send_resolved: true}
rules:
  - name: payment-failed
    metric: failed_in_window
    event_type: "payment.%"
    window: 15m
    by: [event_type]
    op: ">"
    threshold: 0
    severity: critical
    route: oncall
    summary: "{{ value }} payment event(s) dead-lettered in the last 15 min"
"""


@dataclass
class Served:
    """A ``streamlit run dashboard.py`` child; ``url`` is known before it is healthy."""

    url: str
    process: subprocess.Popen
    log_path: Path

    def wait_healthy(self) -> None:
        wait_healthy(self.url, self.process, self.log_path)


@pytest.fixture
def rules_path(tmp_path: Path) -> Path:
    path = tmp_path / "alerts.yml"
    path.write_text(RULES)
    return path


@pytest.fixture
def served(dsn: str, rules_path: Path, tmp_path: Path) -> Iterator[Served]:
    """The dashboard on this test's database, started at once (it boots while the test
    breaks the SLO); the test waits for its health check before browsing."""
    port = free_port()
    home = tmp_path / "home"
    home.mkdir()
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OUTBOX_MONITOR_", "SLACK_")) and name != "DATABASE_URL"
    }
    env.update(
        HOME=str(home),
        OUTBOX_MONITOR_DSN=dsn,
        OUTBOX_MONITOR_ACTOR=ACTOR,
        **{RULES_ENV: str(rules_path)},
    )
    log_path = tmp_path / "streamlit.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            streamlit_command(address="127.0.0.1", port=port),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield Served(f"http://127.0.0.1:{port}", process, log_path)
        finally:
            stop(process)


@pytest.fixture
def sink() -> Iterator[SlackSink]:
    with SlackSink(port=0) as server:
        yield server


def in_chromium(steps: Callable[[Page], None], timeout: float | None = None) -> None:
    """Run ``steps(page)`` in a fresh headless Chromium, in a thread of its own.

    Each step waits for its element (``ELEMENT_TIMEOUT_MS``, scaled for load); ``timeout``
    (seconds) only guards against a hang: by default 10 element waits, so a slow but
    progressing flow on a loaded machine never fails on the sum of its steps.

    Playwright's sync API refuses to start inside another running one in the same thread,
    and the browser tests' session-scoped Chromium may be running in this one.
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            with sync_playwright() as playwright:
                chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    context = guard_navigation(
                        chromium.new_context(viewport={"width": 1400, "height": 2000})
                    )
                    context.set_default_timeout(ELEMENT_TIMEOUT_MS)
                    steps(context.new_page())
                finally:
                    chromium.close()
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name="chromium", daemon=True)
    thread.start()
    thread.join(10 * ELEMENT_TIMEOUT_MS / 1000 if timeout is None else timeout)
    if thread.is_alive():
        pytest.fail(f"the Chromium steps did not finish within {timeout:g} s")
    if failure:
        raise failure[0]


def button_urls(message: dict[str, Any]) -> list[str]:
    return [block["accessory"]["url"] for block in message["blocks"] if block.get("accessory")]


def statuses(conn, ids: list[int]) -> dict[int, str]:
    found = conn.execute(
        "SELECT id, status FROM integration_outbox WHERE id = ANY(%s)", (ids,)
    ).fetchall()
    return {row["id"]: row["status"] for row in found}


def test_breaking_an_slo_fires_once_and_replaying_from_its_link_resolves_once(
    db, rows, conn, rules_path, served, sink, monkeypatch
):
    started = time.monotonic()
    ruleset = load_rules(rules_path)
    monkeypatch.setenv(DASHBOARD_URL_ENV, served.url)  # the sender builds links from it
    scheduler = build_scheduler(
        db,
        blocking=False,
        ruleset=ruleset,
        transports=transports_for(ruleset, {"SLACK_WEBHOOK_URL": sink.webhook_url}),
        sender_interval=SENDER_INTERVAL,
    )
    scheduler.start()
    try:
        inserted = time.monotonic()
        dead = [
            rows.add(
                event_type="payment.captured",
                status="failed",
                attempts=10,
                processed_ago=5,
                last_error=f"HTTP 402 card declined for charge ch_{n:08d}",
            )
            for n in range(1, 4)
        ]
        assert wait_for(sink.messages, timeout=10), "no firing message within 10 s"
        fired_after = time.monotonic() - inserted

        [firing] = sink.messages()
        assert firing["text"].count("[FIRING]") == 1  # as posted: mrkdwn-escaped (> is &gt;)
        assert (
            "[FIRING] payment-failed event_type=payment.captured (critical): "
            "3 vs threshold 0 (&gt;) — 3 payment event(s) dead-lettered in the last 15 min"
        ) in firing["text"]
        [group] = error_grouping.error_groups(db, event_type="payment.captured")
        [link] = button_urls(firing)
        assert link == (
            f"{served.url}/dead_letters?event_type=payment.captured&window=15m"
            f"&error_group={group['group_id']}"
        )

        served.wait_healthy()

        def replay_from_the_link(page: Page) -> None:
            page.goto(link)
            expect(page.get_by_role("heading", name="Dead letters")).to_be_visible()
            # pre-filtered: the failing event type, the rule's window, the error group
            expect(
                page.get_by_role("heading", name=re.compile(r"^payment\.captured · "))
            ).to_be_visible()
            expect(page).to_have_url(re.compile(f"error_group={group['group_id']}"))
            expect(page).to_have_url(re.compile(r"window=15m"))
            expect(page.get_by_text("3 failed rows in 1 error group")).to_be_visible()
            page.get_by_role("button", name="Preview replay").click()
            expect(page.get_by_text("3 rows would be replayed")).to_be_visible()
            page.get_by_role("button", name="Confirm replay of 3 rows").click()
            expect(page.get_by_text("Replayed 3 rows; 0 were no longer failed.")).to_be_visible()

        in_chromium(replay_from_the_link)

        assert statuses(conn, dead) == dict.fromkeys(dead, "pending")
        assert metrics.failed_by_event_type(db, window=900, event_type="payment.%") == {}
        assert wait_for(lambda: len(sink.messages()) >= 2, timeout=10), "no resolved message"
        time.sleep(SETTLE_SECONDS)
    finally:
        scheduler.shutdown(wait=True)

    messages = sink.messages()
    assert len(messages) == 2, [m["text"] for m in messages]
    resolved = messages[1]["text"]
    assert "[RESOLVED] payment-failed event_type=payment.captured" in resolved
    assert "[FIRING]" not in resolved
    sent = conn.execute(
        "SELECT kind, status, attempts FROM outbox_monitor.notifications ORDER BY id"
    ).fetchall()
    assert [(r["kind"], r["status"], r["attempts"]) for r in sent] == [
        ("firing", "sent", 1),
        ("resolved", "sent", 1),
    ]
    instance = conn.execute(
        "SELECT state FROM outbox_monitor.alert_instances WHERE rule = 'payment-failed'"
    ).fetchone()
    assert instance["state"] == "inactive"
    took = time.monotonic() - started
    print(
        f"\nalert flow: {len(messages)} Slack messages (1 firing, 1 resolved); "
        f"insert → firing message {fired_after:.2f} s; whole flow {took:.1f} s"
    )
