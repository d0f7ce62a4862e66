"""A rule's current value per alert instance, measured through metrics.py (SPEC §2).

One definition of each figure: every value here comes from the ``metrics`` function the
dashboard and ``status --json`` use. A rule without ``by`` has one instance, ``""``; a rule
with ``by: [event_type]`` has one instance per event type that currently has rows relevant
to its figure (``"event_type=<type>"``), each measured for exactly that type (equality,
even when the type holds ``%`` or ``_``; the rule's own ``event_type`` filter may be a LIKE
pattern, SPEC §2).
"""

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from outbox_monitor.alerts.rules import Rule
from outbox_monitor.durations import duration_label
from outbox_monitor.figures import by_event_type, error_grouping, metrics
from outbox_monitor.figures.forecast import (
    MIN_SAMPLES,
    TYPE_SAMPLED,
    Forecast,
    forecast,
    sample_points,
    type_sample_points,
)
from outbox_monitor.figures.registry import CLAIM_FIGURES, FIGURES, WORKER_FIGURES
from outbox_monitor.figures.workers import due_offenders
from outbox_monitor.health.claim_plan import claim_health
from outbox_monitor.health.horizon import SLOT, horizon
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.store.db import Database, database_now
from outbox_monitor.store.filters import ExactEventType, Where
from outbox_monitor.units import OTHER, bounded_key

MAX_INSTANCES = 200
"""At most this many event types become instances of one ``by`` rule (alphabetical)."""
OFFENDERS = 5
"""Top event types (and error groups) listed in a message."""

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


@dataclass(frozen=True)
class Measurement:
    """One alert instance's current value.

    ``instance``: ``""`` for a rule without ``by``, else ``"event_type=<type>"``.
    ``labels``: ``{"event_type": <type>}`` for a ``by`` instance, else ``{}``.
    ``value``: in the rule's unit (seconds, rows, rows/min); ``None`` when the figure has
    no value (nothing pending, no done row in the window). ``breached``: the rule's
    condition holds now (never for ``None``). ``forecast``: a ``predict`` rule's forecast
    (``value`` is then its value at now + ``predict``, ``None`` without enough samples).
    """

    instance: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float | None = None
    breached: bool = False
    forecast: Forecast | None = None


def instance_of(event_type: str | None) -> str:
    """The instance key of an event type (``"event_type=order.paid"``; a type past
    ``units.MAX_KEY_CHARS`` as ``units.bounded_key``: the key is a primary key's, the whole
    type is in the instance's labels), ``""`` for none."""
    return f"event_type={bounded_key(event_type)}" if event_type else ""


def compare(op: str, value: float | None, threshold: float) -> bool:
    """``value <op> threshold`` for an alerts.yml ``op``; ``None`` is never true."""
    return value is not None and _COMPARE[op](value, threshold)


def breached(rule: Rule, value: float | None) -> bool:
    """Whether ``value`` breaks the rule: ``value <op> threshold``; ``None`` never does."""
    return compare(rule.op, value, rule.threshold)


def measure_value(db: Database, rule: Rule, event_type: str | None) -> float | None:
    """The rule's figure for one event-type filter (exact, or LIKE with ``%``; always
    exact for an ``ExactEventType``).

    Returns:
        The metrics.py value in the rule's unit; ``None`` when the figure has none.

    Raises:
        The package's database errors (``QueryTimeout``, ``DatabaseUnavailable``, …).
    """
    value = FIGURES[rule.metric].measure(db, rule.window, event_type, rule.attempts or 1)
    return None if value is None else float(value)


def candidate_event_types(
    db: Database, rule: Rule, *, event_type: str | None = None, limit: int = MAX_INSTANCES
) -> list[str]:
    """Event types that currently have rows relevant to the rule's figure (query
    ``alert_event_types``), within the rule's ``event_type`` filter (or ``event_type``).

    Relevant rows: pending ones for depth-like figures and oldest pending age; processing
    ones for processing / stuck locks; done ones processed in the window for latency;
    failed ones dead-lettered in the window for ``failed_in_window``; rows not done for
    ``attempts_at_least``; created in the window for ``created_per_minute``. A figure with
    ``candidates`` (``breaker_open``) lists its own: the filters of its controls.

    Returns:
        Up to ``limit`` event types in alphabetical order.
    """
    figure = FIGURES[rule.metric]
    if figure.candidates is not None:
        return figure.candidates(db, event_type or rule.event_type)[:limit]
    relevant = figure.instances
    where = Where().event_type(event_type or rule.event_type)
    rows = db.fetch_all(
        "alert_event_types",
        {
            "open_statuses": list(relevant.open),
            "closed_statuses": list(relevant.closed),
            "created": relevant.created,
            "window": rule.window or db.settings.window,
            "limit": limit,
            **where.params,
        },
        and_filters=where.fragment,
    )
    return [row["event_type"] for row in rows]


def measure(db: Database, rule: Rule) -> list[Measurement]:
    """Every current instance of a rule with its value (issue 3 §2, SPEC §2 figures).

    Without ``by``: one ``Measurement("")`` over the rule's ``event_type`` filter. With
    ``by: [event_type]``: one per event type from ``candidate_event_types`` (possibly
    none), measured for exactly that type (``ExactEventType``: equality even when the
    type holds ``%`` or ``_``, so ``a%b_c`` never counts ``axb_c``). An instance that
    was firing and is no longer listed has no relevant rows left: treat it as cleared.

    Returns:
        Measurements in instance order.

    Raises:
        The package's database errors; the caller decides (the evaluator turns them into
        the rule's "error" state, ``check`` reports them).
    """
    if rule.predict is not None:
        return forecast_measurements(db, rule)
    if not rule.by:
        value = measure_value(db, rule, rule.event_type)
        return [Measurement("", {}, value, breached(rule, value))]
    found = []
    for event_type in candidate_event_types(db, rule):
        value = measure_value(db, rule, ExactEventType(event_type))
        found.append(
            Measurement(
                instance_of(event_type),
                {"event_type": event_type},
                value,
                breached(rule, value),
            )
        )
    return found


def forecast_measurements(db: Database, rule: Rule) -> list[Measurement]:
    """A ``predict`` rule's instances, each valued by its forecast (``rule_forecasts``):
    one ``Measurement("")`` without ``by``; with ``by: [event_type]`` one per event type of
    ``candidate_event_types``, each forecast from its own per-type samples.

    Raises:
        The package's database errors.
    """
    if not rule.by:
        [predicted] = rule_forecasts(db, rule, [rule.event_type])
        return [Measurement("", {}, predicted.value, predicted.breached, predicted)]
    types = candidate_event_types(db, rule)
    return [
        Measurement(
            instance_of(event_type),
            {"event_type": event_type},
            predicted.value,
            predicted.breached,
            predicted,
        )
        for event_type, predicted in zip(types, rule_forecasts(db, rule, types), strict=True)
    ]


def rule_forecasts(db: Database, rule: Rule, scopes: list[str | None]) -> list[Forecast]:
    """A ``predict`` rule's forecasts: its figure's samples of the last ``predict`` seconds,
    fitted by least squares and extrapolated ``predict`` seconds past the database's now
    (``forecast.forecast``), one per scope.

    Args:
        scopes: ``None`` for all event types (the headline samples,
            ``metrics.samples_series``), or one exact event type, forecast from its rows of
            ``outbox_monitor.event_type_samples`` (``forecast.type_sample_points``: the
            samples that folded it into ``other`` or predate per-type sampling are left out,
            and the forecast says so; with fewer than 3 left, no forecast). A rule's LIKE
            pattern is refused without ``by`` when the file is read (``rules.Rule``).

    Raises:
        ValueError: ``predict`` spans fewer than ``MIN_SAMPLES + 1`` sampler intervals
            (``OUTBOX_MONITOR_SAMPLE_INTERVAL``): it could never hold the samples a trend
            needs, or only some passes would (a forecast that comes and goes), so the rule
            is in error, saying so, rather than silently never firing.
        The package's database errors.
    """
    assert rule.predict is not None
    interval = db.settings.sample_interval
    if rule.predict < (MIN_SAMPLES + 1) * interval:
        raise ValueError(
            f"predict {duration_label(rule.predict)} holds fewer than {MIN_SAMPLES} samples "
            f"taken every {duration_label(interval)} (OUTBOX_MONITOR_SAMPLE_INTERVAL): set "
            f"predict to {duration_label((MIN_SAMPLES + 1) * interval)} or more"
        )
    samples = metrics.samples_series(db, window=rule.predict)
    now = database_now(db)
    named = [scope for scope in scopes if scope is not None]
    type_rows = (
        by_event_type.history(db, event_types=[*named, OTHER], window=rule.predict) if named else []
    )
    found = []
    for scope in scopes:
        left_out = ""
        if scope is None:
            column = rule.spec.sample_column
            assert column is not None  # rules.PREDICTABLE figures are sampled
            points = sample_points(samples, column, now)
        else:
            mine = [r for r in type_rows if r["event_type"] in (scope, OTHER)]
            typed = type_sample_points(samples, mine, scope, TYPE_SAMPLED[rule.metric], now)
            top = db.settings.metrics_top_event_types
            points, left_out = typed.points, typed.left_out(scope, top)
        found.append(
            forecast(
                rule.metric,
                rule.unit,
                rule.op,
                rule.threshold,
                points,
                horizon=rule.predict,
                lookback=rule.predict,
                event_type=scope,
                left_out=left_out,
            )
        )
    return found


def offenders(
    db: Database, rule: Rule, *, event_type: str | None = None, limit: int = OFFENDERS
) -> list[dict[str, Any]]:
    """What to name in the message: the top event types and, for failures, error groups.

    Args:
        rule: the rule that fired.
        event_type: a ``by`` instance's own event type, compared for equality (even with
            ``%`` or ``_`` in it); ``None``: the rule's ``event_type`` filter.
        limit: event types (and error groups) to list.

    Returns:
        ``[{"kind": "event_type", "event_type", "value"}, …]`` — by the rule's own figure
        per event type, worst first (largest for ``>``/``>=``/``==``/``!=``, smallest for
        ``<``/``<=``); ``failed_in_window`` uses ``metrics.failed_by_event_type`` and
        then adds ``{"kind": "error_group", "group_id", "event_type", "fingerprint",
        "failed", "sample_error", "last_seen" (ISO-8601)}`` from ``error_grouping.error_groups``
        (all dead letters of those types, the ones to replay). JSON-safe.
        ``sample_error`` and ``fingerprint`` are redacted by the database's settings
        (``OUTBOX_MONITOR_REDACT_*``): this is what the notification row stores, so the
        Slack message and the Alerts page never carry the raw error.
        The claim's plan (``figures.registry.CLAIM_FIGURES``) has no event types: its statements'
        plans instead (``_claim_plans``). Another figure of the whole table
        (``scope="table"``) has none either: for the xmin horizon's figures its holders (the
        inactive slots for ``inactive_slots_holding_horizon``), longest held first
        (``{"kind": "holder", "label", "value" (seconds held, ``None`` when unknown),
        "command"}``); for the workers' liveness (``figures.registry.WORKER_FIGURES``) the due rows,
        in all and by event type (``workers.due_offenders``); nothing for the others.
    """
    if rule.metric in CLAIM_FIGURES:
        return _claim_plans(db, limit)
    if rule.metric in WORKER_FIGURES:
        return due_offenders(db, limit)
    if rule.spec.scope == "table":
        return _holders(db, rule.metric, limit)
    scope = ExactEventType(event_type) if event_type else rule.event_type
    if rule.metric == "failed_in_window":
        failed = metrics.failed_by_event_type(db, window=rule.window, event_type=scope)
        found: list[dict[str, Any]] = [
            {"kind": "event_type", "event_type": name, "value": float(count)}
            for name, count in list(failed.items())[:limit]
        ]
        redactor = redactor_for(db.settings)
        for group in error_grouping.error_groups(db, event_type=scope, limit=limit):
            found.append(
                {
                    "kind": "error_group",
                    "group_id": group["group_id"],
                    "event_type": group["event_type"],
                    "fingerprint": redactor.redact_text(group["fingerprint"]),
                    "failed": group["failed"],
                    "sample_error": redactor.redact_text(group["sample_error"]),
                    "last_seen": _iso(group["last_seen"]),
                }
            )
        return found
    values = []
    for name in candidate_event_types(db, rule, event_type=scope):
        value = measure_value(db, rule, ExactEventType(name))
        if value is not None:
            values.append({"kind": "event_type", "event_type": name, "value": value})
    smallest_first = rule.op in ("<", "<=")
    values.sort(key=lambda item: item["value"] if smallest_first else -item["value"])
    return values[:limit]


HOLDERS_NAMED = {
    "xmin_horizon_age": lambda holder: True,
    "inactive_slots_holding_horizon": lambda holder: (
        holder.kind == SLOT and holder.state == "inactive"
    ),
}
"""The figures whose alerts name the horizon's holders (which of them)."""


def _holders(db: Database, metric: str, limit: int) -> list[dict[str, Any]]:
    """The holders of the xmin horizon a rule on ``metric`` is about, as offenders: what holds
    it and the command that ends it (to run by hand); none for other table-wide figures."""
    named = HOLDERS_NAMED.get(metric)
    if named is None:
        return []
    holders = [h for h in horizon(db).holding if named(h)]
    return [
        {"kind": "holder", "label": h.summary, "value": h.held_seconds, "command": h.command}
        for h in holders[:limit]
    ]


def _claim_plans(db: Database, limit: int) -> list[dict[str, Any]]:
    """The claim's plans now as offenders (a figure of the whole table has no event types):
    the degraded ones first, each ``{"kind": "claim_plan", "label": "<statement>: <shape>",
    "error": <why it is degraded>}``."""
    plans = sorted(claim_health(db).plans, key=lambda plan: not plan.degraded)
    found = []
    for plan in plans[:limit]:
        why = list(plan.reasons) if plan.walks_non_pending else []
        if plan.cost_jumped:
            why.append(f"cost {plan.total_cost:,.0f}, recent median {plan.baseline_cost:,.0f}")
        found.append(
            {
                "kind": "claim_plan",
                "label": f"{plan.label}: {plan.shape}",
                "error": "; ".join(why) or None,
            }
        )
    return found


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
