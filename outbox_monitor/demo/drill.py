"""The demo's paging drill (issue 31, "Done means"): during ``demo-downstream break``, order.paid's
``breaker-open`` pages — one PagerDuty incident, the alert in a real Alertmanager, one Slack
card with buttons that go FIRING → ACKED → RESOLVED — while its per-type backlog and latency
alerts are inhibited.

What the demo adds for it (``DrillReceivers``, ``add_drill``, ``start_slack_listener``):

- a local PagerDuty (``fake_receivers.FakePagerDuty``: Events API v2, its incidents on its
  page), named to the rules by ``PAGERDUTY_ROUTING_KEY`` and ``PAGERDUTY_EVENTS_URL``;
- a real Alertmanager when its binary is there (``alertmanager_run``; ``make alertmanager``),
  named by ``ALERTMANAGER_URLS``; without it the banner says so and no route names it;
- the rules (``add_drill``, on the demo's copy of alerts.yml): ``breaker-open`` is critical
  (an ERP down pages), critical alerts go to PagerDuty, Alertmanager and Slack (branches with
  ``continue``), and two per-type warnings, ``backlog-by-type`` and ``latency-by-type``, which
  the shipped ``inhibit`` entry mutes while their type's breaker is open;
- with the local Slack sink: the routes post through the bot token (``chat.postMessage``, so
  a card can be edited) and the listener of Slack's presses runs with a demo signing secret,
  a demo Slack user mapped to an operator; the sink presses the buttons as Slack does
  (``POST /_sink/press``, or its page ``/_sink/``).
"""

import os
from pathlib import Path
from typing import Any

from outbox_monitor.alerts.slack_actions import SIGNING_SECRET_ENV, SlackActions, after_acknowledge
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.demo.alertmanager_run import LocalAlertmanager, find_alertmanager
from outbox_monitor.demo.fake_receivers import FakePagerDuty
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.service.slack_listener import SlackListener
from outbox_monitor.store.db import Database

PAGERDUTY_KEY_ENV = "PAGERDUTY_ROUTING_KEY"
PAGERDUTY_URL_ENV = "PAGERDUTY_EVENTS_URL"
ALERTMANAGER_URLS_ENV = "ALERTMANAGER_URLS"
DEMO_ROUTING_KEY = "demo0routing0key0000000000000000"
"""The routing key of the demo's PagerDuty integration (its fake refuses any other)."""
DEMO_SIGNING_SECRET = "demo-signing-secret-0123456789abcdef"
"""The demo Slack app's signing secret: the listener checks it, the sink signs with it."""
DEMO_TEAM, DEMO_USER, DEMO_OPERATOR = "T0DEMO", "U0ONCALL", "oncall@demo.example"
"""The demo's Slack team, the user who presses, and the operator that user is mapped to."""
DEMO_CHANNEL = "#alerts"
PAGED_RULE = "breaker-open"
BACKLOG_BY_TYPE, LATENCY_BY_TYPE = "backlog-by-type", "latency-by-type"
CRITICAL_ROUTES = ("pagerduty", "alertmanager", "oncall-critical")
"""The routes a critical alert takes, in order (``alertmanager`` only when it runs)."""

PER_TYPE_RULES: tuple[dict[str, Any], ...] = (
    {
        "name": BACKLOG_BY_TYPE,
        "metric": "queue_depth",
        "by": ["event_type"],
        "op": ">",
        "threshold": 100,
        "keep_firing_for": "0s",
        "severity": "warning",
        "route": "oncall",
        "summary": "{{ event_type }}: {{ value }} rows due and unclaimed",
        "runbook": (
            "1. Open the Overview filtered on the type: what holds its rows (Controls: a "
            "pause or an open breaker; Workers: none claiming).\n"
            "2. Its breaker is open: this alert is inhibited by breaker-open; follow that "
            "runbook.\n"
            "3. Over at the next evaluation once 100 rows or fewer are due.\n"
        ),
    },
    {
        "name": LATENCY_BY_TYPE,
        "metric": "latency_p95",
        "window": "5m",
        "by": ["event_type"],
        "op": ">",
        "threshold": "1m",
        "keep_firing_for": "0s",
        "severity": "warning",
        "route": "oncall",
        "summary": "{{ event_type }}: P95 created→processed latency {{ value }} over 5 min",
        "runbook": (
            "1. Open the Overview filtered on the type with the window 1h: when its rows "
            "became late, and why (retries, a pause, a breaker).\n"
            "2. Rows held by an open breaker are processed late once it closes: their latency "
            "is the outage's, said by breaker-open.\n"
            "3. Over once the late rows leave the 5-minute window.\n"
        ),
    },
)
"""The demo's per-type warnings: each instance has an ``event_type`` label, so the shipped
``inhibit`` entry (``breaker-open`` → ``event_type: "%"``, ``equal: [event_type]``) mutes the
broken type's while its breaker-open fires (the outbox-wide ``backlog`` and ``latency-slo``
have no ``event_type``: never muted)."""


def add_drill(document: dict[str, Any], *, channel: str | None, alertmanager: bool) -> None:
    """Make the demo's copy of alerts.yml (a parsed document, changed in place) page for the
    drill: ``breaker-open`` critical, the per-type warnings (``PER_TYPE_RULES``), and the
    ``oncall`` route's critical branches to PagerDuty, Alertmanager and Slack.

    Args:
        document: the rules file as ``config.yaml_files.parse_yaml`` reads it (the shipped one).
        channel: the Slack channel posted to with the bot token (the local sink: cards that
            can be edited); ``None``: ``oncall`` stays as it is (your Slack variables).
        alertmanager: whether an Alertmanager runs (else no route names one).
    """
    for rule in document["rules"]:
        if rule["name"] == PAGED_RULE:
            rule["severity"] = "critical"
    document["rules"].extend(dict(rule) for rule in PER_TYPE_RULES)
    routes = document["routes"]
    if channel is not None:
        routes["oncall"] = {
            "channel": channel,
            **{k: v for k, v in routes["oncall"].items() if k != "webhook_url_env"},
        }
    critical = [name for name in CRITICAL_ROUTES if alertmanager or name != "alertmanager"]
    routes["oncall-critical"] = dict(routes["oncall"])
    routes["pagerduty"] = {
        "type": "pagerduty",
        "routing_key_env": PAGERDUTY_KEY_ENV,
        "url_env": PAGERDUTY_URL_ENV,
    }
    if alertmanager:
        routes["alertmanager"] = {
            "type": "alertmanager",
            "alertmanager_urls_env": ALERTMANAGER_URLS_ENV,
        }
    routes["oncall"] = {
        **routes["oncall"],
        "routes": [
            {"matchers": {"severity": "critical"}, "route": name, "continue": name != critical[-1]}
            for name in critical
        ],
    }


class DrillReceivers:
    """The drill's PagerDuty (always) and Alertmanager (when found), started into
    ``folder`` with their variables set in this process's environment (which the
    dashboard inherits)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pagerduty: FakePagerDuty | None = None
        self.alertmanager: LocalAlertmanager | None = None
        self.alertmanager_missing = ""

    def start(self) -> "DrillReceivers":
        """Start both; returns ``self``.

        Raises:
            OutboxMonitorError: the Alertmanager found did not start (its log's end).
        """
        self.pagerduty = FakePagerDuty(DEMO_ROUTING_KEY)
        os.environ[PAGERDUTY_KEY_ENV] = DEMO_ROUTING_KEY
        os.environ[PAGERDUTY_URL_ENV] = self.pagerduty.url
        binary = find_alertmanager()
        if binary is None:
            self.alertmanager_missing = (
                "not started: no prometheus-alertmanager binary (`make alertmanager` unpacks "
                "Debian's); critical alerts page PagerDuty and Slack only"
            )
            return self
        self.alertmanager = LocalAlertmanager(binary, self.folder / "alertmanager").start()
        os.environ[ALERTMANAGER_URLS_ENV] = self.alertmanager.url
        return self

    def stop(self) -> None:
        """Stop both (idempotent)."""
        if self.pagerduty is not None:
            self.pagerduty.close()
            self.pagerduty = None
        if self.alertmanager is not None:
            self.alertmanager.stop()
            self.alertmanager = None

    def banner_lines(self) -> tuple[str, ...]:
        """The banner's lines for them."""
        pagerduty = self.pagerduty.url if self.pagerduty is not None else "(stopped)"
        alertmanager = (
            f"{self.alertmanager.url} (its alerts: {self.alertmanager.url}/api/v2/alerts)"
            if self.alertmanager is not None
            else self.alertmanager_missing
        )
        return (
            f"  pagerduty  {pagerduty} (a local Events API v2: its incidents; JSON at /incidents)",
            f"  alertmgr   {alertmanager}",
        )


def start_slack_listener(
    settings: Settings, sink: SlackSink, ruleset: Any, transports: Any
) -> tuple[SlackListener, Database, Settings]:
    """The listener of Slack's presses for the demo's sink: the demo's signing secret, team
    and user (``DEMO_TEAM``/``DEMO_USER`` = ``DEMO_OPERATOR``, an operator), the answers to
    presses posted back to the sink, the card edited and PagerDuty acknowledged
    (``after_acknowledge``); on a free port of 127.0.0.1. The sink is told to press there.

    Args:
        settings: the demo's settings (its DSN is the actions DSN too: the demo's superuser).
        sink: the demo's Slack sink.
        ruleset, transports: the scheduler's (``load_alerting``).

    Returns:
        The listener, started; its Database of actions (close it after ``stop``); and the
        scheduler's settings: the demo's with the listener's (its port set, so that the
        messages carry the buttons, ``message_delivery``).

    Raises:
        ConfigError: as ``SlackActions.from_settings`` and ``SlackListener.start``.
    """
    listening = {
        "dsn": settings.dsn,
        "actions_dsn": settings.dsn,
        "slack_actions_teams": (DEMO_TEAM,),
        "slack_actions_people": (f"{DEMO_TEAM}/{DEMO_USER}={DEMO_OPERATOR}",),
        "slack_actions_response_url": sink.url + "/",
        "operators": (DEMO_OPERATOR,),
        "lock_timeout": settings.lock_timeout,
        "sample_interval": settings.sample_interval,
    }
    actions_settings = load_settings(**listening)
    db = Database(actions_settings, purpose="actions")
    try:
        actions = SlackActions.from_settings(
            actions_settings,
            db,
            {SIGNING_SECRET_ENV: DEMO_SIGNING_SECRET},
            on_acknowledged=after_acknowledge(ruleset, transports),
        )
        listener = SlackListener(
            actions,
            address="127.0.0.1",
            port=0,
            max_body=actions_settings.slack_actions_max_body,
        ).start()
    except OutboxMonitorError:
        db.close()
        raise
    sink.accept_presses(listener.url, DEMO_SIGNING_SECRET, team=DEMO_TEAM, user=DEMO_USER)
    return listener, db, load_settings(**listening, slack_actions_port=listener.port)
