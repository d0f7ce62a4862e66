"""A rule on the forecast (issue 15 item 4, ``predict: 15m``): evaluated from the samples table
by least squares, it fires with a message that says it is a forecast — to the local Slack sink
— and resolves when the trend flattens; too few samples give no value, never a made-up one."""

import pytest

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.state import list_notifications
from tests.alerting import notifications, oncall_rules

RULES = oncall_rules(
    """\
  - name: backlog-forecast
    metric: queue_depth
    op: ">"
    threshold: 20000
    predict: 15m
    severity: warning
    route: oncall
""",
    route=", repeat_interval: 1h, send_resolved: true",
)
MINUTE = 60.0


def add_samples(rows, depths_by_minutes_ago: dict[float, int]) -> None:
    """One sample per ``{minutes ago: queue depth}``, minutes before the test's ``t0``
    (the pass runs a fraction of a second after it)."""
    for minutes, depth in depths_by_minutes_ago.items():
        rows.conn.execute(
            """INSERT INTO outbox_monitor.samples (table_name, sampled_at, queue_depth,
                   pending_total, scheduled_retries, processing, stuck_locks, failed_in_window)
               VALUES ('public.integration_outbox', %s, %s, %s, 0, 0, 0, 0)""",
            (rows.at(minutes * MINUTE), depth, depth),
        )


def test_a_forecast_rule_fires_says_so_and_resolves(
    db, conn, rows, fake_clock, write_rules, slack_sink
):
    ruleset = write_rules(RULES)
    evaluator = Evaluator(db, ruleset, clock=fake_clock)
    for _ in range(3):
        rows.add(event_type="order.paid", created_ago=30)  # named as the top offender

    add_samples(rows, {10: 1740, 5: 5890})
    report = evaluator.run_once()  # two samples: no forecast, nothing fires
    assert report.instance("backlog-forecast").value is None
    assert report.instance("backlog-forecast").state == "inactive"

    # +830 rows/min: 1,740 ten minutes ago, 5,890 five, 10,040 now. By hand: slope 830/min,
    # 20,000 is crossed in (20,000 − 10,040) / 830 = 12 min; in 15 min: 10,040 + 12,450.
    add_samples(rows, {0: 10040})
    report = evaluator.run_once()
    instance = report.instance("backlog-forecast")
    assert instance.transitions == ("inactive→firing",)
    # the pass runs δ after t0: the line is read δ later (830 rows/min = 13.8 rows/s)
    assert instance.value == pytest.approx(22490, abs=30)
    [firing] = notifications(conn)
    forecast = firing["payload"]["forecast"]
    assert forecast["text"] == "queue depth will cross 20,000 in ≈ 12 min at +830 rows/min"
    assert forecast["samples"] == 3 and forecast["horizon_seconds"] == 900
    assert forecast["per_minute"] == pytest.approx(830)
    assert forecast["crossing_seconds"] == pytest.approx(12 * MINUTE, abs=2)
    assert firing["payload"]["summary"] == (
        "backlog-forecast: forecast: queue depth will cross 20,000 in ≈ 12 min at +830 rows/min"
    )

    # the trend flattens: the last 15 min hold at 10,040, so in 15 min it is 10,040 too
    conn.execute("DELETE FROM outbox_monitor.samples")
    add_samples(rows, {10: 10040, 5: 10040, 0: 10040})
    fake_clock.advance(30)
    report = evaluator.run_once()
    assert report.instance("backlog-forecast").transitions == ("firing→inactive",)
    assert report.instance("backlog-forecast").value == pytest.approx(10040)
    resolved = notifications(conn)[-1]
    assert resolved["payload"]["forecast"]["text"] == (
        "queue depth will not cross 20,000 at its trend (+0.00 rows/min)"
    )

    env = {"SLACK_WEBHOOK_URL": slack_sink.webhook_url}
    sent = deliver_due(db, ruleset, clock=fake_clock, transports=transports_for(ruleset, env))
    assert sent["sent"] == 2
    firing_text, resolved_text = [m["text"] for m in slack_sink.messages()]
    assert "FIRING" in firing_text
    assert "queue depth will cross 20,000 in ≈ 12 min at +830 rows/min" in firing_text
    assert "RESOLVED" in resolved_text
    # the Slack section says the value is the forecast, not the depth now
    blocks = str(slack_sink.messages()[0]["blocks"])
    assert "*Forecast in 15m* 22,4" in blocks and "vs threshold 20,000 (&gt;)" in blocks
    assert "order.paid" in blocks  # top offender by queue depth now
    assert [row["kind"] for row in list_notifications(db)] == ["resolved", "firing"]


AGE_RULES = oncall_rules(
    """\
  - name: late-forecast
    metric: oldest_pending_age
    op: ">"
    threshold: 5m
    predict: 15m
    severity: warning
    route: oncall
""",
    route=", repeat_interval: 1h, send_resolved: true",
)


def add_ages(rows, ages_by_minutes_ago: dict[float, float | None]) -> None:
    """One sample per ``{minutes ago: oldest pending age (s), None: nothing pending}``."""
    for minutes, age in ages_by_minutes_ago.items():
        rows.conn.execute(
            """INSERT INTO outbox_monitor.samples (table_name, sampled_at, queue_depth,
                   pending_total, scheduled_retries, processing, stuck_locks, failed_in_window,
                   oldest_pending_age_seconds)
               VALUES ('public.integration_outbox', %s, 0, 0, 0, 0, 0, 0, %s)""",
            (rows.at(minutes * MINUTE), age),
        )


def test_an_age_forecast_starts_again_when_nothing_was_pending(
    db, conn, rows, fake_clock, write_rules
):
    evaluator = Evaluator(db, write_rules(AGE_RULES), clock=fake_clock)
    # a backlog aged 1 s per second 10 to 6 minutes ago, then drained: nothing pending since.
    # Those three ages alone extrapolate to ≈ 700 s now and ≈ 1,600 s in 15 min (> 5 min).
    add_ages(rows, {10: 100, 8: 220, 6: 340, 4: None, 2: None, 0: None})
    report = evaluator.run_once()
    assert report.instance("late-forecast").value is None
    assert report.instance("late-forecast").state == "inactive"

    # a new backlog since, aging 1 s per second from 10 s: only its own ages are the line,
    # by hand 190 s now and 190 + 900 = 1,090 s in 15 min
    conn.execute("DELETE FROM outbox_monitor.samples")
    add_ages(rows, {10: 100, 8: 220, 6: 340, 4: None, 3: 10, 2: 70, 1: 130, 0: 190})
    report = evaluator.run_once()
    instance = report.instance("late-forecast")
    assert instance.transitions == ("inactive→firing",)
    assert instance.value == pytest.approx(1090, abs=2)


def test_a_predict_shorter_than_the_samples_need_is_an_evaluation_error_not_silence(
    db, conn, rows, fake_clock, write_rules
):
    # samples every 15 s: 20 s of them hold one or two, never the three a trend needs
    short = RULES.replace("predict: 15m", "predict: 20s")
    evaluator = Evaluator(db, write_rules(short), clock=fake_clock)
    add_samples(rows, {1 / 6: 1000, 0: 90000})
    instance = evaluator.run_once().instance("backlog-forecast")
    assert instance.state == "error"
    assert instance.error == (
        "ValueError: predict 20s holds fewer than 3 samples taken every 15s "
        "(OUTBOX_MONITOR_SAMPLE_INTERVAL): set predict to 1m or more"
    )
