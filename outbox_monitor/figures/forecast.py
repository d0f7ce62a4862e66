"""Forecasts from figures and samples, pure (no SQL, no clock): the drain ETA of a backlog,
and the linear trend of a sampled figure with the time it crosses a rule's threshold (least
squares over the sampled history, as Prometheus' ``predict_linear``; issue 15 item 4).

One estimator per series (issue 30 item 3): ``series_trend`` fits a series' samples of the
last ``DEFAULT_LOOKBACK_SECONDS``, and the Overview's tile, the per-event-type table's row and
a firing alert's card all say that one ``SeriesTrend`` — its slope, the drain ETA at it, and
when a rule without ``predict`` breaks by it. A rule with ``predict`` is forecast over its
own window, as the evaluator does (``alerts.measure.rule_forecasts``, which reads the samples
they are given: the headline samples, or one event type's ``event_type_samples``).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.durations import duration_label, format_duration
from outbox_monitor.units import OTHER, format_value, per_minute

MIN_SAMPLES = 3
"""A trend needs at least this many samples (at two instants or more); fewer: no forecast."""
DEFAULT_LOOKBACK_SECONDS = 15 * 60.0
"""The one window of the Overview's trends (``series_trend``): the samples of the last 15 min,
the tiles', the per-event-type table's and the firing alerts' alike; a rule without ``predict``
is forecast from them on its tile (this is its horizon too)."""
PREDICTABLE = ("queue_depth", "pending_total", "scheduled_retries", "oldest_pending_age")
"""The depth and age figures a rule may ``predict``: sampled gauges a trend extrapolates."""
TYPE_SAMPLED = {"queue_depth": "queue_depth", "oldest_pending_age": "oldest_pending_age_seconds"}
"""The predictable figures the sampler also records per event type (migration 014): a rule
scoped to event types may ``predict`` these, each from its ``event_type_samples`` column."""
CROSSING_REACH = 100
"""How far ahead a crossing is told, in lookbacks (15 min of samples: 25 h); past it a line
through a few minutes says nothing ("will cross 1,000,000 in ≈ 694443749d at +0.00/min")."""

_CHECKS = {
    ">": lambda value, threshold: value > threshold,
    ">=": lambda value, threshold: value >= threshold,
    "<": lambda value, threshold: value < threshold,
    "<=": lambda value, threshold: value <= threshold,
}


# ------------------------------------------------------------------------- drain ETA


@dataclass(frozen=True)
class DrainEta:
    """How long a backlog takes to drain at the window's rates.

    ``seconds``: 0 when the backlog is empty; ``None`` ("never") when it grows or holds
    (net drain ≤ 0). ``net_per_minute``: (processed + dead-lettered)/min − created/min.
    """

    backlog: int
    net_per_minute: float
    seconds: float | None

    @property
    def text(self) -> str:
        """``"empty"``, ``"≈ 12 min (net −830/min)"`` or ``"never: grows by 12/min"``."""
        if self.backlog <= 0:
            return "empty"
        if self.seconds is None:
            if self.net_per_minute == 0:
                return "never: processed as fast as created"
            return f"never: grows by {per_minute(-self.net_per_minute)}"
        return f"{about(self.seconds)} (drains {per_minute(self.net_per_minute)} net)"


def drain_eta(
    backlog: int,
    processed_per_minute: float | None,
    created_per_minute: float | None,
    dead_lettered_per_minute: float | None = None,
) -> DrainEta:
    """The drain ETA of a backlog: ``backlog ÷ ((processed + dead-lettered)/min −
    created/min)``: a dead-lettered row leaves the queue as a processed one does.

    Args:
        backlog: rows to drain (the queue depth: pending rows due now).
        processed_per_minute, created_per_minute: SPEC §2 throughput over the window
            (``None`` counts as 0).
        dead_lettered_per_minute: rows turned ``failed`` per minute over the window (SPEC
            §2 failed in window ÷ the window's minutes; ``None`` counts as 0).

    Returns:
        A ``DrainEta``: ``seconds`` 0 for an empty backlog, ``None`` (never) when the net
        drain rate is ≤ 0, else ``backlog / net * 60``.
    """
    out = (processed_per_minute or 0.0) + (dead_lettered_per_minute or 0.0)
    net = out - (created_per_minute or 0.0)
    if backlog <= 0:
        return DrainEta(backlog, net, 0.0)
    if net <= 0:
        return DrainEta(backlog, net, None)
    return DrainEta(backlog, net, backlog / net * 60.0)


def drain_eta_of(figures: Mapping[str, Any]) -> DrainEta:
    """``drain_eta`` of one set of figures under their ``status --json`` keys
    (``queue_depth``, ``processed_per_minute``, ``created_per_minute``, and when both are
    present ``failed_in_window`` over ``window_seconds``): ``metrics.status`` for a filter,
    or one event type's row of the per-type table. At the window's rates: not what the
    Overview says — its drain ETA is its trend's (``SeriesTrend.drain``, one estimator over one
    window), which these rates would contradict beside it."""
    failed, window = figures.get("failed_in_window"), figures.get("window_seconds")
    return drain_eta(
        int(figures["queue_depth"]),
        figures["processed_per_minute"],
        figures["created_per_minute"],
        failed / window * 60.0 if failed and window else None,
    )


def about(seconds: float) -> str:
    """A forecast's time for people: ``"≈ 12 min"`` (at least 1 min), ``"≈ 3h 5m"`` from 2 h."""
    if seconds >= 7200:
        return f"≈ {format_duration(seconds)}"
    return f"≈ {max(1, round(seconds / 60))} min"


# ------------------------------------------------------------------------ the trend


@dataclass(frozen=True)
class Trend:
    """``value = intercept + slope · t`` fitted by least squares; ``t`` in seconds from now
    (negative in the past). ``samples``: how many points it was fitted on."""

    intercept: float
    slope: float
    samples: int

    def at(self, seconds: float) -> float:
        """The fitted value ``seconds`` from now."""
        return self.intercept + self.slope * seconds

    @property
    def per_minute(self) -> float:
        """The slope in units per minute."""
        return self.slope * 60.0


def sample_points(
    samples: Sequence[Mapping[str, Any]], column: str, now: datetime
) -> list[tuple[float, float]]:
    """``(seconds from now, value)`` of one samples column (``metrics.samples_series`` rows
    with ``sampled_at``, oldest first) since the newest sample without a value: no pending
    row, no age — an age that came back restarted from 0, and one absent now has nothing to
    extrapolate; joined with the ages before, the line would forecast a wait of rows that
    are gone."""
    points: list[tuple[float, float]] = []
    for row in samples:
        if row.get(column) is None:
            points.clear()
            continue
        points.append(((row["sampled_at"] - now).total_seconds(), float(row[column])))
    return points


@dataclass(frozen=True)
class TypePoints:
    """One event type's points of a sampled figure (``type_sample_points``).

    ``points``: ``(seconds from now, value)``. ``folded``: headline samples in which the type
    had no row of its own while an ``other`` row was recorded (it may have been folded into
    ``other``: its value is unknown). ``unsampled``: headline samples with no per-type rows
    at all while the table had pending rows (taken before per-type sampling began).
    """

    points: list[tuple[float, float]]
    folded: int
    unsampled: int

    def left_out(self, event_type: str, top: int) -> str:
        """Why samples were left out, for people (empty when none was)."""
        said = []
        if self.folded:
            said.append(
                f"{self.folded} sample(s) folded {event_type} into {OTHER} (not among the top "
                f"{top} event types by trouble, OUTBOX_MONITOR_METRICS_TOP_EVENT_TYPES)"
            )
        if self.unsampled:
            said.append(f"{self.unsampled} sample(s) hold no event types (before migration 014)")
        return "; ".join(said)


def type_sample_points(
    samples: Sequence[Mapping[str, Any]],
    type_rows: Sequence[Mapping[str, Any]],
    event_type: str,
    column: str,
    now: datetime,
) -> TypePoints:
    """One event type's points of a ``TYPE_SAMPLED`` column at each headline sample.

    Args:
        samples: ``metrics.samples_series`` rows (``sampled_at``, ``pending_total``).
        type_rows: ``by_event_type.history`` rows of ``event_type`` and ``other`` over the
            same window (``sampled_at``, ``event_type`` and the column).
        column: an ``event_type_samples`` column (``TYPE_SAMPLED``'s values).

    Returns:
        A ``TypePoints``. At each sample: the type's own row gives its value (an age of
        ``None`` drops the ages before it, as ``sample_points`` does); without one, an
        ``other`` row means it may have been folded (``folded``, no point); else, when the
        sample recorded event types or the table had no pending row, the type had no open
        row: a depth of 0 (an age: the ages before it are dropped); else the sample predates
        per-type sampling (``unsampled``, no point). A real event type named
        ``other`` is always folded (``by_event_type.fold``).
    """
    by_instant: dict[datetime, dict[str, Mapping[str, Any]]] = {}
    for row in type_rows:
        by_instant.setdefault(row["sampled_at"], {})[row["event_type"]] = row
    points, folded, unsampled = [], 0, 0
    for sample in samples:
        at = (sample["sampled_at"] - now).total_seconds()
        rows = by_instant.get(sample["sampled_at"], {})
        own = rows.get(event_type) if event_type != OTHER else None
        if own is not None:
            if own[column] is not None:
                points.append((at, float(own[column])))
            else:
                points.clear()  # no pending row of the type: its age restarts (sample_points)
        elif OTHER in rows:
            folded += 1
        elif rows or not sample.get("pending_total"):
            if column == TYPE_SAMPLED["queue_depth"]:
                points.append((at, 0.0))
            else:
                points.clear()
        else:
            unsampled += 1
    return TypePoints(points, folded, unsampled)


def scope_points(
    samples: Sequence[Mapping[str, Any]],
    type_rows: Sequence[Mapping[str, Any]],
    column: str,
    now: datetime,
    *,
    event_type: str | None = None,
) -> list[tuple[float, float]]:
    """A series' points over one scope, as the evaluator reads them.

    Args:
        samples: ``metrics.samples_series`` rows.
        type_rows: ``by_event_type.history`` rows holding the type's and ``other``'s (others
            are ignored); unused for all event types.
        column: a column of both tables (``"queue_depth"``, ``"oldest_pending_age_seconds"``).
        event_type: ``None`` for all event types (``sample_points`` of the headline samples),
            else one event type as the samples key it (``units.bounded_key``):
            ``type_sample_points`` of its rows and ``other``'s, as ``measure.rule_forecasts``.

    Returns:
        ``(seconds from now, value)`` points, oldest first.
    """
    if event_type is None:
        return sample_points(samples, column, now)
    mine = [row for row in type_rows if row["event_type"] in (event_type, OTHER)]
    return type_sample_points(samples, mine, event_type, column, now).points


def fit_trend(points: Sequence[tuple[float, float]]) -> Trend | None:
    """The least-squares line through ``(t, value)`` points (``predict_linear``'s fit).

    ``slope = Σ(t − t̄)(v − v̄) / Σ(t − t̄)²``, ``intercept = v̄ − slope · t̄`` (the value at
    ``t = 0``, now).

    Returns:
        A ``Trend``; ``None`` with fewer than ``MIN_SAMPLES`` points or all at one instant.
    """
    if len(points) < MIN_SAMPLES:
        return None
    mean_t = math.fsum(t for t, _ in points) / len(points)
    mean_v = math.fsum(v for _, v in points) / len(points)
    spread = math.fsum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    slope = math.fsum((t - mean_t) * (v - mean_v) for t, v in points) / spread
    return Trend(mean_v - slope * mean_t, slope, len(points))


def signed_rate(rate: float, unit: str) -> str:
    """A rate per minute with its sign and unit: ``"+830 rows/min"``, ``"−0.60 rows/min"``,
    ``"+1m 0s/min"`` (``unit`` ``"seconds"``)."""
    sign = "+" if rate >= 0 else "−"
    if unit == "seconds":
        return f"{sign}{format_duration(abs(rate))}/min"
    return f"{sign}{per_minute(abs(rate)).removesuffix('/min')} {unit}/min"


@dataclass(frozen=True)
class SeriesTrend:
    """The one trend of a sampled series (``series_trend``): the least-squares line through
    its samples of the last ``window`` seconds, in ``unit`` per minute.

    ``samples``: the points it was fitted on; ``trend`` ``None`` with fewer than
    ``MIN_SAMPLES`` (or all at one instant). The Overview's tile, the per-event-type row and a
    firing alert's card say this object of the same samples, so their numbers agree.
    """

    window: float
    samples: int
    trend: Trend | None
    unit: str = "rows"

    @property
    def rate_text(self) -> str:
        """``"+72.3 rows/min"`` (``signed_rate``), or ``"no trend"`` without one."""
        return "no trend" if self.trend is None else signed_rate(self.trend.per_minute, self.unit)

    @property
    def missing(self) -> str:
        """Why there is no trend (``""`` when there is one): ``"2 samples, needs 3: the
        scheduler records them"`` (of the window, said beside it)."""
        if self.trend is not None:
            return ""
        noun = "sample" if self.samples == 1 else "samples"
        return f"{self.samples} {noun}, needs {MIN_SAMPLES}: the scheduler records them"

    def drain(self, backlog: int) -> DrainEta | None:
        """The drain ETA of ``backlog`` rows at this trend (a queue-depth series): its slope
        is the net drain rate now (``drain_eta(backlog, −slope, 0)``); ``None`` without a
        trend unless the backlog is empty."""
        if self.trend is None:
            return drain_eta(backlog, None, None) if backlog <= 0 else None
        return drain_eta(backlog, -self.trend.per_minute, 0.0)

    def drain_text(self, backlog: int) -> str:
        """The drain ETA in a word or two: ``"empty"``, ``"never"`` (the trend grows or
        holds), ``"≈ 12 min"``, or ``"unknown"`` (no trend)."""
        eta = self.drain(backlog)
        if eta is None:
            return "unknown"
        if eta.backlog <= 0:
            return "empty"
        return "never" if eta.seconds is None else about(eta.seconds)

    def drain_clause(self, backlog: int) -> str:
        """The drain ETA as said beside the trend: ``"drains never"``, ``"drains in ≈ 12
        min"``, ``"queue empty"``, or ``"drain ETA unknown"`` (no trend)."""
        drains = self.drain_text(backlog)
        if drains == "empty":
            return "queue empty"
        if drains == "unknown":
            return "drain ETA unknown"
        return f"drains {'never' if drains == 'never' else 'in ' + drains}"

    def text(self, backlog: int | None = None) -> str:
        """The trend stated once, with its window: ``"trend over 15m: +72.3 rows/min ·
        drains never"`` (``backlog`` given: a queue depth's ``drain_clause``), ``"trend over
        15m: −30.0 rows/min · drains in ≈ 4 min"``, ``"… · queue empty"``, or ``"trend over
        15m: none yet (2 samples, needs 3: the scheduler records them)"``."""
        head = f"trend over {duration_label(self.window)}: "
        if self.trend is None:
            said = f"{head}none yet ({self.missing})"
            return said + (" · queue empty" if backlog is not None and backlog <= 0 else "")
        said = head + self.rate_text
        return said if backlog is None else f"{said} · {self.drain_clause(backlog)}"

    def breach(self, metric: str, op: str, threshold: float) -> "Forecast":
        """When a rule without ``predict`` on this series breaks by this trend: a
        ``Forecast`` over the same window (horizon and lookback), its ``crossing_text`` said
        beside the trend stated once."""
        return Forecast(
            metric, self.unit, op, threshold, self.window, self.window, self.samples, self.trend
        )


def series_trend(
    points: Sequence[tuple[float, float]],
    *,
    window: float = DEFAULT_LOOKBACK_SECONDS,
    unit: str = "rows",
) -> SeriesTrend:
    """The one trend of a series: ``fit_trend`` of its points of the last ``window`` seconds.

    Args:
        points: ``(seconds from now, value)``, from ``sample_points`` (the headline samples)
            or ``type_sample_points`` (one event type's); those older than ``window`` are
            left out (the samples read for a longer chart serve too).
        window: seconds (``DEFAULT_LOOKBACK_SECONDS``: what the Overview says everywhere).
        unit: the series' unit (``"rows"``, ``"seconds"``).

    Returns:
        A ``SeriesTrend`` (its ``trend`` ``None`` with too few points).
    """
    kept = [(t, value) for t, value in points if t > -window]
    return SeriesTrend(window, len(kept), fit_trend(kept), unit)


def seconds_to_cross(trend: Trend, op: str, threshold: float) -> float | None:
    """When the trend breaks ``value <op> threshold``, in seconds from now.

    Returns:
        0 when the fitted value breaks it now and the line does not head back out of the
        breach (a falling depth past ``>`` gives ``None``); the seconds until the line
        reaches the threshold when it heads there; ``None`` when it never does (flat, moving
        away, or ``op`` is ``==``/``!=``, which a line does not cross in a useful sense).
    """
    check = _CHECKS.get(op)
    if check is None:
        return None
    if check(trend.intercept, threshold):
        # a line past the threshold now but heading back out of the breach (a backlog that
        # drains) forecasts no breach: its fitted "now" lags the samples it is falling from
        leaving = trend.slope < 0 if op in (">", ">=") else trend.slope > 0
        return None if leaving else 0.0
    if trend.slope == 0:
        return None
    seconds = (threshold - trend.intercept) / trend.slope
    if seconds <= 0 or not check(trend.at(seconds + 1.0), threshold):
        return None
    return seconds


@dataclass(frozen=True)
class Forecast:
    """A rule's figure extrapolated ``horizon`` seconds ahead from the samples of the last
    ``lookback`` seconds.

    ``trend`` is ``None`` when there were too few samples (``samples`` of them); ``value``
    (the fitted value at now + horizon) and ``crossing`` (``seconds_to_cross``) are then
    ``None`` too. ``event_type``: the one event type forecast (``None``: all, from the
    headline samples); ``left_out``: why samples of the window were left out
    (``TypePoints.left_out``; empty when none was), said after the forecast's text.
    """

    metric: str
    unit: str
    op: str
    threshold: float
    horizon: float
    lookback: float
    samples: int
    trend: Trend | None
    event_type: str | None = None
    left_out: str = ""

    @property
    def value(self) -> float | None:
        """The fitted value at now + horizon (``None``: no forecast)."""
        return None if self.trend is None else self.trend.at(self.horizon)

    @property
    def reach(self) -> float:
        """How far ahead a crossing is told: ``CROSSING_REACH`` lookbacks, in seconds."""
        return self.lookback * CROSSING_REACH

    @property
    def crossing(self) -> float | None:
        """Seconds until the threshold is broken by the trend (0: already), else ``None``
        (never, or not within ``reach``)."""
        if self.trend is None:
            return None
        seconds = seconds_to_cross(self.trend, self.op, self.threshold)
        return None if seconds is None or seconds > self.reach else seconds

    def _beyond(self) -> str:
        """`` within 25h`` when the trend heads to the threshold past ``reach``, else ``""``."""
        assert self.trend is not None
        far = seconds_to_cross(self.trend, self.op, self.threshold)
        return f" within {duration_label(self.reach)}" if far is not None and far > 0 else ""

    @property
    def breached(self) -> bool:
        """The forecast value at now + horizon breaks the rule (``predict_linear`` alert)."""
        check = _CHECKS.get(self.op)
        return self.value is not None and check is not None and check(self.value, self.threshold)

    def slope_text(self) -> str:
        """The trend per minute with its sign: ``"+830 rows/min"``, ``"+1m 0s/min"``."""
        assert self.trend is not None
        return signed_rate(self.trend.per_minute, self.unit)

    @property
    def text(self) -> str:
        """The forecast for people: ``"queue depth will cross 10,000 in ≈ 12 min at +830
        rows/min"``, ``"… is past 10,000 by its trend …"``, ``"… will not cross …"``, or
        ``"no forecast: 2 samples in the last 15m (needs 3)"``; of one event type ``"queue
        depth of order.paid will …"``, followed by ``left_out`` when samples were."""
        said = self._text()
        return f"{said}; {self.left_out}" if self.left_out else said

    def _text(self) -> str:
        name = self.metric.replace("_", " ")
        if self.event_type is not None:
            name = f"{name} of {self.event_type}"
        if self.trend is None:
            return (
                f"no forecast for {name}: {self.samples} sample(s) in the last "
                f"{duration_label(self.lookback)} (needs {MIN_SAMPLES}; the scheduler records "
                "them)"
            )
        limit = format_value(self.threshold, self.unit)
        crossing = self.crossing
        if crossing is None:
            return (
                f"{name} will not cross {limit}{self._beyond()} at its trend ({self.slope_text()})"
            )
        if crossing == 0:
            return f"{name} is past {limit} by its trend ({self.slope_text()})"
        return f"{name} will cross {limit} in {about(crossing)} at {self.slope_text()}"

    @property
    def breach_text(self) -> str:
        """Short, for a tile: ``"breaches in ≈ 12 min at +830 rows/min"``, ``"breached by
        its trend (…)"``, ``"no breach at its trend (…)"``, or ``"no forecast: 2 samples in
        the last 15m (needs 3)"``."""
        if self.trend is None:
            return (
                f"no forecast: {self.samples} sample(s) in the last "
                f"{duration_label(self.lookback)} (needs {MIN_SAMPLES})"
            )
        crossing = self.crossing
        if crossing is None:
            return f"no breach{self._beyond()} at its trend ({self.slope_text()})"
        if crossing == 0:
            return f"breached by its trend ({self.slope_text()})"
        return f"breaches in {about(crossing)} at {self.slope_text()}"

    @property
    def crossing_text(self) -> str:
        """``breach_text`` without the slope, beside a trend stated once
        (``SeriesTrend.breach``): ``"breaches in ≈ 12 min"``, ``"breached by this trend"``,
        ``"no breach at this trend"``, ``"no breach within 25h at this trend"``, or ``"no
        forecast"`` without a trend."""
        if self.trend is None:
            return "no forecast"
        crossing = self.crossing
        if crossing is None:
            return f"no breach{self._beyond()} at this trend"
        if crossing == 0:
            return "breached by this trend"
        return f"breaches in {about(crossing)}"

    def as_payload(self) -> dict[str, Any]:
        """JSON-safe for a notification's payload: ``text``, ``value``, ``horizon_seconds``,
        ``lookback_seconds``, ``samples``, ``per_minute``, ``crossing_seconds``."""
        return {
            "text": self.text,
            "value": self.value,
            "horizon_seconds": self.horizon,
            "lookback_seconds": self.lookback,
            "samples": self.samples,
            "per_minute": None if self.trend is None else self.trend.per_minute,
            "crossing_seconds": self.crossing,
        }


def forecast(
    metric: str,
    unit: str,
    op: str,
    threshold: float,
    points: Sequence[tuple[float, float]],
    *,
    horizon: float,
    lookback: float,
    event_type: str | None = None,
    left_out: str = "",
) -> Forecast:
    """Fit ``points`` (``sample_points`` of the last ``lookback`` seconds, or one event
    type's ``type_sample_points``) and extrapolate ``horizon`` seconds ahead (both seconds).

    Returns:
        A ``Forecast`` (its ``trend`` ``None`` when the points are too few).
    """
    trend = fit_trend(points)
    return Forecast(
        metric, unit, op, threshold, horizon, lookback, len(points), trend, event_type, left_out
    )
