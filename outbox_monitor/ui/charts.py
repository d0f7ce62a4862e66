"""Altair chart builders of the Overview; each takes the rows of a loader, returns a chart.

Builders never query; an empty input gives an empty chart, so pages decide what to say
when there is nothing to draw.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd

from outbox_monitor.ui import slo

HEIGHT = 220
KIND_ORDER = ["created", "processed", "dead-lettered"]
KIND_COLORS = ["#4c78a8", "#54a24b", "#e45756"]


def _time_axis(field: str) -> alt.X:
    return alt.X(f"{field}:T", title=None)


def queue_depth(samples: Sequence[Mapping[str, Any]]) -> alt.Chart:
    """Queue depth (due now) and pending total per sample, from ``metrics.samples_series``."""
    frame = pd.DataFrame(list(samples), columns=["sampled_at", "queue_depth", "pending_total"])
    long = frame.melt("sampled_at", var_name="figure", value_name="rows").replace(
        {"figure": {"queue_depth": "queue depth", "pending_total": "pending total"}}
    )
    line = (
        alt.Chart(long)
        .mark_line(point=len(frame) < 60)
        .encode(
            x=_time_axis("sampled_at"),
            y=alt.Y("rows:Q", title="rows"),
            color=alt.Color("figure:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=[alt.Tooltip("sampled_at:T", format="%H:%M:%S"), "figure:N", "rows:Q"],
        )
    )
    return line.properties(height=HEIGHT)


def latency(rows: Sequence[Mapping[str, Any]]) -> alt.LayerChart:
    """Latency P50 and P95 (seconds) per bucket from ``metrics.latency_series``, with the
    P95 SLO as a dashed rule."""
    frame = pd.DataFrame(list(rows), columns=["bucket", "p50", "p95"])
    long = frame.melt("bucket", var_name="percentile", value_name="seconds")
    lines = (
        alt.Chart(long)
        .mark_line(point=len(frame) < 60)
        .encode(
            x=_time_axis("bucket"),
            y=alt.Y("seconds:Q", title="seconds"),
            color=alt.Color("percentile:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=[
                alt.Tooltip("bucket:T", format="%H:%M"),
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
    frame["per_minute"] = frame["rows"] / (bucket_seconds / 60)
    chart = (
        alt.Chart(frame)
        .mark_line(point=frame["bucket"].nunique() < 60)
        .encode(
            x=_time_axis("bucket"),
            y=alt.Y("per_minute:Q", title="rows / min"),
            color=alt.Color(
                "kind:N",
                title=None,
                scale=alt.Scale(domain=KIND_ORDER, range=KIND_COLORS),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=[
                alt.Tooltip("bucket:T", format="%H:%M"),
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
            x=alt.X("attempts:O", title="attempts"),
            y=alt.Y("rows:Q", title="rows"),
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
            y=alt.Y("event_type:N", title=None, sort="-x"),
            x=alt.X("failed:Q", title="dead-lettered rows"),
            tooltip=["event_type:N", "failed:Q"],
        )
    )
    return chart.properties(height=max(120, 28 * len(frame)))
