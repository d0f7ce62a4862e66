"""The Overview tiles' trends and forecasts (issue 15 item 4, issue 30 item 3): under the
queue-depth and oldest-age tiles, the series' one trend stated once with its window ("Trend
over 15m: +72.3 rows/min · drains never", ``forecast.series_trend`` — what the per-type table
and the firing alerts say of the same samples), then when each rule on it breaks: by that
trend for a rule without ``predict``, by the rule's own forecast over its ``predict`` window
for one with it (what the evaluator computes, ``measure.rule_forecasts``)."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from outbox_monitor.alerts import coverage
from outbox_monitor.alerts.measure import rule_forecasts
from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.durations import duration_label
from outbox_monitor.figures import by_event_type
from outbox_monitor.figures.forecast import (
    DEFAULT_LOOKBACK_SECONDS,
    Forecast,
    SeriesTrend,
    scope_points,
    series_trend,
)
from outbox_monitor.store.db import Database
from outbox_monitor.ui import loaders
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.units import OTHER, bounded_key

TREND_SERIES = {
    "queue_depth": ("queue_depth", "rows"),
    "oldest_pending_age": ("oldest_pending_age_seconds", "seconds"),
}
"""The tiles that state a trend: their metric → the column sampled for all event types and
per event type, and its unit."""


@cached
def _type_rows(key: str, _db: Database, event_type: str) -> list[dict[str, Any]]:
    return by_event_type.history(
        _db, event_types=[event_type, OTHER], window=DEFAULT_LOOKBACK_SECONDS
    )


def series(db: Database, metric: str, event_type: str | None, now: datetime) -> SeriesTrend | None:
    """The one trend of a tile's series over ``forecast.DEFAULT_LOOKBACK_SECONDS``.

    Args:
        metric: a key of ``TREND_SERIES``.
        event_type: ``None`` for all event types (the headline samples), else one exact event
            type (its per-type samples, ``forecast.scope_points``).
        now: the database clock of the tile's figures.

    Returns:
        A ``SeriesTrend``; ``None`` for a LIKE pattern (the samples are per event type).
    """
    if event_type is not None and "%" in event_type:
        return None
    column, unit = TREND_SERIES[metric]
    samples = loaders.samples(db, window=DEFAULT_LOOKBACK_SECONDS)
    key = None if event_type is None else bounded_key(event_type)  # as the samples key it
    rows = [] if key is None else _type_rows(db_key(db), db, key)
    return series_trend(scope_points(samples, rows, column, now, event_type=key), unit=unit)


@cached
def _predicted(key: str, _db: Database, _rule: Rule, digest: str) -> Forecast:
    [found] = rule_forecasts(_db, _rule, [_rule.event_type])
    return found


def _scope_of(rule: Rule) -> str:
    return rule.event_type or coverage.ALL_TYPES


def predicted_text(db: Database, rule: Rule) -> str:
    """A ``predict`` rule's forecast as the evaluator computes it, over its own window:
    ``"rule backlog-growth predicts over its 30m: breaches in ≈ 12 min at +20.6 rows/min"``;
    a ``by`` rule has one per event type (its alerts say them); a ``predict`` too short for
    the sampler's interval says why (``measure.rule_forecasts``'s ``ValueError``).

    Raises:
        The package's database errors.
    """
    assert rule.predict is not None
    head = f"rule {rule.name} predicts"
    window = duration_label(rule.predict)
    if rule.by:
        return f"{head} each event type over its {window} (each in its alert)"
    scope = f" {rule.event_type}" if rule.event_type else ""
    try:
        found = _predicted(db_key(db), db, rule, rule.model_dump_json())
    except ValueError as error:
        return f"{head}{scope} over its {window}: no forecast ({error})"
    return f"{head}{scope} over its {window}: {found.breach_text}"


def rule_text(
    db: Database,
    rule: Rule,
    shown: SeriesTrend | None,
    event_type: str | None,
    metric: str,
    now: datetime,
) -> str:
    """When one rule on a tile's metric breaks (``captions``).

    Args:
        shown: the tile's own trend (``series``), ``None`` for a pattern.
        event_type: the tile's event-type filter.

    Returns:
        ``predicted_text`` for a ``predict`` rule; for a rule watching what the tile shows,
        ``"backlog (> 1,000): breaches in ≈ 39 min"`` by the tile's trend; for a rule over
        one other scope (all event types, or one exact type), that scope's trend over the
        same window named: ``"backlog (> 1,000; all types at +20.6 rows/min): …"``;
        for a pattern or a ``by`` rule, that the trends are per event type.
    """
    if rule.predict is not None:
        return predicted_text(db, rule)
    head = f"{rule.name} ({rule.condition}"
    if rule.by:
        return f"{head}, per event type): each type's trend is in the table below"
    if rule.event_type is not None and "%" in rule.event_type:
        return (
            f"{head} for {rule.event_type}): no trend of a pattern (the samples are per event type)"
        )
    if rule.event_type == event_type and shown is not None:
        return f"{head}): {shown.breach(metric, rule.op, rule.threshold).crossing_text}"
    own = series(db, metric, rule.event_type, now)
    assert own is not None  # no pattern here
    said = f"{head}; {_scope_of(rule)} at {own.rate_text}"
    return f"{said}): {own.breach(metric, rule.op, rule.threshold).crossing_text}"


def captions(
    db: Database,
    ruleset: RuleSet | None,
    metric: str,
    now: datetime,
    *,
    event_type: str | None,
    backlog: int | None = None,
) -> list[str]:
    """The captions under a queue-depth or oldest-age tile: its trend stated once
    (``SeriesTrend.text``: ``"Trend over 15m: +72.3 rows/min · drains never"``, the drain
    ETA when ``backlog`` — the queue depth — is given), then ``rule_text`` of each rule on
    ``metric``.

    Args:
        metric: ``"queue_depth"`` or ``"oldest_pending_age"`` (``TREND_SERIES``).
        now: the database clock of the tile's figures.
        event_type: the sidebar's event-type filter (``None``: all).
        backlog: the tile's queue depth, for the drain ETA.

    Raises:
        The package's database errors.
    """
    shown = series(db, metric, event_type, now)
    if shown is None:
        said = [f"No trend for the pattern {event_type}: the samples are per event type."]
    else:
        text = shown.text(backlog)
        said = [text[0].upper() + text[1:]]
    rules: Sequence[Rule] = ruleset.rules if ruleset is not None else ()
    said += [
        rule_text(db, rule, shown, event_type, metric, now)
        for rule in rules
        if rule.metric == metric
    ]
    return said
