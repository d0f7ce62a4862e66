"""alerts.yml loading: the shipped SPEC §3 rules, and every malformed variant named precisely."""

import copy
from pathlib import Path
from typing import Any

import pytest

from outbox_monitor.alerts.rules_file import (
    RULES_ENV,
    SHIPPED_RULES_PATH,
    RulesError,
    load_rules,
    resolve_rules_path,
)
from outbox_monitor.errors import ConfigError
from tests.alerting import rules_file

WEBHOOK = "https://hooks.slack.com/services/T0000/B0000/abcdefghijklmnop"
BOT_TOKEN = "xoxb-1234567890-abcdefghij"

VALID: dict[str, Any] = {
    "version": 1,
    "defaults": {"interval": "30s", "for": "1m", "keep_firing_for": "2m"},
    "routes": {
        "oncall": {"webhook_url_env": "SLACK_WEBHOOK_URL", "repeat_interval": "4h"},
        "payments": {"channel": "#payments-alerts", "mention": "<!subteam^S0123>"},
    },
    "rules": [
        {
            "name": "backlog",
            "metric": "queue_depth",
            "op": ">",
            "threshold": 1000,
            "for": "10m",
            "route": "oncall",
        },
        {
            "name": "payment-failed",
            "metric": "failed_in_window",
            "event_type": "payment.%",
            "window": "15m",
            "op": ">",
            "threshold": 0,
            "by": ["event_type"],
            "severity": "critical",
            "route": "payments",
            "summary": "{{ value }} {{ event_type }} dead-lettered ({{ rule }} > {{ threshold }})",
            "runbook_url": "https://runbooks.example/{{ rule }}?type={{ event_type }}",
        },
        {
            "name": "retry-pressure",
            "metric": "attempts_at_least",
            "attempts": 5,
            "op": ">=",
            "threshold": 10,
            "route": "oncall",
        },
    ],
}


def problems_of(tmp_path: Path, data: Any) -> list[str]:
    """Every problem line of the error, the file name stripped."""
    path = rules_file(tmp_path, data)
    with pytest.raises(RulesError) as caught:
        load_rules(path)
    prefix = f"{path}: "
    assert all(line.startswith(prefix) for line in caught.value.problems)
    return [line.removeprefix(prefix) for line in caught.value.problems]


def variant(change) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    change(data)
    return data


def only_problem(tmp_path: Path, change) -> str:
    """The one problem line of ``VALID`` changed by ``change`` (fails if there are more)."""
    problems = problems_of(tmp_path, variant(change))
    assert len(problems) == 1, problems
    return problems[0]


# ------------------------------------------------------------------ the shipped file


def test_shipped_alerts_yml_encodes_spec_section_3_exactly():
    ruleset = load_rules(SHIPPED_RULES_PATH)
    assert ruleset.version == 1
    assert (ruleset.defaults.interval, ruleset.defaults.for_) == (30, 0)
    assert ruleset.defaults.keep_firing_for == 120
    assert {rule.name: rule.route for rule in ruleset.rules} == {
        "notifications-late": "oncall",
        "backlog": "oncall",
        "payment-failed": "oncall",
        "latency-slo": "oncall",
        "stuck-lock": "oncall",
        "breaker-open": "oncall",  # issue 13: SPEC §5 breaker transitions
        "xmin-horizon-held": "oncall",  # issue 14: the table's health
        "slot-holds-horizon": "oncall",
        "vacuum-overdue": "oncall",
        "claim-plan-degraded": "oncall",  # issue 14: the workers' claim plan
        "no-claim-while-due": "oncall",  # issue 15: the worker fleet is down
    }
    route = ruleset.routes["oncall"]
    assert (route.webhook_url_env, route.channel, route.transport) == (
        "SLACK_WEBHOOK_URL",
        None,
        "webhook",
    )
    assert (route.repeat_interval, route.send_resolved) == (4 * 3600, True)

    def shape(name: str) -> tuple:
        rule = ruleset.rule(name)
        return (rule.metric, rule.event_type, rule.window, rule.op, rule.threshold, rule.for_)

    # SPEC §3: notifications late: oldest_pending_age of notification.% > 5 min
    assert shape("notifications-late") == (
        "oldest_pending_age",
        "notification.%",
        None,
        ">",
        300,
        0,
    )
    # backlog: queue_depth > 1,000 for 10 min
    assert shape("backlog") == ("queue_depth", None, None, ">", 1000, 600)
    # payment failed: failed_in_window of payment.%, window 15 min, > 0
    assert shape("payment-failed") == ("failed_in_window", "payment.%", 900, ">", 0, 0)
    assert ruleset.rule("payment-failed").by == ("event_type",)
    # latency SLO: latency_p95, window 1 h, > 2 min
    assert shape("latency-slo") == ("latency_p95", None, 3600, ">", 120, 0)
    # stuck lock: stuck_locks > 0
    assert shape("stuck-lock") == ("stuck_locks", None, None, ">", 0, 0)
    # SPEC §5: a breaker open (or half-open), one instance per breaker's filter
    assert shape("breaker-open") == ("breaker_open", None, None, ">", 0, 0)
    assert ruleset.rule("breaker-open").by == ("event_type",)
    # issue 14: the xmin horizon held 10 min; dead > live tuples, no vacuum for 1 h
    assert shape("xmin-horizon-held") == ("xmin_horizon_age", None, None, ">", 600, 0)
    assert shape("slot-holds-horizon") == (
        "inactive_slots_holding_horizon",
        None,
        None,
        ">",
        0,
        600,
    )
    assert shape("vacuum-overdue") == ("vacuum_overdue", None, None, ">", 3600, 0)
    # issue 14: the claim's plan walks non-pending rows or its cost jumped, for 5 min
    assert shape("claim-plan-degraded") == ("claim_plan_degraded", None, None, ">", 0, 300)
    # issue 15: rows due, no claim and no outcome for 10 min (the value is how long: no for)
    assert shape("no-claim-while-due") == ("no_claim_while_due", None, None, ">", 600, 0)
    # 0 when the holder ends; a claim ends a silent fleet at once
    released_at_once = {"xmin-horizon-held", "slot-holds-horizon", "no-claim-while-due"}
    assert all(rule.keep_firing_for == 0 for rule in ruleset.rules if rule.name in released_at_once)
    assert all(
        rule.keep_firing_for == 120 for rule in ruleset.rules if rule.name not in released_at_once
    )
    assert [rule.severity for rule in ruleset.rules] == [
        "critical",
        "warning",
        "critical",
        "warning",
        "warning",
        "warning",
        "warning",
        "warning",
        "warning",
        "warning",
        "critical",
    ]


def test_every_shipped_rule_has_numbered_runbook_steps_that_end_with_when_it_is_over():
    ruleset = load_rules(SHIPPED_RULES_PATH)
    for rule in ruleset.rules:
        assert rule.runbook is not None, rule.name
        numbers = [line.split(".")[0] for line in rule.runbook.splitlines()]
        assert numbers == [str(n) for n in range(1, len(numbers) + 1)], rule.name
        steps = rule.runbook_steps
        assert len(steps) >= 4 and len(steps) == len(numbers), rule.name
        # the last step says when it is over; a step names a page or runs a command
        assert steps[-1].startswith("Over "), rule.name
        assert any("`" in step for step in steps), f"{rule.name}: no CLI or SQL line"


def test_runbook_steps_split_on_their_numbers_and_2000_characters_are_accepted(write_rules):
    text = (
        "1. Open the Overview,\n   read the queue depth.\n2) Reap: `outbox-monitor reap`\n\nA note."
    )
    long = "1. " + "x" * 1997
    data = variant(lambda d: d["rules"][0].update({"runbook": text}))
    data["rules"][1]["runbook"] = long
    backlog, payments, retries = write_rules(data).rules
    assert backlog.runbook_steps == (
        "Open the Overview, read the queue depth.",
        "Reap: `outbox-monitor reap`",
        "A note.",
    )
    assert len(payments.runbook) == 2000 and payments.runbook_steps == ("x" * 1997,)
    assert retries.runbook is None and retries.runbook_steps == ()


def test_a_metric_of_the_whole_table_takes_no_event_type_and_no_by(write_rules):
    def rules(**extra: Any) -> dict[str, Any]:
        rule = {"name": "horizon", "metric": "xmin_horizon_age", "op": ">", "threshold": "10m"}
        return {
            "version": 1,
            "routes": {"oncall": {}},
            "rules": [{**rule, **extra, "route": "oncall"}],
        }

    for field, value in (("event_type", "order.%"), ("by", ["event_type"])):
        with pytest.raises(RulesError) as caught:
            write_rules(rules(**{field: value}))
        assert (
            f'"horizon": {field}: xmin_horizon_age describes the whole outbox table, not event '
            f"types; remove {field}" in str(caught.value)
        )
    assert write_rules(rules()).rules[0].threshold == 600
    # the claim's plan (issue 14 item 2) is a figure of the whole table too
    claim = {"metric": "claim_plan_degraded", "threshold": 0}
    for field, value in (("event_type", "order.%"), ("by", ["event_type"])):
        with pytest.raises(RulesError) as caught:
            write_rules(rules(**claim, **{field: value}))
        assert "claim_plan_degraded describes the whole outbox table" in str(caught.value)
    assert write_rules(rules(**claim)).rules[0].metric == "claim_plan_degraded"


def test_valid_file_resolves_defaults_routes_and_templates(tmp_path, write_rules):
    ruleset = write_rules(VALID)
    assert ruleset.path == str(tmp_path / "alerts.yml")
    backlog, payments, retries = ruleset.rules
    assert (backlog.for_, backlog.keep_firing_for) == (600, 120)  # own for, default keep
    assert (payments.for_, payments.keep_firing_for) == (60, 120)  # both from defaults
    assert (retries.attempts, retries.op, retries.threshold) == (5, ">=", 10)
    assert ruleset.routes[payments.route].transport == "bot"
    assert ruleset.routes["payments"].webhook_url_env is None
    assert ruleset.routes["payments"].mention == "<!subteam^S0123>"
    assert ruleset.routes["payments"].repeat_interval == 4 * 3600  # default
    assert payments.render_summary(3, "payment.captured") == (
        "3 payment.captured dead-lettered (payment-failed > 0)"
    )
    assert payments.render_runbook_url("payment.<captured>&x") == (
        "https://runbooks.example/payment-failed?type=payment.%3Ccaptured%3E%26x"
    )
    assert backlog.render_summary(1234.0) == "backlog: queue_depth is 1,234 (> 1,000)"
    assert backlog.render_runbook_url() is None
    with pytest.raises(KeyError):
        ruleset.rule("nope")


def test_duration_threshold_and_units_render_for_people(write_rules):
    data = variant(
        lambda d: d["rules"].append(
            {
                "name": "late",
                "metric": "oldest_pending_age",
                "op": ">",
                "threshold": "5m",
                "route": "oncall",
                "summary": "oldest {{ value }} > {{ threshold }} for {{ event_type }}",
            }
        )
    )
    late = write_rules(data).rule("late")
    assert (late.threshold, late.unit, late.condition) == (300, "seconds", "> 5m 0s")
    assert late.render_summary(412.0) == "oldest 6m 52s > 5m 0s for all event types"
    assert late.render_summary(None) == "oldest – > 5m 0s for all event types"


def test_route_without_transport_uses_slack_webhook_url(write_rules):
    data = variant(lambda d: d["routes"].update({"quiet": {"send_resolved": False}}))
    quiet = write_rules(data).routes["quiet"]
    assert (quiet.webhook_url_env, quiet.send_resolved, quiet.transport) == (
        "SLACK_WEBHOOK_URL",
        False,
        "webhook",
    )


# ------------------------------------------------------------- malformed variants


def _rule(index: int, **fields: Any):
    def change(data: dict[str, Any]) -> None:
        for key, value in fields.items():
            if value is None:
                data["rules"][index].pop(key, None)
            else:
                data["rules"][index][key] = value

    return change


MALFORMED = [
    pytest.param(
        _rule(1, threshold="abc"),
        'rules[1] "payment-failed": threshold: expected a number, got "abc"',
        id="threshold-abc",
    ),
    pytest.param(
        _rule(0, threshold="5m"),
        'rules[0] "backlog": threshold: expected a number (queue_depth is measured in rows, '
        'not a duration), got "5m"',
        id="duration-threshold-on-a-count",
    ),
    pytest.param(
        _rule(0, metric="oldest_pending_age", threshold="soon"),
        'rules[0] "backlog": threshold: expected a number or a duration, got "soon"',
        id="threshold-bad-duration",
    ),
    pytest.param(
        _rule(0, metric="queue_deph"),
        'rules[0] "backlog": metric: unknown metric "queue_deph"; did you mean "queue_depth"?',
        id="unknown-metric",
    ),
    pytest.param(
        _rule(0, window="15m"),
        'rules[0] "backlog": window: queue_depth has no window; remove window',
        id="window-on-metric-without-one",
    ),
    pytest.param(
        _rule(1, window=None),
        'rules[1] "payment-failed": window: required for failed_in_window (e.g. window: 15m)',
        id="failed-in-window-without-window",
    ),
    pytest.param(
        _rule(1, window="fortnight"),
        'rules[1] "payment-failed": window: expected a duration such as 90s, 15m or 1h, '
        'got "fortnight"',
        id="bad-window-duration",
    ),
    pytest.param(
        _rule(0, treshold=5),
        'rules[0] "backlog": treshold: unknown key; did you mean "threshold"?',
        id="typo-treshold",
    ),
    pytest.param(
        _rule(0, threshold=None),
        'rules[0] "backlog": threshold: required',
        id="missing-threshold",
    ),
    pytest.param(
        _rule(2, name="backlog"),
        'rules[2] "backlog": name: duplicate rule name "backlog" (also rules[0]); '
        "rule names must be unique",
        id="duplicate-name",
    ),
    pytest.param(
        _rule(0, name="Back Log"),
        'rules[0] "Back Log": name: expected a slug',
        id="name-not-a-slug",
    ),
    pytest.param(
        _rule(0, route="pager"),
        'rules[0] "backlog": route: unknown route "pager" (routes: oncall, payments)',
        id="unknown-route",
    ),
    pytest.param(
        _rule(2, attempts=None),
        'rules[2] "retry-pressure": attempts: required for attempts_at_least (e.g. attempts: 5)',
        id="attempts-at-least-without-attempts",
    ),
    pytest.param(
        _rule(0, attempts=3),
        'rules[0] "backlog": attempts: only attempts_at_least takes attempts, not queue_depth',
        id="attempts-on-other-metric",
    ),
    pytest.param(
        _rule(2, attempts=0),
        'rules[2] "retry-pressure": attempts: expected a whole number ≥ 1, got 0',
        id="attempts-zero",
    ),
    pytest.param(
        _rule(0, op="=>"),
        'rules[0] "backlog": op: expected one of > >= < <= == !=, got "=>"',
        id="bad-op",
    ),
    pytest.param(
        _rule(0, by=["aggregate_type"]),
        'rules[0] "backlog": by: only event_type is supported: by: [event_type]',
        id="by-other-label",
    ),
    pytest.param(
        _rule(0, by="event_type"),
        'rules[0] "backlog": by: expected [event_type]',
        id="by-not-a-list",
    ),
    pytest.param(
        _rule(0, **{"for": "10 minutes"}),
        'rules[0] "backlog": for: expected a duration such as 90s, 15m or 1h, got "10 minutes"',
        id="bad-for-duration",
    ),
    pytest.param(
        _rule(0, keep_firing_for=-5),
        'rules[0] "backlog": keep_firing_for: expected a duration',
        id="negative-keep-firing-for",
    ),
    pytest.param(
        _rule(0, severity="page"),
        'rules[0] "backlog": severity: expected one of critical, warning, info, got "page"',
        id="bad-severity",
    ),
    pytest.param(
        _rule(0, summary="{{ valeu }} rows"),
        'rules[0] "backlog": summary: unknown placeholder "{{ valeu }}"',
        id="summary-unknown-placeholder",
    ),
    pytest.param(
        _rule(0, summary="{% for x in y %}{{ value }}"),
        'rules[0] "backlog": summary: only plain placeholders are supported',
        id="summary-jinja-block",
    ),
    pytest.param(
        _rule(0, runbook_url="wiki/backlog"),
        'rules[0] "backlog": runbook_url: expected an http:// or https:// URL',
        id="runbook-not-a-url",
    ),
    pytest.param(
        _rule(0, runbook="1. " + "x" * 1998),
        'rules[0] "backlog": runbook: 2,001 characters, at most 2,000: keep the steps short',
        id="runbook-2001-characters",
    ),
    pytest.param(
        _rule(0, runbook="1. Open {{ event_type }}"),
        'rules[0] "backlog": runbook: static text: nothing in it is filled in',
        id="runbook-placeholder",
    ),
    pytest.param(
        _rule(0, runbook=["1. Open the Overview"]),
        'rules[0] "backlog": runbook: expected text (numbered steps), got a list',
        id="runbook-not-text",
    ),
    pytest.param(
        _rule(0, runbook="  \n"),
        'rules[0] "backlog": runbook: expected numbered steps, got empty text',
        id="runbook-blank",
    ),
    pytest.param(
        _rule(0, labels={"team": 7}),
        'rules[0] "backlog": labels: team: expected text, got 7',
        id="label-not-text",
    ),
    pytest.param(
        _rule(0, event_type=""),
        'rules[0] "backlog": event_type: expected an event type',
        id="empty-event-type",
    ),
    pytest.param(
        lambda d: d["routes"]["payments"].update({"webhook_url_env": "PAYMENTS_WEBHOOK"}),
        "routes.payments.webhook_url_env: give either channel (bot token transport) or "
        "webhook_url_env (incoming webhook), not both",
        id="route-with-channel-and-webhook",
    ),
    pytest.param(
        lambda d: d["routes"]["oncall"].update({"webhook_url_env": "https://example.com/hook"}),
        "routes.oncall.webhook_url_env: expected the name of an environment variable",
        id="webhook-env-not-a-name",
    ),
    pytest.param(
        lambda d: d["routes"]["oncall"].update({"chanel": "#x"}),
        'routes.oncall.chanel: unknown key; did you mean "channel"?',
        id="route-typo",
    ),
    pytest.param(
        lambda d: d["routes"]["oncall"].update({"send_resolved": "nope"}),
        'routes.oncall.send_resolved: expected true or false, got "nope"',
        id="send-resolved-not-bool",
    ),
    pytest.param(
        lambda d: d["routes"]["payments"].update({"channel": "#bad channel!"}),
        "routes.payments.channel: expected a Slack channel",
        id="bad-channel",
    ),
    pytest.param(
        lambda d: d["defaults"].update({"interval": "0s"}),
        'defaults.interval: must be longer than 0s, got "0s"',
        id="zero-interval",
    ),
    pytest.param(
        lambda d: d["defaults"].update({"for": "a while"}),
        'defaults.for: expected a duration such as 90s, 15m or 1h, got "a while"',
        id="defaults-bad-for",
    ),
    pytest.param(
        lambda d: d["defaults"].update({"keep_firing": "2m"}),
        'defaults.keep_firing: unknown key; did you mean "keep_firing_for"?',
        id="defaults-typo",
    ),
    pytest.param(
        lambda d: d.update({"version": 2}),
        "version: expected 1, got 2",
        id="version-2",
    ),
    pytest.param(
        lambda d: d.pop("rules"),
        "rules: required",
        id="no-rules",
    ),
    pytest.param(
        lambda d: d.update({"rule": []}),
        'rule: unknown key; did you mean "rules"?',
        id="top-level-typo",
    ),
    pytest.param(
        lambda d: d["rules"].append("backlog"),
        'rules[3]: expected a mapping (key: value), got "backlog"',
        id="rule-not-a-mapping",
    ),
    pytest.param(
        lambda d: d["routes"].update({"pd": {"type": "opsgenie"}}),
        'routes.pd.type: expected one of slack, pagerduty, webhook, alertmanager, got "opsgenie"',
        id="receiver-type-unknown",
    ),
    pytest.param(
        lambda d: d["routes"].update({"pd": {"type": "pagerduty"}}),
        "routes.pd.routing_key_env: a pagerduty route needs routing_key_env: the name of the "
        "environment variable holding its routing key",
        id="pagerduty-without-routing-key-env",
    ),
    pytest.param(
        lambda d: d["routes"].update({"pd": {"type": "pagerduty", "routing_key_env": "k-1"}}),
        "routes.pd.routing_key_env: expected the name of an environment variable that holds "
        'the routing key, got "k-1"',
        id="pagerduty-routing-key-env-not-a-name",
    ),
    pytest.param(
        lambda d: d["routes"].update(
            {"pd": {"type": "pagerduty", "routing_key_env": "PD_KEY", "channel": "#x"}}
        ),
        "routes.pd.channel: only a slack route takes channel (this route's type is pagerduty)",
        id="pagerduty-with-a-channel",
    ),
    pytest.param(
        lambda d: d["routes"].update({"hook": {"type": "webhook", "url_env": "HOOK_URL"}}),
        "routes.hook.secret_env: a webhook route needs secret_env: the name of the environment "
        "variable holding its HMAC-SHA256 secret",
        id="webhook-without-secret-env",
    ),
    pytest.param(
        lambda d: d["routes"].update({"hook": {"type": "webhook", "secret_env": "S"}}),
        "routes.hook.url_env: a webhook route needs url_env: the name of the environment "
        "variable holding its URL",
        id="webhook-without-url-env",
    ),
    pytest.param(
        lambda d: d["routes"]["oncall"].update({"routing_key_env": "PD_KEY"}),
        "routes.oncall.routing_key_env: only a pagerduty route takes routing_key_env (this "
        "route's type is slack)",
        id="slack-with-a-routing-key",
    ),
    pytest.param(
        lambda d: d["routes"]["oncall"].update({"url_env": "HOOK_URL"}),
        "routes.oncall.url_env: only a webhook or pagerduty route takes url_env (this route's "
        "type is slack)",
        id="slack-with-a-url-env",
    ),
    pytest.param(
        lambda d: d["routes"]["oncall"].update(
            {"routes": [{"matchers": {"a": "b"}, "route": "payments", "continue": "yes"}]}
        ),
        'routes.oncall.routes[0].continue: expected true or false, got "yes"',
        id="continue-not-bool",
    ),
]


@pytest.mark.parametrize(("change", "expected"), MALFORMED)
def test_each_malformed_variant_names_rule_and_field(tmp_path, change, expected):
    problem = only_problem(tmp_path, change)
    assert problem.startswith(expected), problem


SECRETS = [
    pytest.param(
        lambda d: d["routes"]["oncall"].update({"webhook_url": WEBHOOK}),
        "routes.oncall.webhook_url: looks like a Slack webhook URL; secrets do not belong in "
        "alerts.yml: put the URL in an environment variable and name it with the route's "
        "webhook_url_env",
        id="webhook-url-in-route",
    ),
    pytest.param(
        lambda d: d["routes"]["oncall"].update({"webhook_url_env": WEBHOOK}),
        "routes.oncall.webhook_url_env: looks like a Slack webhook URL",
        id="webhook-url-as-env-name",
    ),
    pytest.param(
        lambda d: d["routes"]["payments"].update({"mention": BOT_TOKEN}),
        "routes.payments.mention: looks like a Slack token; secrets do not belong in "
        "alerts.yml: put it in the SLACK_BOT_TOKEN environment variable",
        id="xoxb-token",
    ),
    pytest.param(
        _rule(0, labels={"token": "xoxp-99999-abcdef"}),
        'rules[0] "backlog": labels.token: looks like a Slack token',
        id="xoxp-token-in-label",
    ),
    pytest.param(
        _rule(1, runbook_url="postgresql://monitor:s3cret@db.internal/outbox"),
        'rules[1] "payment-failed": runbook_url: looks like a URL or DSN with a password',
        id="dsn-with-password",
    ),
    pytest.param(
        _rule(0, summary="host=db user=monitor password=s3cret"),
        'rules[0] "backlog": summary: looks like a connection string with a password',
        id="libpq-password",
    ),
]


@pytest.mark.parametrize(("change", "expected"), SECRETS)
def test_secret_looking_values_are_refused_and_never_echoed(tmp_path, change, expected):
    problem = only_problem(tmp_path, change)
    assert problem.startswith(expected), problem
    for secret in (WEBHOOK, BOT_TOKEN, "xoxp-99999", "s3cret"):
        assert secret not in problem


def test_every_problem_is_reported_at_once_in_file_order(tmp_path):
    def change(data: dict[str, Any]) -> None:
        data["defaults"]["interval"] = "never"
        data["routes"]["oncall"]["webhook_url"] = WEBHOOK
        data["rules"][0]["threshold"] = "abc"
        data["rules"][0]["route"] = "pager"
        data["rules"][1]["window"] = None
        data["rules"][1]["treshold"] = 3
        data["rules"][2]["name"] = "backlog"

    path = rules_file(tmp_path, variant(change))
    with pytest.raises(RulesError) as caught:
        load_rules(path)
    lines = str(caught.value).splitlines()
    assert lines[:7] == [
        f'{path}: defaults.interval: expected a duration such as 90s, 15m or 1h, got "never"',
        f"{path}: routes.oncall.webhook_url: looks like a Slack webhook URL; secrets do not "
        "belong in alerts.yml: put the URL in an environment variable and name it with the "
        "route's webhook_url_env",
        f'{path}: rules[0] "backlog": threshold: expected a number, got "abc"',
        f'{path}: rules[0] "backlog": route: unknown route "pager" (routes: oncall, payments)',
        f'{path}: rules[1] "payment-failed": window: required for failed_in_window '
        "(e.g. window: 15m)",
        f'{path}: rules[1] "payment-failed": treshold: unknown key; did you mean "threshold"? '
        "(allowed: name, metric, window, attempts, event_type, by, op, threshold, predict, for, "
        "keep_firing_for, severity, labels, summary, runbook_url, runbook, route, outboxes)",
        f'{path}: rules[2] "backlog": name: duplicate rule name "backlog" (also rules[0]); '
        "rule names must be unique",
    ]
    assert lines[7:] == [RulesError.hint]  # str() appends the fix
    assert isinstance(caught.value, ConfigError)


# ----------------------------------------------------------------- YAML and files


def test_yaml_syntax_error_names_the_line(tmp_path):
    text = "version: 1\nrules:\n  - name: backlog\n    metric: queue_depth\n   op: '>'\n"
    assert problems_of(tmp_path, text) == [
        "line 5, column 4: invalid YAML: expected <block end>, but found '<block mapping start>'"
        " (while parsing a block collection at line 3, column 3)"
    ]


def test_unclosed_flow_sequence_names_where_it_started(tmp_path):
    text = "version: 1\nrules:\n  - name: backlog\n    by: [event_type\n"
    (problem,) = problems_of(tmp_path, text)
    assert problem.startswith("line 5, column 1: invalid YAML: expected ',' or ']'")
    assert problem.endswith("(while parsing a flow sequence at line 4, column 9)")


def test_yaml_1_1_spellings_are_text_named_by_rule_and_field_and_1e3_a_number(tmp_path):
    """YAML 1.2, as editors read the file against its schema: ``no`` and ``1:30`` are text
    (YAML 1.1: false and 90), ``1e3`` is a number (YAML 1.1: text)."""
    text = (
        "version: 1\nroutes:\n  oncall: {send_resolved: no}\nrules:\n  - {name: backlog, "
        'metric: queue_depth, op: ">", threshold: 1e3, for: 1:30, route: oncall}\n'
    )
    assert problems_of(tmp_path, text) == [
        'routes.oncall.send_resolved: expected true or false, got "no"',
        'rules[0] "backlog": for: expected a duration such as 90s, 15m or 1h, got "1:30"',
    ]
    fixed = text.replace("no}", "false}").replace("1:30", "90s")
    (rule,) = load_rules(rules_file(tmp_path, fixed)).rules
    assert (rule.threshold, rule.for_) == (1000.0, 90.0)


def test_duplicate_yaml_key_is_an_error_not_last_one_wins(tmp_path):
    text = "version: 1\nrules:\n  - name: backlog\n    threshold: 1\n    threshold: 2\n"
    assert problems_of(tmp_path, text) == [
        'line 5, column 5: invalid YAML: duplicate key "threshold"'
    ]


def test_yaml_tags_for_python_objects_are_refused(tmp_path):
    (problem,) = problems_of(tmp_path, "version: !!python/object/apply:os.getcwd []\n")
    assert "invalid YAML" in problem and "python/object" in problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the file is empty; expected version, defaults, routes, rules"),
        ("- a\n- b\n", "expected a mapping with version, defaults, routes, rules; got a list"),
    ],
)
def test_empty_or_non_mapping_file(tmp_path, text, expected):
    assert problems_of(tmp_path, text) == [expected]


def test_missing_file_is_a_rules_error(tmp_path):
    with pytest.raises(RulesError) as caught:
        load_rules(tmp_path / "nope.yml")
    assert caught.value.problems == [
        f"{tmp_path / 'nope.yml'}: cannot read the rules file: No such file or directory"
    ]


def test_rules_path_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv(RULES_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert resolve_rules_path() == SHIPPED_RULES_PATH  # no alerts.yml here
    rules_file(tmp_path, "version: 1\nrules: []\n")
    assert resolve_rules_path() == Path("alerts.yml")
    monkeypatch.setenv(RULES_ENV, "/etc/outbox/rules.yml")
    assert resolve_rules_path() == Path("/etc/outbox/rules.yml")
    assert resolve_rules_path("mine.yml") == Path("mine.yml")
