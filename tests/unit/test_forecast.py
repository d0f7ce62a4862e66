"""Forecasts (issue 15 item 4), pure: least squares on a known linear series, the crossing
time, the drain ETA — each against values computed by hand below."""

from datetime import UTC, datetime, timedelta

import pytest

from outbox_monitor.figures.forecast import (
    MIN_SAMPLES,
    drain_eta,
    drain_eta_of,
    fit_trend,
    forecast,
    sample_points,
    scope_points,
    seconds_to_cross,
    series_trend,
    type_sample_points,
)

# t (s from now), queue depth. By hand: t̄ = −300, v̄ = 1600 / 4 = 400;
# Σ(t−t̄)(v−v̄) = (−300)(−300) + (−100)(−60) + (100)(60) + (300)(300) = 192,000;
# Σ(t−t̄)² = 90,000 + 10,000 + 10,000 + 90,000 = 200,000;
# slope = 0.96 rows/s = 57.6 rows/min; intercept = 400 − 0.96 · (−300) = 688 (now).
SERIES = [(-600.0, 100.0), (-400.0, 340.0), (-200.0, 460.0), (0.0, 700.0)]


def test_least_squares_of_a_known_series():
    trend = fit_trend(SERIES)
    assert trend is not None
    assert trend.slope == pytest.approx(0.96)
    assert trend.per_minute == pytest.approx(57.6)
    assert trend.intercept == pytest.approx(688.0)
    assert trend.samples == 4
    assert trend.at(900) == pytest.approx(688 + 0.96 * 900)  # 1,552 in 15 min


def test_an_exact_line_is_found_exactly():
    line = [(t, 40.0 + 2.5 * t) for t in (-300.0, -120.0, -60.0, 0.0)]
    trend = fit_trend(line)
    assert (trend.intercept, trend.slope) == (pytest.approx(40.0), pytest.approx(2.5))


def test_crossing_time():
    trend = fit_trend(SERIES)
    # (1,000 − 688) / 0.96 = 325 s
    assert seconds_to_cross(trend, ">", 1000) == pytest.approx(325.0)
    assert seconds_to_cross(trend, ">", 600) == 0.0  # 688 is past 600 now
    assert seconds_to_cross(trend, "<", 100) is None  # rising: never falls below 100
    assert seconds_to_cross(trend, "==", 1000) is None
    falling = fit_trend([(-120.0, 300.0), (-60.0, 200.0), (0.0, 100.0)])  # −100 per minute
    assert seconds_to_cross(falling, "<", 50) == pytest.approx(30.0)
    flat = fit_trend([(-120.0, 5.0), (-60.0, 5.0), (0.0, 5.0)])
    assert seconds_to_cross(flat, ">", 10) is None


def test_the_forecast_says_when_and_how_fast():
    found = forecast("queue_depth", "rows", ">", 1000, SERIES, horizon=900, lookback=900)
    assert found.value == pytest.approx(1552.0)
    assert found.breached and found.crossing == pytest.approx(325.0)
    # 325 s ≈ 5 min
    assert found.text == "queue depth will cross 1,000 in ≈ 5 min at +57.6 rows/min"
    assert found.breach_text == "breaches in ≈ 5 min at +57.6 rows/min"
    # the example: 10,000 crossed in 12 min at +830 rows/min from 40 now
    example = [(t, 40.0 + 830.0 / 60 * t) for t in (-600.0, -300.0, 0.0)]
    found = forecast("queue_depth", "rows", ">", 10_000, example, horizon=900, lookback=900)
    assert found.text == "queue depth will cross 10,000 in ≈ 12 min at +830 rows/min"
    age = [(-120.0, 100.0), (-60.0, 160.0), (0.0, 220.0)]  # an age growing in real time
    found = forecast("oldest_pending_age", "seconds", ">", 300, age, horizon=60, lookback=120)
    assert found.text == "oldest pending age will cross 5m 0s in ≈ 1 min at +1m 0s/min"
    assert not found.breached  # 280 s in 60 s: not yet past 300 s at the horizon


def test_too_few_samples_give_no_forecast_and_say_so():
    found = forecast("queue_depth", "rows", ">", 10, SERIES[:2], horizon=900, lookback=900)
    assert MIN_SAMPLES == 3
    assert found.trend is None and found.value is None and not found.breached
    assert found.crossing is None
    assert found.breach_text == "no forecast: 2 sample(s) in the last 15m (needs 3)"
    assert found.text.startswith("no forecast for queue depth: 2 sample(s) in the last 15m")
    same_instant = [(0.0, 1.0), (0.0, 2.0), (0.0, 3.0)]
    assert fit_trend(same_instant) is None


def test_sample_points_are_seconds_from_now_without_empty_values():
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    samples = [
        {"sampled_at": now - timedelta(minutes=2), "oldest_pending_age_seconds": None},
        {"sampled_at": now - timedelta(minutes=1), "oldest_pending_age_seconds": 30},
        {"sampled_at": now, "oldest_pending_age_seconds": 90.0},
    ]
    assert sample_points(samples, "oldest_pending_age_seconds", now) == [
        (-60.0, 30.0),
        (0.0, 90.0),
    ]


def test_drain_eta_by_hand():
    # 1,200 due; 50/min processed − 20/min created = 30/min net: 1,200 / 30 = 40 min
    eta = drain_eta(1200, 50.0, 20.0)
    assert (eta.seconds, eta.net_per_minute) == (2400.0, 30.0)
    assert eta.text == "≈ 40 min (drains 30.0/min net)"
    grows = drain_eta(1200, 20.0, 50.0)
    assert grows.seconds is None and grows.text == "never: grows by 30.0/min"
    holds = drain_eta(5, 2.0, 2.0)
    assert holds.seconds is None and holds.text == "never: processed as fast as created"
    empty = drain_eta(0, 0.0, 3.0)
    assert empty.seconds == 0.0 and empty.text == "empty"
    assert drain_eta(10, None, None).seconds is None  # no rates: never
    figures = {"queue_depth": 90, "processed_per_minute": 4.0, "created_per_minute": 1.0}
    assert drain_eta_of(figures).seconds == 1800.0  # 90 / 3 per minute = 30 min
    assert drain_eta(7200 * 3, 3.0, 0.0).text == "≈ 5d 0h (drains 3.00/min net)"
    # dead letters leave the queue too: 20 done + 4 dead-lettered − 20 created = 4/min net
    assert drain_eta(40, 20.0, 20.0, 4.0).seconds == 600.0
    # 1,133 done + 240 dead-lettered in 1 h (4/min) − 1,135 created: 2/min net, 10 rows in 5 min
    steady = {"queue_depth": 10, "processed_per_minute": 1133.0, "created_per_minute": 1135.0}
    assert drain_eta_of(steady).text == "never: grows by 2.00/min"
    steady.update(failed_in_window=240, window_seconds=3600.0)
    assert drain_eta_of(steady).seconds == 300.0


def test_one_event_types_points_say_what_was_folded_or_not_sampled():
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def at(minutes: int) -> datetime:
        return now - timedelta(minutes=minutes)

    samples = [
        {"sampled_at": at(m), "pending_total": total}
        for m, total in ((25, 40), (20, 0), (15, 90), (10, 90), (5, 90), (0, 90))
    ]
    type_rows = [
        {"sampled_at": at(15), "event_type": "order.paid", "queue_depth": 10},  # its own
        {"sampled_at": at(10), "event_type": "other", "queue_depth": 60},  # folded
        {"sampled_at": at(5), "event_type": "mail.sent", "queue_depth": 90},  # it had none
        {"sampled_at": at(0), "event_type": "order.paid", "queue_depth": 40},
    ]
    found = type_sample_points(samples, type_rows, "order.paid", "queue_depth", now)
    # 25 min ago: pending rows but no per-type rows (before migration 014); 20: empty table
    assert found.points == [(-1200.0, 0.0), (-900.0, 10.0), (-300.0, 0.0), (0.0, 40.0)]
    assert (found.folded, found.unsampled) == (1, 1)
    assert found.left_out("order.paid", 10) == (
        "1 sample(s) folded order.paid into other (not among the top 10 event types by "
        "trouble, OUTBOX_MONITOR_METRICS_TOP_EVENT_TYPES); 1 sample(s) hold no event types "
        "(before migration 014)"
    )
    # an age: no point where the type had no pending row; a type named "other" is folded
    ages = type_sample_points(samples, [], "order.paid", "oldest_pending_age_seconds", now)
    assert ages.points == [] and ages.unsampled == 5
    assert type_sample_points(samples, type_rows, "other", "queue_depth", now).folded == 1


def test_a_crossing_past_a_hundred_lookbacks_is_not_told():
    # +1 row per 100 s over 15 min of samples: 1,000,000 is ≈ 3.2 years away
    creeping = [(-600.0, 100.0), (-300.0, 103.0), (0.0, 106.0)]
    found = forecast("queue_depth", "rows", ">", 1_000_000, creeping, horizon=900, lookback=900)
    assert found.reach == 90_000.0  # 100 × 15 min
    assert found.crossing is None and not found.breached
    assert (
        found.text
        == "queue depth will not cross 1,000,000 within 25h at its trend (+0.60 rows/min)"
    )
    assert found.breach_text == "no breach within 25h at its trend (+0.60 rows/min)"
    # within reach it is told: 500 is (500 − 106) / 0.01 s = 39,400 s ≈ 10h 56m away
    near = forecast("queue_depth", "rows", ">", 500, creeping, horizon=900, lookback=900)
    assert near.crossing == pytest.approx((500 - 106) / 0.01)
    assert near.breach_text == "breaches in ≈ 10h 56m at +0.60 rows/min"


def test_a_draining_backlog_past_the_threshold_is_not_called_a_breach():
    # the newcomer's demo: depth 5,000 → 2,000 → 3 over 10 min, threshold 1,000: the fitted
    # value now (≈ 98) is under it, and a line fitted higher would still be heading out
    draining = [(-600.0, 5000.0), (-300.0, 2000.0), (0.0, 3.0)]
    found = forecast("queue_depth", "rows", ">", 1000, draining, horizon=900, lookback=900)
    assert found.crossing is None
    assert found.breach_text.startswith("no breach at its trend (−")
    # past the threshold by the fit and heading out of it: no breach either
    assert (
        seconds_to_cross(fit_trend([(-60.0, 3000.0), (0.0, 2500.0), (-30.0, 2750.0)]), ">", 1000)
        is None
    )
    # past it and not heading out: breached now
    assert (
        seconds_to_cross(fit_trend([(-60.0, 3000.0), (0.0, 3500.0), (-30.0, 3250.0)]), ">", 1000)
        == 0
    )


def test_one_trend_gives_the_slope_the_drain_eta_and_the_breach():
    # depth 30, 20, 10 at −10, −5 and 0 min: −10 rows per 5 min = −2.00 rows/min, 10 left
    draining = series_trend([(-600.0, 30.0), (-300.0, 20.0), (0.0, 10.0)])
    assert (draining.window, draining.samples) == (900.0, 3)
    assert draining.trend is not None and draining.trend.per_minute == pytest.approx(-2.0)
    assert draining.rate_text == "−2.00 rows/min"
    # 10 rows at 2 rows/min: 5 min
    assert draining.drain(10).seconds == pytest.approx(300.0)
    assert draining.drain_text(10) == "≈ 5 min"
    assert draining.text(10) == "trend over 15m: −2.00 rows/min · drains in ≈ 5 min"
    assert draining.text(0) == "trend over 15m: −2.00 rows/min · queue empty"
    assert draining.text() == "trend over 15m: −2.00 rows/min"  # an age: no drain ETA
    # depth 4, 7, 10: +3 rows per 5 min = +0.60 rows/min; it never drains
    growing = series_trend([(-600.0, 4.0), (-300.0, 7.0), (0.0, 10.0)])
    assert growing.text(10) == "trend over 15m: +0.60 rows/min · drains never"
    # a rule without predict breaks by the same trend: (100 − 10) / 0.01 per s = 9,000 s
    breach = growing.breach("queue_depth", ">", 100)
    assert (breach.lookback, breach.horizon, breach.samples) == (900.0, 900.0, 3)
    assert breach.crossing == pytest.approx(9000.0)
    assert breach.crossing_text == "breaches in ≈ 2h 30m"
    assert growing.breach("queue_depth", ">", 5).crossing_text == "breached by this trend"
    assert draining.breach("queue_depth", ">", 100).crossing_text == "no breach at this trend"


def test_the_trend_keeps_only_its_window_and_says_why_it_has_none():
    # a point 20 min old is outside the 15 min: two points left, no trend
    found = series_trend([(-1200.0, 100.0), (-600.0, 4.0), (0.0, 10.0)])
    assert (found.samples, found.trend) == (2, None)
    assert found.rate_text == "no trend"
    assert found.drain(10) is None and found.drain_text(10) == "unknown"
    assert found.drain_text(0) == "empty"  # nothing to drain needs no trend
    assert found.text(10) == (
        "trend over 15m: none yet (2 samples, needs 3: the scheduler records them)"
    )
    assert found.breach("queue_depth", ">", 100).crossing_text == "no forecast"
    # an age's trend: +1m 0s per minute
    age = series_trend([(-120.0, 100.0), (-60.0, 160.0), (0.0, 220.0)], unit="seconds")
    assert age.rate_text == "+1m 0s/min"


def test_scope_points_read_all_types_or_one_as_the_evaluator_does():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    samples = [
        {"sampled_at": now - timedelta(minutes=m), "pending_total": 9, "queue_depth": d}
        for m, d in ((10, 9), (5, 9), (0, 9))
    ]
    type_rows = [
        {"sampled_at": now - timedelta(minutes=10), "event_type": "order.paid", "queue_depth": 4},
        {"sampled_at": now - timedelta(minutes=10), "event_type": "mail.sent", "queue_depth": 5},
        {"sampled_at": now - timedelta(minutes=5), "event_type": "other", "queue_depth": 9},
        {"sampled_at": now, "event_type": "order.paid", "queue_depth": 6},
    ]
    assert scope_points(samples, type_rows, "queue_depth", now) == [
        (-600.0, 9.0),
        (-300.0, 9.0),
        (0.0, 9.0),
    ]
    # its own rows; 5 min ago folded into other: no point (mail.sent's row is not its)
    assert scope_points(samples, type_rows, "queue_depth", now, event_type="order.paid") == [
        (-600.0, 4.0),
        (0.0, 6.0),
    ]
