"""The dashboard's pure helpers: SLO judgement, formats, inputs, chart data (no database)."""

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from outbox_monitor.ui import charts, format, inputs, slo

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("threshold", "value", "expected"),
    [
        (slo.OLDEST_PENDING_AGE, 300.0, (False, "within SLO ≤ 5m", "green")),
        (slo.OLDEST_PENDING_AGE, 300.5, (True, "SLO ≤ 5m breached", "red")),
        (slo.OLDEST_PENDING_AGE, None, (False, "within SLO ≤ 5m", "green")),
        (slo.QUEUE_DEPTH, 1000, (False, "within SLO ≤ 1,000", "green")),
        (slo.QUEUE_DEPTH, 1001, (True, "SLO ≤ 1,000 breached", "red")),
        (slo.LATENCY_P95, 121, (True, "SLO ≤ 2m breached", "red")),
        (slo.FAILED_IN_WINDOW, 0, (False, "within SLO = 0", "green")),
        (slo.STUCK_LOCKS, 1, (True, "SLO = 0 breached", "red")),
    ],
)
def test_slo_is_breached_only_above_its_limit(threshold, value, expected):
    judgement = slo.judge(threshold, value)
    assert (judgement.breached, judgement.text, judgement.color) == expected


def test_slo_limits_are_spec_section_3():
    assert slo.OLDEST_PENDING_AGE.limit == 300
    assert slo.QUEUE_DEPTH.limit == 1000
    assert slo.LATENCY_P95.limit == 120
    assert slo.FAILED_IN_WINDOW.limit == 0
    assert slo.STUCK_LOCKS.limit == 0


@pytest.mark.parametrize(
    ("seconds", "label"),
    [
        (15, "15s"),
        (300, "5m"),
        (900, "15m"),
        (3600, "1h"),
        (5400, "90m"),
        (86400, "24h"),
        (172800, "2d"),
        (90.5, "90.5s"),
    ],
)
def test_short_duration_labels(seconds, label):
    assert format.short_duration(seconds) == label


def test_formats():
    assert format.count(1234567) == "1,234,567"
    assert format.count(None) == "–"
    assert format.per_minute(5 / 60) == "0.08/min"
    assert format.per_minute(12.345) == "12.3/min"
    assert format.per_minute(1234.4) == "1,234/min"
    assert format.rows(1) == "1 row"
    assert format.rows(1200) == "1,200 rows"
    assert format.size(300_012) == "293.0 KiB"
    assert format.size(900) == "900 B"
    assert format.instant("2026-11-29T13:00:00+01:00") == "2026-11-29 12:00:00 UTC"


def test_table_keeps_big_ids_exact_and_formats_durations():
    frame = format.table(
        [{"id": 2**53 + 1, "run_id": None, "lock_age_seconds": 1230.0, "first_ids": [1, 2]}],
        durations=["lock_age_seconds"],
    )
    assert list(frame.columns) == ["id", "run_id", "lock_age", "first_ids"]
    assert frame["id"][0] == "9007199254740993"
    assert frame["run_id"][0] == "–"
    assert frame["lock_age"][0] == "20m 30s"
    assert frame["first_ids"][0] == "1, 2"


def test_time_and_id_inputs():
    assert inputs.parse_time("", NOW) is None
    assert inputs.parse_time(" 2h ", NOW) == NOW - timedelta(hours=2)
    assert inputs.parse_time("2026-11-29T10:00:00", NOW) == datetime(2026, 11, 29, 10, tzinfo=UTC)
    with pytest.raises(ValueError, match="duration back from now"):
        inputs.parse_time("yesterday", NOW)
    assert inputs.parse_id("9223372036854775807") == 2**63 - 1
    assert inputs.parse_id(" ") is None
    for bad in ("12a", "-3", "9223372036854775808"):
        with pytest.raises(ValueError, match="whole number"):
            inputs.parse_id(bad)


def test_throughput_fills_empty_buckets_with_zero():
    rows = [
        {"bucket": NOW, "kind": "created", "rows": 3},
        {"bucket": NOW + timedelta(minutes=3), "kind": "processed", "rows": 2},
    ]
    chart = charts.throughput(rows, 60)
    data = pd.DataFrame(chart.data)
    assert len(data) == 4 * 3  # 4 minutes × 3 kinds
    created = data[data["kind"] == "created"].sort_values("bucket")
    assert list(created["per_minute"]) == [3, 0, 0, 0]
    assert data["per_minute"].sum() == 5
