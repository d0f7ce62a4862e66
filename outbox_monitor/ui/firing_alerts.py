"""The Overview's "Firing alerts" (issue 15 item 3, and its done-means): each firing instance —
rule, instance, since, value vs threshold, held open by keep_firing_for — and, when it is about
one event type, that type's trend, drain ETA and dead letters from the by-event-type table,
with one click to its replay.

The states are the evaluator's (``outbox_monitor.alert_instances``); the type's figures are
the by-event-type table's (``ui.event_types.load``), its depth trend and drain ETA are the
table row's own ``forecast.SeriesTrend`` (one estimator over one window, issue 30 item 3):
nothing here is measured a second way.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import streamlit as st

from outbox_monitor.alerts.links import instance_event_type
from outbox_monitor.alerts.rules import Rule, RuleSet
from outbox_monitor.figures.forecast import SeriesTrend, scope_points, series_trend
from outbox_monitor.store.db import Database
from outbox_monitor.ui import format, loaders, runbooks
from outbox_monitor.ui.rule_state import (
    INSTANCE_PARAM,
    LABELS,
    NEVER_EVALUATED,
    RULE_PARAM,
    held_open,
    instance_line,
)
from outbox_monitor.ui.state import Filters
from outbox_monitor.units import OTHER, bounded_key, format_value

SHOWN_FIRING = 20
"""Firing instances listed on the Overview; the rest are counted and on the Alerts page."""
SEVERITY_ORDER = ("critical", "warning", "info")
"""The order firing alerts are listed in, most severe first (then the newest first)."""
TREND_COLUMNS = {
    "queue_depth": "queue_depth",
    "oldest_pending_age": "oldest_pending_age_seconds",
    "latency_p95": "latency_p95_seconds",
    "failed_in_window": "failed_in_window",
}
"""A rule's metric → the per-event-type sample column its trend is fitted on (migration 014);
a metric without one gets the type's queue-depth trend."""


def firing_rows(
    ruleset: RuleSet | None, instances: Sequence[Mapping[str, Any]], now: datetime | None
) -> list[dict[str, Any]]:
    """The firing (and error) instances of rules in the file, firing first, then by severity
    (``SEVERITY_ORDER``), then the newest first: ``rule``, ``rule_model`` (the ``Rule``),
    ``instance`` (``""`` for a rule without ``by``), ``severity``, ``state``, ``since``
    (firing since), ``ago`` (text), ``line`` (``instance_line``: value vs condition, held
    open by keep_firing_for) and ``held`` (that note alone)."""
    rules = {rule.name: rule for rule in ruleset.rules} if ruleset else {}
    found = []
    for row in instances:
        rule = rules.get(row["rule"])
        if rule is None or row["state"] not in ("firing", "error"):
            continue
        since = row.get("firing_since") or row.get("changed_at")
        found.append(
            {
                "rule": rule.name,
                "rule_model": rule,
                "instance": row.get("instance") or "",
                "severity": rule.severity,
                "state": row["state"],
                "since": since,
                "ago": format.duration(max(0.0, (now - since).total_seconds()))
                if since is not None and now is not None
                else "",
                "line": instance_line(rule, row, now),
                "held": held_open(rule, row, now),
            }
        )
    # firing first, the most severe first, then the newest: the incident going on now above
    # an old standing alert
    found.sort(
        key=lambda item: (
            item["state"] != "firing",
            SEVERITY_ORDER.index(item["severity"]) if item["severity"] in SEVERITY_ORDER else 9,
            -(item["since"].timestamp() if item["since"] is not None else 0.0),
        )
    )
    return found


@dataclass(frozen=True)
class TypeContext:
    """What the by-event-type table says of the event type a firing instance is about:
    ``trend`` (its one depth trend stated with its window, and the rule's own figure's when
    that is another series: ``"trend over 15m: queue depth +72.3 rows/min, drains never;
    failed in window +0.20 rows/min"``), ``eta`` (the drain ETA at that depth trend, as the
    table's row and a tile filtered to the type say it: ``"never"``, ``"≈ 5 min"``,
    ``"empty"``, ``"unknown"``), ``failed`` (dead letters in the window), ``figures``
    (``"queue depth 1,240 · oldest pending 7m 26s"``) and ``flow`` (its flow-control state:
    ``running``, ``paused``, ``breaker open``, …)."""

    event_type: str
    trend: str
    eta: str
    failed: int
    figures: str
    flow: str = "running"


def type_context(
    rule: Rule, event_type: str, table: Mapping[str, Any] | None, now: datetime
) -> TypeContext | None:
    """The context of ``event_type`` from the by-event-type table, or ``None`` when the table
    has no row of its own for it (a pattern such as ``payment.%``, or a type folded into
    ``other``).

    Args:
        rule: the firing rule (its metric picks a second series, ``TREND_COLUMNS``).
        event_type: the instance's event type (``links.instance_event_type``).
        table: ``ui.event_types.load``'s value (rows, flows, history, samples, trends), or
            ``None``.
        now: the database clock; every trend is fitted on the last
            ``forecast.DEFAULT_LOOKBACK_SECONDS`` of samples (``forecast.series_trend``), the
            depth's being the table's own (``table["trends"]``).
    """
    if table is None:
        return None
    row = next((r for r in table["rows"] if r["event_type"] == event_type), None)
    if row is None or row["event_type"] == OTHER:
        return None
    depth: SeriesTrend = table["trends"][event_type]
    backlog = int(row["queue_depth"])
    head = f"trend over {format.duration_label(depth.window)}: queue depth"
    if depth.trend is None:
        trend = f"{head} none yet ({depth.missing})"
    else:
        trend = f"{head} {depth.rate_text}, {depth.drain_clause(backlog)}"
    column = TREND_COLUMNS.get(rule.metric, "queue_depth")
    if column != "queue_depth":
        unit = "seconds" if column.endswith("_seconds") else "rows"
        points = scope_points(
            table["samples"], table["history"], column, now, event_type=bounded_key(event_type)
        )
        own = series_trend(points, window=depth.window, unit=unit)
        trend += f"; {column.removesuffix('_seconds').replace('_', ' ')} {own.rate_text}"
    age = row["oldest_pending_age"]
    figures = f"queue depth {format.count(backlog)}" + (
        f" · oldest pending {format_value(age, 'seconds')}" if age is not None else ""
    )
    flow = table["flow"].get(event_type)
    return TypeContext(
        event_type,
        trend,
        depth.drain_text(backlog),
        int(row["failed_in_window"]),
        figures,
        flow.state if flow is not None else "running",
    )


def replay_group(db: Database, event_type: str) -> str | None:
    """The error group a replay of ``event_type`` (exact, or a LIKE pattern) starts from: the
    one whose last dead letter is the newest (the failure going on now), from the Overview's
    cached read of the groups (``loaders.overview_error_groups``); ``None`` without dead
    letters."""
    groups = loaders.overview_error_groups(db, event_type=event_type)
    newest = max(groups, key=lambda group: group["last_seen"], default=None)
    return None if newest is None else newest["group_id"]


@dataclass(frozen=True)
class Card:
    """A firing alert drawn by ``section``, its type's context still to come (``fill``):
    ``detail`` (under its lines) and ``actions`` (above its "Open alert" link) are the
    containers that ``fill`` writes into once the by-event-type table is read."""

    row: Mapping[str, Any]
    detail: Any
    actions: Any


def section(
    ruleset: RuleSet | None,
    instances: Sequence[Mapping[str, Any]],
    *,
    down: str | None,
    now: datetime,
) -> list[Card]:
    """The Overview's "Firing alerts", above its tiles: each firing instance (rule, severity,
    value vs condition, since, its rule's runbook steps in an expander) with a link to it on
    the Alerts page; what is pending; or why
    the states are unknown. The context of an instance about one event type comes after the
    tiles (``fill``): its figures need the by-event-type table, which the tiles need not
    wait for.

    Args:
        ruleset: the loaded rules (``None``: the file is invalid).
        instances: ``alert_loaders.alert_instances``'s rows.
        down: ``rule_state.alerting_down``'s reason, or ``None``.
        now: the database clock.

    Returns:
        The cards drawn, for ``fill`` (none when nothing fires or the states are unknown).
    """
    st.subheader("Firing alerts")
    if ruleset is None:
        st.caption("The rules file is invalid: no rule is evaluated (see the banner above).")
        return []
    if down is not None:
        # never started: a note; stalled (a scheduler stopped evaluating): a warning
        shout = st.info if down.startswith(NEVER_EVALUATED) else st.warning
        shout(f"**Alert states unknown** — {format.md_text(down)}.", icon=":material/help:")
        return []
    rows = firing_rows(ruleset, instances, now)
    pending = sum(1 for row in instances if row["state"] == "pending")
    if not rows:
        note = f" ({format.plural(pending, 'instance')} pending)" if pending else ""
        st.success(
            f"No alert firing{note}: {format.plural(len(ruleset.rules), 'rule')} evaluated.",
            icon=":material/check_circle:",
        )
        return []
    cards = [_card(row) for row in rows[:SHOWN_FIRING]]
    more = len(rows) - SHOWN_FIRING
    if more > 0 or pending:
        parts = [f"{more} more firing" if more > 0 else "", f"{pending} pending" if pending else ""]
        st.caption(" · ".join(p for p in parts if p) + " — see the Alerts page.")
    return cards


def _card(row: Mapping[str, Any]) -> Card:
    icon = ":material/local_fire_department:" if row["state"] == "firing" else ":material/error:"
    since = f"since {format.instant(row['since'])} ({row['ago']} ago)" if row["since"] else ""
    lines = [
        f"{icon} **{format.md_text(LABELS[row['state']])}** · {row['severity']} · "
        f"{format.md_text(row['line'])}",
        since,
    ]
    with st.container(border=True):
        text, links = st.columns([5, 1], vertical_alignment="center")
        text.markdown("  \n".join(line for line in lines if line))
        detail = text.container()
        with text:
            rule: Rule = row["rule_model"]
            runbooks.expander(rule, event_type=instance_event_type(rule, row["instance"], {}))
        with links:
            actions = st.container()
            st.page_link(
                "pages/alerts.py",
                label="Open alert",
                icon=":material/notifications:",
                query_params={RULE_PARAM: row["rule"], INSTANCE_PARAM: row["instance"]},
            )
    return Card(row, detail, actions)


def fill(
    db: Database,
    cards: Sequence[Card],
    table: Mapping[str, Any] | None,
    *,
    now: datetime,
    f: Filters,
) -> None:
    """Write into each card about one event type of the table that type's figures, trend and
    drain ETA (``type_context``), a link to its controls when flow control holds it, and a
    link to replay its dead letters when it has any (the Dead letters page on the newest
    error group, ``replay_group``).

    Args:
        db: the page's Database.
        cards: ``section``'s value.
        table: ``ui.event_types.load``'s value, or ``None`` (no context per type).
        now: the database clock.
        f: the sidebar's filters (the window of the links).
    """
    for card in cards:
        rule: Rule = card.row["rule_model"]
        event_type = instance_event_type(rule, card.row["instance"], {})
        if not event_type or card.row["state"] != "firing":
            continue
        context = type_context(rule, event_type, table, now)
        if context is None:
            # a LIKE pattern (or a type without a row of its own): no figures of one type,
            # but its dead letters can still be replayed, the newest group of those it matches
            with card.actions:
                _replay_link(db, event_type, f)
            continue
        held = "" if context.flow == "running" else f" · flow control: {context.flow}"
        card.detail.markdown(
            format.md_text(
                f"{context.event_type}: {context.figures} · {context.trend}"
                f" · {format.count(context.failed)} dead-lettered in {f.window_label}{held}"
            )
        )
        with card.actions:
            if context.flow != "running":
                st.page_link(
                    "pages/controls.py",
                    label="Open controls",
                    icon=":material/tune:",
                    query_params={"event_type": context.event_type},
                )
            _replay_link(db, context.event_type, f)


def _replay_link(db: Database, event_type: str, f: Filters) -> None:
    """ "Replay dead letters": the Dead letters page on the newest error group of
    ``event_type`` (an exact type or a LIKE pattern), its replay form shown; nothing when
    there is no dead letter."""
    group = replay_group(db, event_type)
    if group is not None:
        st.page_link(
            "pages/dead_letters.py",
            label="Replay dead letters",
            icon=":material/replay:",
            query_params={"event_type": event_type, "error_group": group, "window": f.window_label},
        )
