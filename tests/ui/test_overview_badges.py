"""Badges say whose verdict they are (issue 30 item 4), AppTest of the Overview on rows and
alert states inserted here: each of the issue's cases — a green "ok" from a rule watching
other rows, a filtered tile beside a badge counting all types, a per-type "healthy" set by a
breaker rule no breaker gives — now names the scope of the rules it shows, or says that no
rule watches it."""

from rendered import plain

from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from tests.alerting import evaluate_as_scheduler, oncall_rules, rules_file
from tests.flow import control

RULES = oncall_rules(
    """  - {name: payment-failed, metric: failed_in_window, event_type: "payment.%", window: 15m,
     by: [event_type], op: ">", threshold: 0, severity: critical, route: oncall}
  - {name: stuck-lock, metric: stuck_locks, op: ">", threshold: 0, route: oncall}
  - {name: breaker-open, metric: breaker_open, by: [event_type], op: ">", threshold: 0,
     route: oncall}
"""
)


def tiles(at) -> dict[str, tuple[str, str]]:
    return {m.label: (m.value, m.delta) for m in at.metric}


def evaluated(environment, settings, db, tmp_path) -> None:
    path = rules_file(tmp_path, RULES)
    environment.setenv(RULES_ENV, str(path))
    evaluate_as_scheduler(settings, db, load_rules(path))


def test_failures_no_rule_watches_get_no_ok(open_page, environment, rows, settings, db, tmp_path):
    # dead letters of order.paid in the last 24 h; payment-failed watches payment.% over 15 min
    for ago in (7200, 3600, 600):
        rows.add_failed(event_type="order.paid", processed_ago=ago)
    evaluated(environment, settings, db, tmp_path)

    at = open_page("overview")

    assert not at.exception
    # the "Failed (24 h) 3,988 · ok · payment-failed"
    assert tiles(at)["Failed (24 h)"] == ("3", "no rule watches this")
    assert (
        "No rule watches all of this; payment-failed: ok for each payment.% type over 15m only"
        in [plain(c.value) for c in at.caption]
    )


def test_a_filtered_tile_names_the_scope_its_badge_counts(
    open_page, environment, rows, settings, db, tmp_path
):
    # 2 stuck locks of order.paid, 1 of payment.captured: the rule counts all 3
    for event_type in ("order.paid", "order.paid", "payment.captured"):
        rows.add(event_type=event_type, status="processing", created_ago=1500, locked_ago=1200)
    evaluated(environment, settings, db, tmp_path)

    at = open_page("overview", event_type="order.paid")

    assert not at.exception
    # the Stuck locks tile counting the filtered type (23), its badge all (89)
    assert tiles(at)["Stuck locks"] == ("2", "FIRING for all types: 3")
    assert "stuck-lock [all types]: 3 vs > 0" in [plain(c.value) for c in at.caption]


def test_a_type_no_breaker_watches_is_not_healthy_by_the_breaker_rule(
    open_page, environment, rows, settings, db, conn, tmp_path
):
    rows.add(event_type="crm.contact", created_ago=60)
    rows.add(event_type="erp.order", created_ago=60)
    control(conn, "crm.%", breaker=True)  # closed: its instance is ok
    evaluated(environment, settings, db, tmp_path)

    at = open_page("overview")

    assert not at.exception
    (frame,) = [d.value for d in at.dataframe if "depth trend" in d.value.columns]
    shown = {row["event type"]: (row["status"], row["set by"]) for _, row in frame.iterrows()}
    assert shown == {
        "crm.contact": ("healthy", "breaker-open [each breaker's filter]"),
        # the "status healthy · set by breaker-open" for a type no breaker covers: only
        # the rule over all types holds it
        "erp.order": ("ok for all types", "stuck-lock [all types]"),
    }


def test_a_rule_of_another_outbox_is_no_rule_here(
    open_page, environment, rows, settings, db, tmp_path
):
    path = rules_file(
        tmp_path,
        oncall_rules(
            """  - {name: orders-stuck, metric: stuck_locks, outboxes: [orders], op: ">",
     threshold: 0, route: oncall}
  - {name: backlog, metric: queue_depth, op: ">", threshold: 100, route: oncall}
"""
        ),
    )
    environment.setenv(RULES_ENV, str(path))
    rows.add(status="processing", created_ago=1500, locked_ago=1200)  # a stuck lock
    evaluate_as_scheduler(settings, db, load_rules(path))

    at = open_page("overview")  # the single outbox, named "default": not orders

    assert not at.exception
    assert tiles(at)["Stuck locks"] == ("1", "no rule watches this")
    assert tiles(at)["Queue depth"] == ("0", "ok for all types: 0")
    assert any("1 rule evaluated" in s.value for s in at.success)
