"""A forecast rule scoped to event types (issue 15 item 4, ``predict`` with ``event_type`` or
``by: [event_type]``): each type is forecast from its own rows of
``outbox_monitor.event_type_samples`` (migration 014) on a known linear series; a type the
samples folded into ``other``, or never sampled, gives no forecast and says why."""

import json

import pytest
from click.testing import CliRunner

from outbox_monitor.alerts import measure
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.cli import main
from tests.alerting import notifications, oncall_rules, rules_file

MINUTE = 60.0
TABLE = "public.integration_outbox"


def rules(scope: str) -> str:
    return oncall_rules(
        f"""\
  - name: paid-backlog-forecast
    metric: queue_depth
    {scope}
    op: ">"
    threshold: 1000
    predict: 15m
    severity: warning
    route: oncall
""",
        route=", repeat_interval: 1h, send_resolved: true",
    )


def add_sample(rows, minutes: float, total: int, by_type: dict[str, int]) -> None:
    """One headline sample (queue depth and pending ``total``) ``minutes`` before ``t0`` and
    its per-type rows ``{event type (or other): queue depth}``."""
    at = rows.at(minutes * MINUTE)
    rows.conn.execute(
        """INSERT INTO outbox_monitor.samples (table_name, sampled_at, queue_depth,
               pending_total, scheduled_retries, processing, stuck_locks, failed_in_window)
           VALUES (%s, %s, %s, %s, 0, 0, 0, 0)""",
        (TABLE, at, total, total),
    )
    for event_type, depth in by_type.items():
        rows.conn.execute(
            """INSERT INTO outbox_monitor.event_type_samples (table_name, sampled_at,
                   event_type, queue_depth, oldest_pending_age_seconds, failed_in_window,
                   retrying)
               VALUES (%s, %s, %s, %s, 60, 0, 0)""",
            (TABLE, at, event_type, depth),
        )


def seed(rows) -> None:
    # order.paid grows +60 rows/min: 100, 400, 700 ten, five and zero minutes before t0; the
    # table in all grows faster (other types). mail.sent was folded into "other" (outside the
    # top N) in the first two samples and kept in the last.
    add_sample(rows, 10, 5100, {"order.paid": 100, "other": 5000})
    add_sample(rows, 5, 5900, {"order.paid": 400, "other": 5500})
    add_sample(rows, 0, 6750, {"order.paid": 700, "mail.sent": 50, "other": 6000})
    for event_type in ("order.paid", "mail.sent"):
        rows.add(event_type=event_type, created_ago=30)  # instances of by: [event_type]


def test_a_rule_scoped_to_one_event_type_is_forecast_from_its_own_samples(
    db, conn, rows, fake_clock, write_rules
):
    seed(rows)
    evaluator = Evaluator(db, write_rules(rules("event_type: order.paid")), clock=fake_clock)
    instance = evaluator.run_once().instance("paid-backlog-forecast")
    # By hand: slope 60 rows/min, 700 now; in 15 min 700 + 900 = 1,600 > 1,000 (fires);
    # 1,000 is crossed in (1,000 − 700) / 60 = 5 min (all types together: +165 rows/min).
    assert instance.transitions == ("inactive→firing",)
    assert instance.value == pytest.approx(1600, abs=2)  # the pass runs δ after t0: +1/s
    [firing] = notifications(conn)
    forecast = firing["payload"]["forecast"]
    assert (
        forecast["text"]
        == "queue depth of order.paid will cross 1,000 in ≈ 5 min at +60.0 rows/min"
    )
    assert forecast["samples"] == 3 and forecast["per_minute"] == pytest.approx(60)
    assert forecast["crossing_seconds"] == pytest.approx(5 * MINUTE, abs=2)


def test_by_event_type_forecasts_each_type_and_says_which_were_folded(
    db, conn, rows, fake_clock, write_rules
):
    seed(rows)
    ruleset = write_rules(rules("by: [event_type]"))
    report = Evaluator(db, ruleset, clock=fake_clock).run_once()
    paid = report.instance("paid-backlog-forecast", "event_type=order.paid")
    mail = report.instance("paid-backlog-forecast", "event_type=mail.sent")
    assert paid.transitions == ("inactive→firing",)
    assert paid.value == pytest.approx(1600, abs=2)
    # mail.sent: one sample of its own, two folded into other: no forecast, and it says so
    assert (mail.value, mail.state) == (None, "inactive")
    forecasts = {m.instance: m.forecast for m in measure.measure(db, ruleset.rules[0])}
    assert forecasts["event_type=mail.sent"].text == (
        "no forecast for queue depth of mail.sent: 1 sample(s) in the last 15m (needs 3; the "
        "scheduler records them); 2 sample(s) folded mail.sent into other (not among the top "
        "10 event types by trouble, OUTBOX_MONITOR_METRICS_TOP_EVENT_TYPES)"
    )


def test_samples_from_before_per_type_sampling_are_left_out_and_said(
    db, conn, rows, fake_clock, write_rules
):
    add_sample(rows, 10, 100, {})  # before migration 014: pending rows, no per-type rows
    add_sample(rows, 5, 0, {})  # an empty table: every type's depth was 0
    add_sample(rows, 0, 30, {"order.paid": 30})
    rows.add(event_type="order.paid", created_ago=30)
    ruleset = write_rules(rules("event_type: order.paid"))
    instance = Evaluator(db, ruleset, clock=fake_clock).run_once().instance("paid-backlog-forecast")
    assert instance.value is None
    [measured] = measure.measure(db, ruleset.rules[0])
    assert measured.forecast.text == (
        "no forecast for queue depth of order.paid: 2 sample(s) in the last 15m (needs 3; the "
        "scheduler records them); 1 sample(s) hold no event types (before migration 014)"
    )


def test_check_says_why_a_type_has_no_forecast(dsn, rows, tmp_path):
    seed(rows)
    path = rules_file(tmp_path, rules("by: [event_type]"))
    result = CliRunner().invoke(main, ["check", "--rules", str(path), "--dsn", dsn, "--json"])
    found = {r["instance"]: r for r in json.loads(result.stdout)["rules"]}
    assert found["event_type=mail.sent"]["value"] is None
    assert found["event_type=mail.sent"]["forecast"].startswith(
        "no forecast for queue depth of mail.sent: 1 sample(s)"
    )
    assert "2 sample(s) folded mail.sent into other" in found["event_type=mail.sent"]["forecast"]
    assert found["event_type=order.paid"]["breached"] is True
