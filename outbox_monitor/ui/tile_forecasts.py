"""The Overview tiles' forecasts (issue 15 item 4): the queue depth's drain ETA, and for each
depth or age rule when its trend breaks it ("breaches in ≈ 12 min"), from the sampler's
samples through the pure functions of ``forecast.py`` — the ones a rule's ``predict`` uses."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.figures.forecast import (
    DEFAULT_LOOKBACK_SECONDS,
    PREDICTABLE,
    drain_eta_of,
    forecast,
    sample_points,
)
from outbox_monitor.store.db import Database
from outbox_monitor.ui import loaders


def drain_text(figures: Mapping[str, Any]) -> str:
    """The queue-depth tile's drain ETA over the window's rates (``forecast.drain_eta_of``):
    ``"Drain ETA ≈ 4 min (drains 0.75/min net)"``, ``"Drain ETA never: grows by 2.00/min"``,
    ``"Drain ETA: empty"``."""
    eta = drain_eta_of(figures)
    return f"Drain ETA{':' if eta.backlog <= 0 else ''} {eta.text}"


def rule_forecast_text(db: Database, rule: Rule, now: datetime) -> str:
    """``"backlog: breaches in ≈ 12 min at +830 rows/min"`` from the samples of the rule's
    ``predict`` (else the last 15 min); a rule scoped to event types gets no forecast: the
    samples cover all of them, and a forecast of another scope would be a second opinion."""
    if rule.event_type or rule.by:
        scope = rule.event_type or "each event type"
        return f"{rule.name}: no forecast (it watches {scope}; the samples, all event types)"
    lookback = rule.predict or DEFAULT_LOOKBACK_SECONDS
    column = rule.spec.sample_column
    assert column is not None  # PREDICTABLE figures are sampled
    samples = loaders.samples(db, window=lookback)
    points = sample_points(samples, column, now)
    found = forecast(
        rule.metric,
        rule.unit,
        rule.op,
        rule.threshold,
        points,
        horizon=lookback,
        lookback=lookback,
    )
    return f"{rule.name}: {found.breach_text}"


def breach_forecasts(
    db: Database, ruleset: RuleSet | None, metric: str, now: datetime
) -> list[str]:
    """``rule_forecast_text`` of every rule on ``metric`` when it is a depth or age figure
    (``forecast.PREDICTABLE``); none otherwise or without rules."""
    if ruleset is None or metric not in PREDICTABLE:
        return []
    return [rule_forecast_text(db, rule, now) for rule in ruleset.rules if rule.metric == metric]
