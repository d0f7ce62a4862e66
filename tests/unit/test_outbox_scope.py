"""Rules across a fleet (issue 16 item 3), without a database: a rule's ``outboxes`` selects
by name or label and is validated with the rule and field named; a route's branches send
by label; dashboard paths carry ``?outbox=``; a fleet of one keeps its labels."""

from pathlib import Path

import pytest

from outbox_monitor.alerts.outbox_scope import (
    link_outbox,
    routes_for,
    rule_selects,
    scope_labels,
    scope_payload,
    scoped_instance,
    selected_rules,
    unscoped_instance,
    with_scope,
)
from outbox_monitor.alerts.rules_file import RulesError, load_rules
from outbox_monitor.config.fleet import Fleet, Outbox
from outbox_monitor.config.settings import load_settings

SETTINGS = load_settings(dsn="postgresql://monitor@localhost/app")
ORDERS = Outbox("orders", SETTINGS.of_fleet_outbox("orders"), {"team": "checkout"})
BILLING = Outbox("billing", SETTINGS.of_fleet_outbox("billing"), {"team": "payments"})
LEDGER = Outbox("ledger", SETTINGS.of_fleet_outbox("ledger"), {"team": "payments", "tier": "1"})
FLEET = Fleet((ORDERS, BILLING, LEDGER), "outboxes.yml")

RULES = """
version: 1
routes:
  oncall:
    webhook_url_env: SLACK_WEBHOOK_URL
    routes:
      - {matchers: {team: payments, severity: critical}, route: payments-page}
      - {matchers: {team: payments}, route: payments-oncall}
      - {matchers: {event_type: "crm.%"}, route: crm}
  payments-oncall: {channel: "#payments-oncall"}
  payments-page: {channel: "#payments-page"}
  crm: {channel: "#crm"}
rules:
  - {name: everywhere, metric: stuck_locks, op: ">", threshold: 0, route: oncall}
  - {name: by-name, metric: stuck_locks, op: ">", threshold: 0, route: oncall,
     outboxes: [orders, ledger]}
  - {name: by-label, metric: stuck_locks, op: ">", threshold: 0, route: oncall,
     outboxes: {team: payments}}
  - {name: by-labels, metric: stuck_locks, op: ">", threshold: 0, route: oncall,
     outboxes: {team: payments, tier: "1"}}
"""


def _load(tmp_path: Path, text: str, fleet: Fleet | None = FLEET):
    path = tmp_path / "alerts.yml"
    path.write_text(text)
    return load_rules(path, fleet)


def test_a_rule_selects_outboxes_by_name_or_by_every_label(tmp_path):
    ruleset = _load(tmp_path, RULES)

    def names(outbox):
        return [rule.name for rule in selected_rules(ruleset, outbox)]

    assert names(ORDERS) == ["everywhere", "by-name"]
    assert names(BILLING) == ["everywhere", "by-label"]
    assert names(LEDGER) == ["everywhere", "by-name", "by-label", "by-labels"]
    # without a fleet file: the single outbox "default", no labels
    assert names(None) == ["everywhere"]
    assert rule_selects(ruleset.rule("by-name"), None, "orders")  # settings of a fleet outbox


def test_rule_outboxes_problems_name_the_rule_and_field(tmp_path):
    bad = RULES.replace("outboxes: [orders, ledger]", "outboxes: [orders, shipping, Bad!]")
    with pytest.raises(RulesError) as caught:
        _load(tmp_path, bad)
    assert str(caught.value).splitlines()[0] == (
        f'{tmp_path / "alerts.yml"}: rules[1] "by-name": outboxes: "Bad!" is not an outbox '
        "name (lower-case letters, digits, - and _)"
    )
    unknown = RULES.replace("outboxes: [orders, ledger]", "outboxes: [orders, shipping]")
    with pytest.raises(RulesError) as caught:
        _load(tmp_path, unknown)
    assert caught.value.problems == [
        f'{tmp_path / "alerts.yml"}: rules[1] "by-name": outboxes: unknown outbox "shipping" '
        "(outboxes.yml lists orders, billing, ledger)"
    ]
    # without a fleet file the names cannot be checked: the rule just selects none of them
    assert _load(tmp_path, unknown, None).rule("by-name").outboxes == ("orders", "shipping")
    for selector, message in (
        ("[]", "expected at least one outbox name (or leave outboxes out)"),
        ("{}", "expected a mapping of label: value"),
        ("{team: 3}", "team: expected text, got 3"),
        ("{1team: x}", 'label name "1team": expected letters, digits and _'),
    ):
        text = RULES.replace("outboxes: {team: payments}", f"outboxes: {selector}", 1)
        with pytest.raises(RulesError) as caught:
            _load(tmp_path, text)
        assert caught.value.problems[0].startswith(
            f'{tmp_path / "alerts.yml"}: rules[2] "by-label": outboxes: {message}'
        ), caught.value.problems


def test_a_route_branch_is_checked_against_the_routes(tmp_path):
    at = f"{tmp_path / 'alerts.yml'}: routes.oncall.routes"
    for old, new, problems in (
        (
            "route: crm}",
            "route: pager}",
            [
                f'{at}[2].route: unknown route "pager" '
                "(routes: oncall, payments-oncall, payments-page, crm)"
            ],
        ),
        (
            "route: crm}",
            "route: oncall}",
            [f'{at}[2].route: "oncall" is this route itself; name another route'],
        ),
        (
            "{matchers: {event_type",
            "{matcher: {event_type",
            [
                f"{at}[2].matchers: required",
                f'{at}[2].matcher: unknown key; did you mean "matchers"? '
                "(allowed: matchers, route, continue)",
            ],
        ),
        (
            "{matchers: {team: payments}, route: payments-oncall}",
            "{matchers: {team: 3}, route: payments-oncall}",
            [f"{at}[1].matchers: team: expected text, got 3"],
        ),
    ):
        with pytest.raises(RulesError) as caught:
            _load(tmp_path, RULES.replace(old, new))
        assert caught.value.problems == problems
    with pytest.raises(RulesError) as caught:  # one level: a branch leads to a plain route
        _load(
            tmp_path,
            RULES.replace(
                '  crm: {channel: "#crm"}',
                '  crm: {channel: "#crm", routes: [{matchers: {a: b}, route: payments-page}]}',
            ),
        )
    assert caught.value.problems == [
        f'{at}[2].route: route "crm" has routes of its own; a branch leads to a route without '
        "routes (one level)"
    ]


def test_the_first_branch_whose_matchers_all_match_takes_the_notification(tmp_path):
    ruleset = _load(tmp_path, RULES)
    payments = with_scope({"rule": "x", "severity": "warning"}, scope_labels(BILLING, "billing"))
    assert routes_for(ruleset, "oncall", payments) == ["payments-oncall"]
    assert routes_for(ruleset, "oncall", {**payments, "severity": "critical"}) == ["payments-page"]
    assert routes_for(ruleset, "oncall", {"event_type": "crm.contact"}) == ["crm"]  # LIKE
    assert routes_for(ruleset, "oncall", {"team": "checkout"}) == ["oncall"]
    assert routes_for(ruleset, "crm", payments) == ["crm"]  # a route without branches


def test_outbox_labels_only_with_a_fleet_file():
    assert scope_labels(BILLING, "billing") == {"team": "payments", "outbox": "billing"}
    assert scope_labels(Outbox("default", SETTINGS), "") == {}
    # the rule's own labels win over the outbox's; the outbox label over everything
    assert with_scope({"team": "core", "outbox": "x"}, scope_labels(BILLING, "billing")) == {
        "team": "core",
        "outbox": "billing",
    }


def test_dashboard_paths_carry_the_outbox():
    assert link_outbox("/dead_letters?event_type=payment.%25&window=15m", "billing") == (
        "/dead_letters?event_type=payment.%25&window=15m&outbox=billing"
    )
    assert link_outbox("/health", "orders") == "/health?outbox=orders"
    assert link_outbox("/health?outbox=x", "orders") == "/health?outbox=orders"
    assert link_outbox("/health", "") == "/health"
    payload = {"dashboard_path": "/workers", "timeline_path": "/timeline?at=x", "summary": "s"}
    assert scope_payload(dict(payload), "") == payload
    assert scope_payload(dict(payload), "orders") == {
        "dashboard_path": "/workers?outbox=orders",
        "timeline_path": "/timeline?at=x&outbox=orders",
        "summary": "s",
        "outbox": "orders",
    }


def test_the_settings_of_a_fleet_outbox_key_its_alert_state():
    assert SETTINGS.fleet_outbox == ""
    assert ORDERS.settings.fleet_outbox == "orders"
    assert ORDERS.settings.model_copy(update={"table": "public.x"}).fleet_outbox == "orders"


def test_a_fleet_outbox_stores_its_instance_keys_scoped_by_it():
    for instance, stored in (
        ("", "outbox=orders"),
        ("event_type=order.paid", "outbox=orders,event_type=order.paid"),
    ):
        assert scoped_instance("orders", instance) == stored
        assert unscoped_instance("orders", stored) == instance
        assert scoped_instance("", instance) == unscoped_instance("", instance) == instance


def test_a_label_selector_matching_no_outbox_of_the_fleet_is_refused(tmp_path):
    for selector, expected in (
        ("{team: finance}", "team=finance"),
        ('{team: payments, tier: "2"}', "team=payments, tier=2"),
        ("{outbox: billing}", "outbox=billing"),  # no label is named outbox: list names
    ):
        text = RULES.replace("outboxes: {team: payments}", f"outboxes: {selector}", 1)
        with pytest.raises(RulesError) as caught:
            _load(tmp_path, text)
        assert caught.value.problems == [
            f'{tmp_path / "alerts.yml"}: rules[2] "by-label": outboxes: no outbox of '
            f"outboxes.yml has the labels {expected} (the rule would never evaluate; name "
            "outboxes in a list, e.g. [orders, billing], or use labels they have)"
        ]
    # without a fleet file the labels cannot be checked
    text = RULES.replace("outboxes: {team: payments}", "outboxes: {team: finance}", 1)
    assert _load(tmp_path, text, None).rule("by-label").outboxes == {"team": "finance"}


def test_a_selection_of_the_fleet_checks_rules_against_the_whole_file(tmp_path):
    # `scheduler --outbox orders`: rules naming billing, or labels only ledger has, are valid
    # (not evaluated by this process); an outbox the file lacks is still refused
    only_orders = FLEET.selection([ORDERS])
    assert only_orders.names == ["orders"] and only_orders.in_file == FLEET.outboxes
    ruleset = _load(tmp_path, RULES, only_orders)
    assert [rule.name for rule in ruleset.rules] == [
        "everywhere",
        "by-name",
        "by-label",
        "by-labels",
    ]
    with pytest.raises(
        RulesError,
        match=r'unknown outbox "shipping" \(outboxes.yml lists orders, billing, ledger\)',
    ):
        _load(tmp_path, RULES.replace("[orders, ledger]", "[orders, shipping]"), only_orders)


def test_continue_sends_to_every_matching_branch_up_to_the_first_without_it(tmp_path):
    ruleset = _load(
        tmp_path,
        """
version: 1
routes:
  oncall:
    routes:
      - {matchers: {severity: critical}, route: pager, continue: true}
      - {matchers: {team: payments}, route: hook, continue: true}
      - {matchers: {team: payments}, route: payments}
      - {matchers: {severity: critical}, route: never}
  pager: {type: pagerduty, routing_key_env: PD_KEY}
  hook: {type: webhook, url_env: HOOK_URL, secret_env: HOOK_SECRET}
  payments: {channel: "#payments"}
  never: {channel: "#never"}
rules:
  - {name: backlog, metric: stuck_locks, op: ">", threshold: 0, route: oncall}
""",
    )
    critical_payments = {"severity": "critical", "team": "payments"}
    assert routes_for(ruleset, "oncall", critical_payments) == ["pager", "hook", "payments"]
    # a matching branch with continue and none after it: only that branch, not the parent
    assert routes_for(ruleset, "oncall", {"severity": "critical"}) == ["pager", "never"]
    assert routes_for(ruleset, "oncall", {"team": "payments"}) == ["hook", "payments"]
    assert routes_for(ruleset, "oncall", {"team": "crm"}) == ["oncall"]
