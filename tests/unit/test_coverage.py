"""Whose verdict a badge or a status is (issue 30 item 4), pure: how a rule's scope stands to
what a tile shows (event-type filter, window), each rule named with its scope, a badge never a
bare "ok" from a rule watching other rows, and no "healthy" from a breaker rule for a type
no breaker watches."""

from outbox_monitor.alerts import coverage
from outbox_monitor.alerts.coverage import APART, CONTAINS, PART, Shown, relation, types_relation
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.ui import rule_state
from tests.alerting import oncall_rules, rules_file

HOUR = 3600.0
DAY = 24 * HOUR

RULES = oncall_rules(
    """  - {name: payment-failed, metric: failed_in_window, event_type: "payment.%", window: 15m,
     by: [event_type], op: ">", threshold: 0, route: oncall}
  - {name: stuck-lock, metric: stuck_locks, op: ">", threshold: 0, route: oncall}
  - {name: notifications-late, metric: oldest_pending_age, event_type: "notification.%",
     op: ">", threshold: 5m, route: oncall}
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1000, route: oncall}
  - {name: latency-slo, metric: latency_p95, op: ">", threshold: 2m, route: oncall}
  - {name: breaker-open, metric: breaker_open, by: [event_type], op: ">", threshold: 0,
     route: oncall}
"""
)


def rules(tmp_path):
    ruleset = load_rules(rules_file(tmp_path, RULES))
    return ruleset, {rule.name: rule for rule in ruleset.rules}


def test_event_type_filters_contain_overlap_or_stand_apart():
    assert types_relation(None, None) == CONTAINS  # all types watch all types
    assert types_relation(None, "order.paid") == CONTAINS
    assert types_relation("payment.%", None) == PART  # a tile over all types
    assert types_relation("payment.%", "payment.%") == CONTAINS
    assert types_relation("payment.%", "payment.captured") == CONTAINS
    assert types_relation("payment.%", "order.paid") == APART
    assert types_relation("payment.captured", "payment.%") == PART
    assert types_relation("order.paid", "payment.%") == APART
    assert types_relation("payment.%", "payment.card.%") == CONTAINS  # a narrower pattern
    assert types_relation("%.failed", "order.%.failed") == CONTAINS
    assert types_relation("payment.card.%", "payment.%") == PART  # a wider one
    assert types_relation("payment.%", "order.%") == APART  # literal heads differ
    assert types_relation("payment._", "payment.x") == APART  # "_" is literal without "%"


def test_a_rule_over_another_window_watches_only_part_of_a_tile(tmp_path):
    _, named = rules(tmp_path)
    # failures over 15 min say nothing of the 24 h tile; the payment.% rule is narrower too
    assert relation(named["payment-failed"], Shown(None, DAY), HOUR) == PART
    assert relation(named["payment-failed"], Shown("payment.x", 15 * 60), HOUR) == CONTAINS
    assert relation(named["payment-failed"], Shown("order.paid", 15 * 60), HOUR) == APART
    # a rule without window measures over OUTBOX_MONITOR_WINDOW: the tile's 1 h or not
    assert relation(named["latency-slo"], Shown(None, HOUR), HOUR) == CONTAINS
    assert relation(named["latency-slo"], Shown(None, 6 * HOUR), HOUR) == PART
    assert relation(named["stuck-lock"], Shown("order.paid"), HOUR) == CONTAINS


def test_each_rule_is_named_with_its_scope(tmp_path):
    ruleset, named = rules(tmp_path)
    assert coverage.scope_text(named["payment-failed"]) == "payment.%, per event type, over 15m"
    assert coverage.scope_text(named["stuck-lock"]) == "all types"
    assert coverage.scope_text(named["breaker-open"]) == "each breaker's filter"
    verdict = coverage.Verdict("failing", ("payment-failed", "stuck-lock"))
    assert coverage.set_by(verdict, ruleset) == (
        "payment-failed [payment.%, per event type, over 15m]; stuck-lock [all types]"
    )
    assert coverage.set_by(coverage.Verdict(coverage.UNCOVERED), ruleset) == "–"
    whole = coverage.Verdict(coverage.ALL_OK, ("stuck-lock", "backlog", "latency-slo"))
    assert coverage.set_by(whole, ruleset) == "stuck-lock, backlog, latency-slo [all types]"


def test_a_breaker_rule_covers_only_the_types_a_breaker_watches(tmp_path):
    ruleset, named = rules(tmp_path)
    # one breaker, on crm.%, closed: its instance is ok
    instances = [
        {
            "rule": "breaker-open",
            "instance": "event_type=crm.%",
            "labels": {"event_type": "crm.%"},
            "state": "inactive",
        }
    ]
    assert coverage.verdict("crm.contact", instances, ruleset) == coverage.Verdict(
        coverage.HEALTHY, ("breaker-open",)
    )
    # the "healthy · set by breaker-open" for a type no breaker covers: the rules over
    # all types hold its rows, none firing; with none of them, no rule covers it
    assert coverage.verdict("erp.order", instances, ruleset) == coverage.Verdict(
        coverage.ALL_OK, ("stuck-lock", "backlog", "latency-slo")
    )
    breakers = ruleset.model_copy(update={"rules": [named["breaker-open"]]})
    assert coverage.verdict("erp.order", instances, breakers) == coverage.Verdict(
        coverage.UNCOVERED
    )
    stuck = {"rule": "stuck-lock", "instance": "", "state": "firing", "value": 3.0}
    assert coverage.verdict("erp.order", [*instances, stuck], ruleset) == coverage.Verdict(
        coverage.ALL_FIRING, ("stuck-lock",)
    )


def badge(tmp_path, metric, instances, **shown):
    ruleset, _ = rules(tmp_path)
    return rule_state.badge(
        metric, ruleset, instances, down=None, now=None, default_window=HOUR, **shown
    )


def test_a_rule_watching_other_rows_gives_no_ok(tmp_path):
    # the "Failed (24 h) 3,988 · ok · payment-failed": it watches payment.% over 15 min
    found = badge(tmp_path, "failed_in_window", [], window=DAY)
    assert (found.text, found.color) == ("no rule watches this", "gray")
    assert found.line == (
        "No rule watches all of this; payment-failed: ok for each payment.% type over 15m only"
    )
    # the oldest-age tile over all types, notifications-late over notification.% only
    late = {"rule": "notifications-late", "instance": "", "state": "inactive", "value": 64.0}
    found = badge(tmp_path, "oldest_pending_age", [late])
    assert found.text == "no rule watches this"
    assert found.line.endswith("notifications-late: ok for notification.% only: 1m 4s")
    # filtered to order.paid, notification.% is other rows altogether
    found = badge(tmp_path, "oldest_pending_age", [late], event_type="order.paid")
    assert found.text == "no rule watches this"
    assert found.detail == "watches other rows · notifications-late [notification.%]"
    assert badge(tmp_path, "processing", []).text == "no rule watches this"  # none at all


def test_a_badge_says_the_scope_of_its_verdict(tmp_path):
    # the Stuck locks tile filtered to one type (23) while all types have 89
    stuck = {"rule": "stuck-lock", "instance": "", "state": "firing", "value": 89.0}
    found = badge(tmp_path, "stuck_locks", [stuck], event_type="order.paid")
    assert (found.text, found.color) == ("FIRING for all types: 89", "red")
    assert found.line == "stuck-lock [all types]: 89 vs > 0"
    backlog = {"rule": "backlog", "instance": "", "state": "inactive", "value": 2.0}
    found = badge(tmp_path, "queue_depth", [backlog])
    assert (found.text, found.color) == ("ok for all types: 2", "green")
    assert badge(tmp_path, "queue_depth", []).text == "not evaluated yet for all types"
    # a narrower rule firing heads the badge, saying it is only part of the tile
    paid = {
        "rule": "payment-failed",
        "instance": "event_type=payment.captured",
        "labels": {"event_type": "payment.captured"},
        "state": "firing",
        "value": 3.0,
    }
    found = badge(tmp_path, "failed_in_window", [paid], window=DAY)
    assert (found.text, found.color) == ("FIRING for payment.captured over 15m only: 3", "red")
    # the tile filtered to another type does not count that instance
    found = badge(tmp_path, "failed_in_window", [paid], event_type="payment.refunded", window=900)
    assert (found.text, found.color) == ("ok for payment.refunded", "green")


def test_a_badge_without_a_value_says_no_number(tmp_path):
    # nothing done in the window: the latency rule is ok and has no value
    slo = {"rule": "latency-slo", "instance": "", "state": "inactive", "value": None}
    assert badge(tmp_path, "latency_p95", [slo], window=HOUR).text == "ok for all types"
    # over 6 h it is another window than the rule's 1 h (OUTBOX_MONITOR_WINDOW)
    found = badge(tmp_path, "latency_p95", [slo], window=6 * HOUR)
    assert found.text == "no rule watches this"
    assert found.line == "No rule watches all of this; latency-slo: ok for all types over 1h only"
