"""The Alerts page says which Alertmanager refuses alerts (issue 31 item 1): an episode
opened by the real receiver and its health check (a closed port, 3 intervals on the
receiver's clock) shows as a red line naming the URL and the error; once a real Alertmanager
starts on that port, the next post resolves it and the line is gone."""

from datetime import timedelta
from pathlib import Path

import streamlit as st
from rendered import plain

from outbox_monitor.alerts.alertmanager import AlertmanagerReceiver, alertmanager_urls
from outbox_monitor.alerts.alertmanager_health import AlertmanagerHealth
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from outbox_monitor.demo.pgcluster import free_port
from tests.alertmanager_support import running_alertmanager

RULES = """
version: 1
defaults: {{interval: 1s, for: 0s, keep_firing_for: 0s}}
routes:
  am: {{type: alertmanager, alertmanager_urls: [{url}]}}
rules:
  - {{name: backlog, metric: queue_depth, op: ">", threshold: 0, route: am}}
"""


def banners(open_page) -> list[str]:
    """The page's "refuses alerts" lines, read afresh (the loaders' cache cleared)."""
    st.cache_data.clear()
    at = open_page("alerts")
    assert not at.exception
    return [plain(e.value) for e in at.error if "refuses alerts" in plain(e.value)]


def test_an_alertmanager_refusing_alerts_is_named_on_the_alerts_page(
    open_page, environment, tmp_path: Path, db, rows, fake_clock
):
    port = free_port()
    url = f"http://127.0.0.1:{port}"  # nothing listens yet: connection refused
    path = tmp_path / "alerts.yml"
    path.write_text(RULES.format(url=url))
    environment.setenv(RULES_ENV, str(path))
    ruleset = load_rules(path)
    rows.add(event_type="order.paid")
    Evaluator(db, ruleset).run_once()
    receiver = AlertmanagerReceiver(
        db,
        ruleset,
        alertmanager_urls(ruleset),
        interval=1.0,
        clock=fake_clock,
        health=AlertmanagerHealth(db, ruleset, interval=1.0, clock=fake_clock),
    )
    receiver.evaluated().join()  # posts at once: refused
    assert receiver.status.urls()[0].failures_total == 1
    assert banners(open_page) == []

    fake_clock.advance(3)
    receiver.run_once()
    [banner] = banners(open_page)
    failing_since = (fake_clock() - timedelta(seconds=3)).isoformat(timespec="seconds")
    assert banner.startswith(
        f"**Alertmanager {url} refuses alerts**: connection refused (failing since "
        f"{failing_since}); alerted at "
    )
    assert "Its alerts there end 4 evaluation intervals" in banner

    with running_alertmanager(tmp_path / "am", port=port):  # it starts: the next post works
        receiver.run_once()
        assert banners(open_page) == []
