"""alerts.yml's ``predict`` field (issue 15 item 4): read as a duration, refused with the rule
and the field named where a forecast cannot be made."""

from pathlib import Path
from typing import Any

import pytest

from outbox_monitor.alerts.rules_file import RulesError, load_rules
from tests.alerting import rules_file


def rules(**rule: Any) -> dict[str, Any]:
    base = {"name": "backlog-soon", "metric": "queue_depth", "op": ">", "threshold": 10000}
    return {
        "version": 1,
        "routes": {"oncall": {"webhook_url_env": "SLACK_WEBHOOK_URL"}},
        "rules": [{**base, **rule, "route": "oncall"}],
    }


def problems_of(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    path = rules_file(tmp_path, data)
    with pytest.raises(RulesError) as caught:
        load_rules(path)
    return [line.removeprefix(f"{path}: ") for line in caught.value.problems]


def test_predict_is_a_duration_in_seconds(tmp_path):
    ruleset = load_rules(rules_file(tmp_path, rules(predict="15m")))
    assert ruleset.rule("backlog-soon").predict == 900.0
    assert load_rules(rules_file(tmp_path, rules())).rule("backlog-soon").predict is None
    age = rules(metric="oldest_pending_age", threshold="5m", predict="10m")
    assert load_rules(rules_file(tmp_path, age)).rule("backlog-soon").predict == 600.0


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            {"predict": "soon"},
            'rules[0] "backlog-soon": predict: expected a duration such as 90s, 15m or 1h, '
            'got "soon"',
            id="not-a-duration",
        ),
        pytest.param(
            {"predict": "0s"},
            'rules[0] "backlog-soon": predict: must be longer than 0s, got "0s"',
            id="zero",
        ),
        pytest.param(
            {"metric": "latency_p95", "window": "1h", "threshold": "2m", "predict": "15m"},
            'rules[0] "backlog-soon": predict: latency_p95 cannot be forecast; predict works '
            "on queue_depth, pending_total, scheduled_retries, oldest_pending_age",
            id="not-a-depth-or-age",
        ),
        pytest.param(
            {"event_type": "notification.%", "predict": "15m"},
            'rules[0] "backlog-soon": predict: a LIKE pattern\'s total cannot be forecast: the '
            "per-type samples keep the top event types and fold the rest into other; name one "
            "event type, or add by: [event_type] for a forecast per type",
            id="a-pattern-without-by",
        ),
        pytest.param(
            {"metric": "pending_total", "by": ["event_type"], "predict": "15m"},
            'rules[0] "backlog-soon": predict: pending_total is not sampled per event type; a '
            "rule with event_type or by may forecast queue_depth, oldest_pending_age; remove "
            "event_type and by, or predict",
            id="not-sampled-per-type",
        ),
        pytest.param(
            {"op": "==", "threshold": 0, "predict": "15m"},
            'rules[0] "backlog-soon": predict: a forecast alerts when its trend crosses the '
            'threshold (op >, >=, < or <=); with op "==" the rule would never fire',
            id="equal",
        ),
        pytest.param(
            {"op": "!=", "threshold": 0, "predict": "15m"},
            'rules[0] "backlog-soon": predict: a forecast alerts when its trend crosses the '
            'threshold (op >, >=, < or <=); with op "!=" the rule would never fire',
            id="not-equal",
        ),
    ],
)
def test_a_bad_predict_names_the_rule_and_the_field(tmp_path, change, expected):
    assert problems_of(tmp_path, rules(**change)) == [expected]


@pytest.mark.parametrize(
    "scope",
    [
        {"event_type": "order.paid"},
        {"by": ["event_type"]},
        {"event_type": "notification.%", "by": ["event_type"]},
        {"metric": "oldest_pending_age", "threshold": "5m", "event_type": "order.paid"},
    ],
)
def test_a_depth_or_age_rule_scoped_to_event_types_may_predict(tmp_path, scope):
    ruleset = load_rules(rules_file(tmp_path, rules(predict="15m", **scope)))
    assert ruleset.rule("backlog-soon").predict == 900.0


def test_the_alerts_page_says_the_rule_watches_a_forecast(tmp_path):
    from outbox_monitor.ui.alert_rules import describe_metric

    rule = load_rules(rules_file(tmp_path, rules(predict="15m"))).rule("backlog-soon")
    assert describe_metric(rule) == "queue_depth · forecast 15m ahead"
