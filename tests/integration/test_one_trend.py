"""One trend per series (issue 30 item 3) on hand-made samples in the database: the Overview's
trend of a scope — all types from the headline samples, one type from its own rows — is the
evaluator's least-squares fit of a ``predict: 15m`` rule on the same samples, and the breach
time a rule without ``predict`` gets from it is the forecast's crossing."""

import pytest

from outbox_monitor.alerts import measure
from outbox_monitor.browse.events import database_now
from outbox_monitor.figures import by_event_type, metrics
from outbox_monitor.figures.forecast import DEFAULT_LOOKBACK_SECONDS, scope_points, series_trend
from outbox_monitor.units import OTHER
from tests.integration.test_forecast_scoped import MINUTE, rules, seed


def test_the_overview_trend_is_the_evaluators_fit_over_the_same_window(db, rows, write_rules):
    seed(rows)  # order.paid 100, 400, 700; all types 5,100, 5,900, 6,750 at −10, −5, 0 min
    window = DEFAULT_LOOKBACK_SECONDS
    now = database_now(db)
    samples = metrics.samples_series(db, window=window)
    type_rows = by_event_type.history(db, event_types=["order.paid", OTHER], window=window)

    paid = series_trend(
        scope_points(samples, type_rows, "queue_depth", now, event_type="order.paid")
    )
    every = series_trend(scope_points(samples, type_rows, "queue_depth", now))

    # by hand: order.paid +300 rows per 5 min = +60 rows/min; all types: Σ(t − t̄)(v − v̄) =
    # (−300)(−816.7) + 300 · 833.3 = 495,000 over Σ(t − t̄)² = 180,000: +165 rows/min
    assert paid.samples == 3 and paid.trend.per_minute == pytest.approx(60)
    assert every.samples == 3 and every.trend.per_minute == pytest.approx(165)
    assert paid.text(700) == "trend over 15m: +60.0 rows/min · drains never"
    # the evaluator's forecast of a predict: 15m rule over order.paid: the same line
    [rule] = write_rules(rules("event_type: order.paid")).rules
    [predicted] = measure.rule_forecasts(db, rule, ["order.paid"])
    assert predicted.trend.per_minute == pytest.approx(paid.trend.per_minute)
    # a rule without predict breaks by the Overview's trend when the forecast says: 1,000 is
    # (1,000 − 700) / 60 = 5 min away (each read's own now: within 2 s)
    breach = paid.breach("queue_depth", ">", 1000)
    assert breach.crossing == pytest.approx(5 * MINUTE, abs=2)
    assert breach.crossing == pytest.approx(predicted.crossing, abs=2)
    assert breach.crossing_text == "breaches in ≈ 5 min"
