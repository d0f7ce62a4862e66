"""A ``type: alertmanager`` route (issue 31 item 1): validated with the route and field named;
its URLs from the file or a variable; the alerts it posts keep one label set per instance
whatever the event type's length (item 2's fingerprint part). No database: the rows are
``alertmanager_instances`` rows written by hand."""

from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from outbox_monitor.alerts.alertmanager import (
    alertmanager_urls,
    bounded_labels,
    instance_alert,
    shown_url,
    watchdog_alert,
)
from outbox_monitor.alerts.message_key import alert_key
from outbox_monitor.cli import main
from outbox_monitor.errors import ConfigError
from tests.alerting import rules_file
from tests.unit.test_reference import refused
from tests.unit.test_rules import only_problem, variant

AM = {"type": "alertmanager", "alertmanager_urls": ["http://am-1:9093", "http://am-2:9093/"]}


def with_am(route: dict) -> object:
    def change(data: dict) -> None:
        data["routes"]["am"] = route
        data["rules"][0]["route"] = "am"

    return change


MALFORMED = [
    pytest.param(
        {"type": "alertmanager"},
        "routes.am: a type: alertmanager route needs exactly one of alertmanager_urls",
        id="no-urls",
    ),
    pytest.param(
        {**AM, "alertmanager_urls_env": "AM_URLS"},
        "routes.am: a type: alertmanager route needs exactly one of alertmanager_urls",
        id="both-urls",
    ),
    pytest.param(
        {**AM, "channel": "#alerts"},
        "routes.am.channel: only a slack route takes channel (this route's type is alertmanager)",
        id="slack-field",
    ),
    pytest.param(
        {**AM, "repeat_interval": "1h"},
        "routes.am: a type: alertmanager route takes no repeat_interval (Alertmanager's own",
        id="repeat-interval",
    ),
    pytest.param(
        {"type": "alertmanager", "alertmanager_urls": ["am:9093"]},
        "routes.am.alertmanager_urls: expected an http:// or https:// URL without a query, "
        'got "am:9093"',
        id="not-a-url",
    ),
    pytest.param(
        {"type": "alertmanager", "alertmanager_urls": []},
        "routes.am.alertmanager_urls: expected a list of Alertmanager URLs",
        id="empty-list",
    ),
    pytest.param(
        {"type": "opsgenie"},
        'routes.am.type: expected one of slack, pagerduty, webhook, alertmanager, got "opsgenie"',
        id="unknown-type",
    ),
    pytest.param(
        {"alertmanager_urls": ["http://am:9093"]},
        "routes.am: only an alertmanager route takes alertmanager_urls (this route's type is "
        "slack)",
        id="urls-on-slack",
    ),
]


@pytest.mark.parametrize(("route", "expected"), MALFORMED)
def test_a_malformed_alertmanager_route_names_the_route_and_field(tmp_path, route, expected):
    problem = only_problem(tmp_path, with_am(route))
    assert problem.startswith(expected), problem


def test_urls_from_the_file_or_a_variable_and_a_missing_variable_stops_the_start(write_rules):
    ruleset = write_rules(variant(with_am(AM)))
    assert ruleset.routes["oncall"].type == "slack"  # without the field: today's route
    assert ruleset.message_routes == ["oncall", "payments"]
    assert alertmanager_urls(ruleset, {}) == {"am": ("http://am-1:9093", "http://am-2:9093")}

    from_env = write_rules(
        variant(with_am({"type": "alertmanager", "alertmanager_urls_env": "AM_URLS"}))
    )
    env = {"AM_URLS": " http://u:p@am-1:9093 , https://am-2/prefix/ "}
    assert alertmanager_urls(from_env, env) == {
        "am": ("http://u:p@am-1:9093", "https://am-2/prefix")
    }
    with pytest.raises(ConfigError, match="route am: AM_URLS is not set"):
        alertmanager_urls(from_env, {})
    with pytest.raises(ConfigError, match="AM_URLS holds a value that is not an http") as error:
        alertmanager_urls(from_env, {"AM_URLS": "secret-token"})
    assert "secret-token" not in str(error.value)
    assert shown_url("http://u:p@am-1:9093/x?q=1") == "http://am-1:9093/x"


def row(event_type: str, **fields) -> dict:
    started = datetime(2026, 12, 4, 6, 0, 0, 123456, tzinfo=UTC)
    return {
        "rule": "payment-failed",
        "instance": f"event_type={event_type}",
        "labels": {
            "rule": "payment-failed",
            "severity": "critical",
            "event_type": event_type,
            "team": "",
        },
        "state": "firing",
        "value": 3.0,
        "error": None,
        "episode_id": 41,
        "firing_seq": 1,
        "started_at": started,
        "resolved_at": None,
        **fields,
    }


def test_one_label_set_per_instance_bounded_and_apart(write_rules):
    ruleset = write_rules(variant(lambda d: None))
    now = datetime(2026, 12, 4, 6, 1, tzinfo=UTC)
    ends = now + timedelta(seconds=120)

    def alert(r: dict) -> dict:
        made = instance_alert(
            ruleset, r, outbox="", ends_at=ends, dashboard_url="https://ops.example"
        )
        assert made is not None
        return made

    firing = alert(row("payment.captured"))
    assert firing["labels"] == {
        "alertname": "payment-failed",
        "event_type": "payment.captured",
        "rule": "payment-failed",
        "severity": "critical",
    }  # the empty label left out, as Prometheus does
    assert firing["startsAt"] == "2026-12-04T06:00:00.123Z"
    assert firing["endsAt"] == "2026-12-04T06:03:00.000Z"
    assert firing["annotations"]["summary"] == (
        "3 payment.captured dead-lettered (payment-failed > 0)"
    )
    assert firing["annotations"]["alert_key"] == alert_key(
        "", "payment-failed", "event_type=payment.captured", 41
    )
    assert firing["generatorURL"] == (
        "https://ops.example/dead_letters?event_type=payment.captured&window=15m"
    )
    # the same instance later (another value, error, resolved): the same labels
    resolved_at = now - timedelta(seconds=5)
    later = alert(row("payment.captured", value=0.0, resolved_at=resolved_at, state="inactive"))
    error = alert(row("payment.captured", state="error", error="statement timeout"))
    assert later["labels"] == error["labels"] == firing["labels"]
    assert later["endsAt"] == "2026-12-04T06:00:55.000Z"
    assert error["annotations"]["description"] == (
        "payment-failed cannot be measured: statement timeout"
    )

    long_a, long_b = "p" * 100_000 + "a", "p" * 100_000 + "b"
    a, b = alert(row(long_a)), alert(row(long_b))
    assert len(a["labels"]["event_type"]) == len(b["labels"]["event_type"]) == 200
    assert a["labels"]["event_type"].startswith("p" * 191 + "…")
    assert a["labels"] != b["labels"]
    assert alert(row(long_a))["labels"] == a["labels"]
    assert all(len(text) <= 4000 for text in a["annotations"].values())
    assert (
        instance_alert(
            ruleset, row("x", rule="gone"), outbox="", ends_at=ends, dashboard_url="http://d"
        )
        is None
    )


def test_the_watchdog_carries_the_outbox_labels_and_severity_none():
    since = datetime(2026, 12, 4, 5, 0, tzinfo=UTC)
    watchdog = watchdog_alert(
        {"outbox": "orders", "team": "payments"},
        since=since,
        ends_at=since + timedelta(minutes=2),
        dashboard_url="http://d",
    )
    assert watchdog["labels"] == {
        "alertname": "Watchdog",
        "outbox": "orders",
        "severity": "none",
        "team": "payments",
    }
    assert bounded_labels({"b": 1, "a": ""}) == {"b": "1"}


def test_validate_names_the_alertmanagers_without_credentials(tmp_path, monkeypatch):
    monkeypatch.delenv("OUTBOX_MONITOR_OUTBOXES", raising=False)
    routes = {
        "am": {"type": "alertmanager", "alertmanager_urls": ["http://am-1:9093"]},
        "am-env": {"type": "alertmanager", "alertmanager_urls_env": "AM_URLS"},
    }
    data = variant(lambda d: d["routes"].update(routes))
    path = rules_file(tmp_path, data)
    result = CliRunner().invoke(main, ["alerts", "validate", "--rules", str(path)])
    assert result.exit_code == 0, result.output
    assert (
        "route(s): oncall ($SLACK_WEBHOOK_URL), payments (#payments-alerts), "
        "am (alertmanager http://am-1:9093), am-env (alertmanager $AM_URLS);"
    ) in result.output


@pytest.mark.parametrize(("route", "expected"), MALFORMED)
def test_the_schema_refuses_each_malformed_alertmanager_route(route, expected):
    assert refused("alerts", variant(with_am(route))), f"the loader says {expected!r}"


def test_the_schema_takes_the_valid_routes():
    for route in (AM, {"type": "alertmanager", "alertmanager_urls_env": "AM_URLS"}, {}):
        assert refused("alerts", variant(with_am(route))) == []
