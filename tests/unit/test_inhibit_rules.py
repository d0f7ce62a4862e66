"""alerts.yml's ``inhibit`` (issue 31 item 4): its validation, the shipped entries, and the
matching semantics on hand-made sources (no database)."""

import pytest

from outbox_monitor.alerts import outage, stall
from outbox_monitor.alerts.inhibit_model import OWN_SOURCES, InhibitRule
from outbox_monitor.alerts.inhibition import Source, inhibitor, sources_first
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, RulesError, load_rules

HEAD = """
version: 1
routes: {oncall: {webhook_url_env: SLACK_WEBHOOK_URL}}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1, route: oncall}
  - {name: breaker-open, metric: breaker_open, by: [event_type], op: ">", threshold: 0,
     route: oncall}
"""


def problems(write_rules, inhibit: str) -> list[str]:
    with pytest.raises(RulesError) as caught:
        write_rules(HEAD + inhibit)
    return [line.split(": ", 1)[1] for line in caught.value.problems]


def test_each_bad_entry_is_named_with_its_field(write_rules) -> None:
    found = problems(
        write_rules,
        """inhibit:
  - {source_matchers: {rule: breaker-opn}, target_matchers: {}, equal: [event_type, "a b"],
     colour: red}
  - {source_matchers: {rule: alerting-stalled}, target_matchers: {rule: nope},
     equal: event_type}
  - {target_matchers: {event_type: "%"}, equal: [event_type, event_type]}
""",
    )
    assert found == [
        "inhibit[0].target_matchers: expected a mapping of label: value, e.g. {rule: "
        "breaker-open}; got a mapping",
        'inhibit[0].equal: label name "a b": expected letters, digits and _',
        "inhibit[0].colour: unknown key (allowed: source_matchers, target_matchers, equal)",
        'inhibit[0].source_matchers: rule: unknown rule "breaker-opn" (rules: backlog, '
        "breaker-open, database-unreachable, alerting-stalled); the entry would never match",
        'inhibit[1].equal: expected a list of label names, e.g. [event_type]; got "event_type"',
        'inhibit[1].target_matchers: rule: unknown rule "nope" (rules: backlog, breaker-open); '
        "the entry would never match",
        "inhibit[2].source_matchers: required",
        'inhibit[2].equal: label "event_type" named twice',
    ]


def test_the_own_sources_are_the_schedulers_own_alerts() -> None:
    assert OWN_SOURCES == (outage.RULE_NAME, stall.RULE_NAME)


def test_the_shipped_file_inhibits_per_type_alerts_by_breaker_and_outbox_level_alerts() -> None:
    shipped = load_rules(SHIPPED_RULES_PATH)
    assert [(e.source_matchers, e.target_matchers, e.equal) for e in shipped.inhibit] == [
        ({"rule": "breaker-open"}, {"event_type": "%"}, ("event_type",)),
        ({"rule": "database-unreachable"}, {"event_type": "%"}, ()),
        ({"rule": "alerting-stalled"}, {"event_type": "%"}, ()),
    ]
    # breaker-open may inhibit: evaluated first, the others in file order
    order = [rule.name for rule in sources_first(shipped.rules, shipped.inhibit)]
    assert order == ["breaker-open"] + [r.name for r in shipped.rules if r.name != "breaker-open"]
    assert sources_first(shipped.rules, ()) == shipped.rules


BREAKER = InhibitRule(
    source_matchers={"rule": "breaker-open"},
    target_matchers={"event_type": "%"},
    equal=["event_type"],
)
OPEN_PAID = Source(
    "breaker-open",
    "event_type=order.paid",
    {"rule": "breaker-open", "severity": "warning", "event_type": "order.paid"},
)


@pytest.mark.parametrize(
    ("rule", "event_type", "severity", "inhibited"),
    [
        ("lag", "order.paid", "warning", True),  # the type's own per-type warning
        ("lag", "order.shipped", "warning", False),  # another type: its event_type differs
        ("backlog", None, "warning", False),  # no event_type: a missing label never matches
        ("dead", "order.paid", "critical", False),  # a warning never inhibits a critical
        ("slow", "order.paid", "info", True),  # an info it does
        # the source itself, which matches the target matchers and `equal`: never
        ("breaker-open", "order.paid", "warning", False),
    ],
)
def test_inhibitor(rule, event_type, severity, inhibited) -> None:
    labels = {"rule": rule, "severity": severity}
    if event_type is not None:
        labels["event_type"] = event_type
    instance = f"event_type={event_type}" if event_type else ""
    found = inhibitor([BREAKER], [OPEN_PAID], rule, instance, labels)
    assert found == (OPEN_PAID if inhibited else None)


def test_a_source_without_the_equal_label_inhibits_nothing_and_names_read_well() -> None:
    source = Source("breaker-open", "", {"rule": "breaker-open", "severity": "critical"})
    assert (
        inhibitor([BREAKER], [source], "lag", "", {"severity": "info", "event_type": "x"}) is None
    )
    assert OPEN_PAID.name == "breaker-open event_type=order.paid" and source.name == "breaker-open"
