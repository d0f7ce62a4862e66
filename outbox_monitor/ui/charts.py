"""Altair chart builders of the Overview; each takes the rows of a loader, returns a chart.

Builders never query; an empty input gives an empty chart, so pages decide what to say
when there is nothing to draw. Time axes are in UTC on a 24-hour clock (``14:05``), with
the date only when the points span more than one UTC day; every bar of a categorical axis
is named (its labels never thin out).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd

from outbox_monitor.ui import slo

HEIGHT = 220
KIND_ORDER = ["created", "processed", "dead-lettered"]
KIND_COLORS = ["#4c78a8", "#54a24b", "#e45756"]
TIME_FORMAT = "%H:%M"
"""Time axis labels within one UTC day (d3 time format: 24-hour clock)."""
DATE_TIME_FORMAT = "%b %d %H:%M"
"""Time axis labels when the points span several UTC days."""
TOOLTIP_TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
"""Tooltips name the instant in full (a text column made here, in UTC)."""
TOOLTIP_TIME = "time"
TICK_STEPS_MINUTES = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440)
"""Steps between time ticks, all on whole UTC minutes (so ``%H:%M`` labels never repeat)."""
MAX_TIME_TICKS = 8
BAR_STEP = 24
"""Pixels per bar of a horizontal bar chart: room for each bar's label."""
BAR_AXIS_HEIGHT = 70
"""Pixels below the bars of a horizontal bar chart (x axis labels and title)."""
MIN_BAR_CHART_HEIGHT = 120
LABEL_LIMIT = 240
"""Pixels of a category label before it is cut with an ellipsis (full text in the tooltip)."""


def time_format(instants: pd.Series) -> str:
    """The axis label format for these instants: ``TIME_FORMAT`` when they fall on one UTC
    day, else ``DATE_TIME_FORMAT``."""
    days = pd.to_datetime(instants, utc=True).dt.date
    return TIME_FORMAT if days.nunique() <= 1 else DATE_TIME_FORMAT


def time_ticks(instants: pd.Series) -> list[alt.DateTime]:
    """Tick positions on whole UTC minutes or hours, at most about ``MAX_TIME_TICKS``,
    spanning these instants: a minute's points get one tick, not six labelled alike, and
    labels never fall between minutes."""
    times = pd.to_datetime(instants, utc=True)
    if times.empty:
        return []
    first, last = times.min(), times.max()
    span = (last - first).total_seconds() / 60
    step = next((s for s in TICK_STEPS_MINUTES if span / s <= MAX_TIME_TICKS), 1440)
    tick = first.ceil(f"{step}min")
    ticks = []
    while tick <= last:
        ticks.append(tick)
        tick += pd.Timedelta(minutes=step)
    return [
        alt.DateTime(
            year=t.year, month=t.month, date=t.day, hours=t.hour, minutes=t.minute, utc=True
        )
        for t in ticks or [first.floor("min")]
    ]


def _time_axis(field: str, instants: pd.Series) -> alt.X:
    # a utc scale makes Vega-Lite place the ticks and format the labels in UTC
    return alt.X(
        f"{field}:T",
        title=None,
        scale=alt.Scale(type="utc"),
        axis=alt.Axis(format=time_format(instants), values=time_ticks(instants)),
    )


def _with_tooltip_time(frame: pd.DataFrame, field: str) -> pd.DataFrame:
    instants = pd.to_datetime(frame[field], utc=True)
    return frame.assign(**{TOOLTIP_TIME: instants.dt.strftime(TOOLTIP_TIME_FORMAT)})


def _time_tooltip() -> alt.Tooltip:
    return alt.Tooltip(f"{TOOLTIP_TIME}:N")


def queue_depth(samples: Sequence[Mapping[str, Any]]) -> alt.Chart:
    """Queue depth (due now) and pending total per sample, from ``metrics.samples_series``."""
    return sampled_lines(
        samples, {"queue_depth": "queue depth", "pending_total": "pending total"}, "rows"
    )


def sampled_lines(
    samples: Sequence[Mapping[str, Any]], figures: Mapping[str, str], unit: str
) -> alt.Chart:
    """One line per sampled figure over time, from ``metrics.samples_series``.

    Args:
        samples: the sampler's rows (``sampled_at`` and the columns of ``figures.registry``); a
            sample without a value of a figure (``None``: taken before it was recorded)
            leaves that line out there.
        figures: ``{samples column: legend label}``, all in one ``unit``.
        unit: the y axis title (``"rows"``, ``"tuples"``, ``"MiB"``).
    """
    frame = pd.DataFrame(list(samples), columns=["sampled_at", *figures])
    long = frame.melt("sampled_at", var_name="figure", value_name=unit)
    return _lines(long.replace({"figure": dict(figures)}), unit, frame["sampled_at"])


def _lines(long: pd.DataFrame, unit: str, instants: pd.Series) -> alt.Chart:
    """One line per ``figure`` of a long frame (``sampled_at``, ``figure``, ``unit``) over
    the sampling ``instants``; rows without a value are left out."""
    long = _with_tooltip_time(long.dropna(subset=[unit]), "sampled_at")
    line = (
        alt.Chart(long)
        .mark_line(point=len(instants) < 60)
        .encode(
            x=_time_axis("sampled_at", instants),
            y=alt.Y(f"{unit}:Q", title=unit),
            color=alt.Color("figure:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=[_time_tooltip(), "figure:N", f"{unit}:Q"],
        )
    )
    return line.properties(height=HEIGHT)


def by_event_type(history: Sequence[Mapping[str, Any]], column: str, unit: str) -> alt.Chart:
    """One line per event type of one sampled figure over time (``sampled_lines``), from
    ``by_event_type.history``.

    Args:
        history: rows with ``sampled_at``, ``event_type`` and ``column``.
        column: the ``outbox_monitor.event_type_samples`` column drawn.
        unit: the y axis title.
    """
    frame = pd.DataFrame(list(history), columns=["sampled_at", "event_type", column])
    # the types stay values, never column names: a type may be named "sampled_at" or "rows"
    long = frame.set_axis(["sampled_at", "figure", unit], axis="columns")
    return _lines(long, unit, frame["sampled_at"].drop_duplicates())


def latency(rows: Sequence[Mapping[str, Any]]) -> alt.LayerChart:
    """Latency P50 and P95 (seconds) per bucket from ``metrics.latency_series``, with the
    P95 SLO as a dashed rule."""
    frame = pd.DataFrame(list(rows), columns=["bucket", "p50", "p95"])
    long = _with_tooltip_time(
        frame.melt("bucket", var_name="percentile", value_name="seconds"), "bucket"
    )
    lines = (
        alt.Chart(long)
        .mark_line(point=len(frame) < 60)
        .encode(
            x=_time_axis("bucket", frame["bucket"]),
            y=alt.Y("seconds:Q", title="seconds"),
            color=alt.Color("percentile:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=[
                _time_tooltip(),
                "percentile:N",
                alt.Tooltip("seconds:Q", format=".1f"),
            ],
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"slo": [slo.LATENCY_P95.limit]}))
        .mark_rule(strokeDash=[4, 4], color="#e45756")
        .encode(y="slo:Q", tooltip=[alt.Tooltip("slo:Q", title="P95 SLO (s)")])
    )
    return alt.layer(lines, rule).properties(height=HEIGHT)


def throughput(rows: Sequence[Mapping[str, Any]], bucket_seconds: float) -> alt.Chart:
    """Rows created, processed and dead-lettered per minute, per bucket, from
    ``metrics.throughput_series`` (``rows`` per bucket divided by the bucket's minutes)."""
    frame = _fill_buckets(
        pd.DataFrame(list(rows), columns=["bucket", "kind", "rows"]), bucket_seconds
    )
    frame = _with_tooltip_time(frame, "bucket")
    frame["per_minute"] = frame["rows"] / (bucket_seconds / 60)
    chart = (
        alt.Chart(frame)
        .mark_line(point=frame["bucket"].nunique() < 60)
        .encode(
            x=_time_axis("bucket", frame["bucket"]),
            y=alt.Y("per_minute:Q", title="rows / min"),
            color=alt.Color(
                "kind:N",
                title=None,
                scale=alt.Scale(domain=KIND_ORDER, range=KIND_COLORS),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=[
                _time_tooltip(),
                "kind:N",
                alt.Tooltip("per_minute:Q", format=".2f"),
            ],
        )
    )
    return chart.properties(height=HEIGHT)


def _fill_buckets(frame: pd.DataFrame, bucket_seconds: float) -> pd.DataFrame:
    """Add the buckets without rows as zeros (the series omits them), from the first bucket
    to the last, for every kind — a line must not bridge an empty minute."""
    if frame.empty:
        return frame
    frame = frame.assign(bucket=pd.to_datetime(frame["bucket"], utc=True))
    buckets = pd.date_range(
        frame["bucket"].min(), frame["bucket"].max(), freq=pd.Timedelta(seconds=bucket_seconds)
    )
    full = pd.MultiIndex.from_product([buckets, KIND_ORDER], names=["bucket", "kind"])
    counts = frame.groupby(["bucket", "kind"])["rows"].sum()
    return counts.reindex(full, fill_value=0).reset_index()


def attempts_histogram(histogram: Mapping[str | int, int]) -> alt.Chart:
    """Retry pressure: rows not yet done by ``attempts`` (``{attempts: rows}``)."""
    frame = pd.DataFrame(
        [{"attempts": int(attempts), "rows": rows} for attempts, rows in histogram.items()],
        columns=["attempts", "rows"],
    )
    chart = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X(
                "attempts:O", title="attempts", axis=alt.Axis(labelOverlap=False, labelAngle=0)
            ),
            y=alt.Y("rows:Q", title="rows", axis=alt.Axis(tickMinStep=1)),
            tooltip=["attempts:O", "rows:Q"],
        )
    )
    return chart.properties(height=HEIGHT)


def failures_by_event_type(failed: Mapping[str, int]) -> alt.Chart:
    """Dead letters in the window by event type (``{event_type: rows}``), biggest first."""
    frame = pd.DataFrame(
        [{"event_type": name, "failed": rows} for name, rows in failed.items()],
        columns=["event_type", "failed"],
    )
    chart = (
        alt.Chart(frame)
        .mark_bar(color="#e45756")
        .encode(
            y=alt.Y(
                "event_type:N",
                title=None,
                sort="-x",
                axis=alt.Axis(labelOverlap=False, labelLimit=LABEL_LIMIT),
            ),
            x=alt.X("failed:Q", title="dead-lettered rows", axis=alt.Axis(tickMinStep=1)),
            tooltip=["event_type:N", "failed:Q"],
        )
    )
    return chart.properties(height=bar_chart_height(len(frame)))


def bar_chart_height(bars: int) -> int:
    """Pixels of a horizontal bar chart of ``bars`` bars: ``BAR_STEP`` each, plus the x
    axis (the chart is fitted into its height, axis included)."""
    return max(MIN_BAR_CHART_HEIGHT, bars * BAR_STEP + BAR_AXIS_HEIGHT)
