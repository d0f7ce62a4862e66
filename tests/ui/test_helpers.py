"""The dashboard's pure helpers: SLO judgement, formats, inputs, chart data (no database)."""

import re
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from rendered import plain, unprotected

from outbox_monitor.ui import charts, format, health, inputs, slo
from outbox_monitor.units import format_value

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
def test_duration_label_labels(seconds, label):
    assert format.duration_label(seconds) == label


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
    assert format.size(5 * 2**30) == "5.0 GiB"
    assert format.size(3 * 2**40 + 1) == "3.0 TiB"
    assert format.instant("2026-11-29T13:00:00+01:00") == "2026-11-29 12:00:00 UTC"


def test_table_keeps_big_ids_exact_and_formats_durations():
    frame = format.table(
        [{"id": 2**53 + 1, "run_id": None, "lock_age_seconds": 1230.0, "first_ids": [1, 2]}],
        units={"lock_age_seconds": "seconds"},
    )
    assert list(frame.columns) == ["id", "run_id", "lock_age_seconds", "first_ids"]
    assert frame["id"][0] == "9007199254740993"
    assert frame["run_id"][0] == "–"
    assert frame["lock_age_seconds"][0] == "20m 30s"
    assert frame["first_ids"][0] == "1, 2"


def test_rows_wrap_only_when_a_shown_value_needs_more_than_one_line_of_its_column():
    columns = [
        format.Column("id", "id", 80),
        format.Column("last_error", "last error", 400),
        format.Column("event_key", "event key"),  # secondary: not in the grid, never wraps
    ]
    # a 400 px column holds (400 - 17) / 6.5 = 58 characters on a line
    short = format.table([{"id": 1, "last_error": "x" * 58, "event_key": "k" * 300}])
    assert format.row_height(short, columns) is None
    error = "HTTP 502 " + "y" * 50  # 59 characters: two lines
    long = format.table([{"id": 1, "last_error": None}, {"id": 2, "last_error": error}])
    assert format.row_height(long, columns) == format.WRAPPED_ROW_HEIGHT == 104
    # 400 characters: 7 lines of 19.6 px and 6 px of padding; past 8 lines, 8 (then: the detail)
    seven = format.table([{"last_error": "z" * 400}])
    assert format.row_height(seven, columns) == 144
    longer = [format.table([{"last_error": "z" * n}]) for n in (480, 1000)]
    assert [format.row_height(frame, columns) for frame in longer] == [163, 163]


def test_a_missing_text_shows_as_a_dash_a_number_stays_whole_and_units_write_values():
    frame = format.table(
        [
            {"outcomes": 20, "cooldown": 30.0, "at": None, "note": "x", "link": "events"},
            {"outcomes": None, "cooldown": None, "at": None, "note": None, "link": None},
        ],
        units={"cooldown": "seconds", "at": "instant", "link": format.LINK},
    )
    assert frame["outcomes"][0] == 20 and pd.isna(frame["outcomes"][1])  # drawn as "–"
    assert list(frame["cooldown"]) == ["30s", "–"]
    assert list(frame["at"]) == ["–", "–"]
    assert list(frame["note"]) == ["x", "–"]
    assert frame["link"][0] == "events" and pd.isna(frame["link"][1])  # a gap: drawn as "–"


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


# ------------------------------------------------------------- values shown in markdown

INJECTIONS = [
    "x`[click me](https://example.com)`",
    "**bold** and _em_ and ~~gone~~",
    ":red[red] :material/home: :smile: :streamlit:",
    "<b>html</b> &amp; <!-- c -->",
    "$E=mc^2$ and $$x$$",
    "# heading",
    "- item",
    "1. item",
    "> quote",
    "a -> b <- c <-> d -- e >= f <= g ~= h",
    "www.example.org and a.b@example.com and HTTP://X.Y",
    "back\\slash \\* escaped",
    "``double` backticks`",
    " padded ",
    "line\nbreak",
]
# what may stand outside a code span or an escape in md_text's output: no character that
# starts markdown, HTML, math or a directive, and none of Streamlit's text rewrites
UNSAFE_OUTSIDE = re.compile(r"[*_`\[\]<>$:~#&!|\\]|->|www\.|https?://|@")


@pytest.mark.parametrize("value", INJECTIONS)
def test_md_text_shows_any_value_literally(value):
    markdown = format.md_text(value)

    assert plain(markdown) == value.replace("\n", " ")
    assert not UNSAFE_OUTSIDE.search(unprotected(markdown)), markdown
    assert "\n" not in markdown


@pytest.mark.parametrize("value", INJECTIONS)
def test_md_code_shows_any_value_literally(value):
    markdown = format.md_code(value)

    assert plain(markdown) == value.replace("\n", " ")
    if ":material/" not in value:  # Streamlit rewrites that even inside code spans
        assert re.fullmatch(r"(`+) ?.*? ?\1", markdown), markdown
        fence = re.match(r"`+", markdown).group()
        assert f"{fence}" not in markdown[len(fence) : -len(fence)]
    else:
        assert ":material/" not in markdown


def test_md_code_of_an_empty_value_is_visible():
    assert plain(format.md_code("")) == '""'


def test_plurals():
    assert format.plural(1, "failed row") == "1 failed row"
    assert format.plural(0, "error group") == "0 error groups"
    assert format.plural(1234, "error group") == "1,234 error groups"
    assert format.plural(2, "batch", "batches") == "2 batches"
    assert format.inflect(1, "was", "were") == "was"
    assert format.inflect(3, "was", "were") == "were"


# ------------------------------------------------------------- inputs out of range


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("9999999d", "longer than 100 years"),
        ("9" * 40 + "d", "longer than 100 years"),
        ("0001-01-01T00:00:00+01:00", "outside the dates that can be shown"),
        ("9999-12-31T23:59:59-01:00", "outside the dates that can be shown"),
    ],
)
def test_time_inputs_out_of_range_are_value_errors(text, said):
    with pytest.raises(ValueError, match=said):
        inputs.parse_time(text, NOW)


def test_time_inputs_are_in_utc():
    assert inputs.parse_time("2026-11-29T13:00:00+01:00", NOW) == datetime(
        2026, 11, 29, 12, tzinfo=UTC
    )
    assert inputs.parse_time("2026-11-29T13:00:00+01:00", NOW).utcoffset() == timedelta(0)


# ------------------------------------------------------------- chart axes


def x_axis(chart) -> dict:
    spec = chart.to_dict()
    encoding = spec["encoding"] if "encoding" in spec else spec["layer"][0]["encoding"]
    return encoding["x"]


def test_time_axes_are_utc_on_a_24_hour_clock():
    one_day = [NOW.replace(hour=0, minute=45) + timedelta(minutes=m) for m in range(0, 60, 5)]
    samples = [{"sampled_at": t, "queue_depth": 1, "pending_total": 2} for t in one_day]
    latencies = [{"bucket": t, "p50": 1.0, "p95": 2.0} for t in one_day]
    flows = [{"bucket": t, "kind": "created", "rows": 1} for t in one_day]

    for chart in (
        charts.queue_depth(samples),
        charts.latency(latencies),
        charts.throughput(flows, 300),
    ):
        axis = x_axis(chart)
        assert axis["scale"] == {"type": "utc"}
        assert axis["axis"]["format"] == "%H:%M"

    data = pd.DataFrame(charts.queue_depth(samples).data)
    assert data["time"].iloc[0] == "2026-11-29 00:45:00 UTC"


def test_time_ticks_fall_on_whole_utc_minutes_and_never_repeat_a_label():
    def ticks(first, minutes):
        values = charts.time_ticks(pd.Series([first, first + timedelta(minutes=minutes)]))
        return [(t["hours"], t["minutes"]) for t in (v.to_dict() for v in values)]

    start = NOW.replace(hour=0, minute=42, second=10)
    assert ticks(start, 1) == [(0, 43)]  # a minute of points: one tick, not six "00:42"
    assert ticks(start, 14) == [(0, m) for m in range(44, 57, 2)]
    assert ticks(start, 60) == [(0, 50), (1, 0), (1, 10), (1, 20), (1, 30), (1, 40)]
    assert ticks(start, 24 * 60) == [(h, 0) for h in range(3, 24, 3)] + [(0, 0)]
    assert all(v.to_dict()["utc"] for v in charts.time_ticks(pd.Series([start])))


def test_time_axes_name_the_date_when_the_points_span_days():
    late, early = (
        NOW.replace(hour=23, minute=50),
        NOW.replace(hour=23, minute=50) + timedelta(minutes=20),
    )
    samples = [{"sampled_at": t, "queue_depth": 1, "pending_total": 2} for t in (late, early)]

    assert x_axis(charts.queue_depth(samples))["axis"]["format"] == "%b %d %H:%M"
    assert charts.time_format(pd.Series([late, early])) == charts.DATE_TIME_FORMAT


def test_every_event_type_bar_has_room_for_its_label():
    failed = {f"event.type_{n}": n + 1 for n in range(9)}

    spec = charts.failures_by_event_type(failed).to_dict()

    assert spec["height"] >= 9 * 24
    assert spec["encoding"]["y"]["axis"]["labelOverlap"] is False
    assert charts.bar_chart_height(20) > charts.bar_chart_height(9)
    assert (
        charts.attempts_histogram({1: 3}).to_dict()["encoding"]["x"]["axis"]["labelOverlap"]
        is False
    )


def test_health_helpers_size_growth_and_values_by_unit():
    samples = [
        {"sampled_at": NOW, "table_bytes": None, "indexes_bytes": None},  # before migration 012
        {"sampled_at": NOW, "table_bytes": 8192, "indexes_bytes": 57344},
        {
            "sampled_at": NOW + timedelta(minutes=4),
            "table_bytes": 2 * 2**20,
            "indexes_bytes": 57344 - 8192,
        },
    ]
    # samples over 4 minutes of a 1-hour window: the growth is said over those 4 minutes
    assert health.size_growth(samples) == {
        "table_bytes": 2 * 2**20 - 8192,
        "indexes_bytes": -8192,
        "seconds": 240.0,
    }
    assert health.size_growth(samples[:2]) == {}  # one sample with sizes: no growth yet
    assert health.signed_size(2 * 2**20 - 8192) == "+2.0 MiB"
    assert health.signed_size(-8192) == "-8.0 KiB"
    assert health.ago(None) == "never" and health.ago(65) == "1m 5s ago"
    assert format_value(0.4286, "fraction") == "42.9 %"
    assert format_value(57344, "bytes") == "56.0 KiB"
    assert format_value(2, "slots") == "2"


def test_a_sampled_chart_leaves_out_samples_without_the_figure():
    samples = [
        {"sampled_at": NOW, "dead_tuples": None, "live_tuples": None},
        {"sampled_at": NOW + timedelta(seconds=15), "dead_tuples": 3, "live_tuples": 10},
    ]
    chart = charts.sampled_lines(samples, {"dead_tuples": "dead", "live_tuples": "live"}, "tuples")
    drawn = chart.data[["figure", "tuples"]].to_dict("records")
    assert drawn == [{"figure": "dead", "tuples": 3.0}, {"figure": "live", "tuples": 10.0}]
