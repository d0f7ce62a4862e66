"""A route's grouping (issue 31 item 3): ``group_by``, ``group_wait`` and ``group_interval``
validated with the route and field named, refused on an ``alertmanager`` route (Alertmanager
groups by its own configuration); the group's labels, key and the merge of its instances
computed by hand. No database."""

import pytest

from outbox_monitor.alerts.grouping import (
    group_alert_key,
    group_hash,
    group_labels,
    member_rows,
    merge_members,
)
from outbox_monitor.alerts.message_key import alert_key
from tests.unit.test_reference import refused
from tests.unit.test_rules import only_problem, variant


def with_route(route: dict) -> object:
    def change(data: dict) -> None:
        data["routes"]["oncall"] = route

    return change


MALFORMED = [
    pytest.param(
        {"type": "alertmanager", "alertmanager_urls": ["http://am:9093"], "group_by": ["rule"]},
        "routes.oncall: a type: alertmanager route takes no group_by (Alertmanager's own "
        "configuration groups",
        id="alertmanager-group-by",
    ),
    pytest.param(
        {"webhook_url_env": "HOOK", "group_wait": "10s"},
        "routes.oncall: group_wait applies only to a route with group_by",
        id="wait-without-group-by",
    ),
    pytest.param(
        {"webhook_url_env": "HOOK", "group_interval": "1m"},
        "routes.oncall: group_interval applies only to a route with group_by",
        id="interval-without-group-by",
    ),
    pytest.param(
        {"webhook_url_env": "HOOK", "group_by": "rule"},
        "routes.oncall.group_by: expected a list of 1 to 20 label names (e.g. [rule, event_type]), "
        'got "rule"',
        id="not-a-list",
    ),
    pytest.param(
        {"webhook_url_env": "HOOK", "group_by": ["event-type"]},
        "routes.oncall.group_by: expected label names",
        id="bad-label",
    ),
    pytest.param(
        {"webhook_url_env": "HOOK", "group_by": ["rule", "rule"]},
        "routes.oncall.group_by: names a label twice",
        id="twice",
    ),
    pytest.param(
        {"webhook_url_env": "HOOK", "group_by": ["rule"], "group_wait": "0s"},
        "routes.oncall.group_wait: must be longer than 0s",
        id="zero-wait",
    ),
]


@pytest.mark.parametrize(("route", "expected"), MALFORMED)
def test_a_malformed_grouping_names_the_route_and_field(tmp_path, route, expected):
    problem = only_problem(tmp_path, with_route(route))
    assert problem.startswith(expected), problem
    if "twice" not in expected:  # the schema's keywords say no uniqueness (test_reference)
        assert refused("alerts", variant(with_route(route))), f"the loader says {expected!r}"


def test_defaults_and_durations(write_rules):
    ruleset = write_rules(
        variant(with_route({"webhook_url_env": "HOOK", "group_by": ["rule", "event_type"]}))
    )
    route = ruleset.routes["oncall"]
    assert (route.group_by, route.group_wait, route.group_interval) == (
        ("rule", "event_type"),
        30.0,
        300.0,
    )
    assert ruleset.routes["payments"].group_by is None  # without it: today's behaviour
    timed = write_rules(
        variant(
            with_route(
                {
                    "webhook_url_env": "HOOK",
                    "group_by": ["rule"],
                    "group_wait": "1.5s",
                    "group_interval": "2m",
                }
            )
        )
    )
    assert (timed.routes["oncall"].group_wait, timed.routes["oncall"].group_interval) == (
        1.5,
        120.0,
    )
    document = variant(with_route({"webhook_url_env": "HOOK", "group_by": ["rule"]}))
    assert refused("alerts", document) == []


def test_group_labels_key_and_members():
    labels = {"rule": "backlog", "severity": "critical", "event_type": "order.paid"}
    assert group_labels(("rule", "team"), labels) == {"rule": "backlog", "team": ""}
    assert group_hash({"rule": "a", "team": ""}) == group_hash({"team": "", "rule": "a"})
    assert len(group_hash({"event_type": "x" * 100_000})) == 64
    key = group_alert_key("", "pd", {"rule": "backlog"}, 2)
    assert key == alert_key("", "group:pd", '{"rule": "backlog"}', 2) and len(key) == 68

    def row(id_, instance, kind):
        return {
            "id": id_,
            "rule": "r",
            "instance": instance,
            "kind": kind,
            "dedupe_key": f"r|{instance}|1|{kind}",
            "payload": {"summary": instance},
        }

    first = merge_members([], [row(1, "a", "firing"), row(2, "b", "firing")])
    assert [(m["instance"], m["status"], m["changed"]) for m in first] == [
        ("a", "firing", True),
        ("b", "firing", True),
    ]
    kept = [{k: v for k, v in m.items() if k != "changed"} for m in first]
    later = merge_members(kept, [row(3, "a", "resolved"), row(4, "c", "firing")])
    assert [(m["instance"], m["status"], m["changed"]) for m in later] == [
        ("a", "resolved", True),
        ("b", "firing", False),
        ("c", "firing", True),
    ]
    assert [r["id"] for r in member_rows(later)] == [1, 2, 3, 4]
    # a repeat refreshes a firing instance without changing the group
    repeated = merge_members(kept, [row(5, "b", "repeat")])
    assert [(m["instance"], m["changed"], m["row"]["id"]) for m in repeated] == [
        ("a", False, 1),
        ("b", False, 5),
    ]
