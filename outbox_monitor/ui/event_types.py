"""The Overview's section "By event type" (issue 15 items 1 and 2): which event type is in
trouble, since when, and which rule says so.

One row per event type — the top ``OUTBOX_MONITOR_OVERVIEW_TOP_EVENT_TYPES`` by trouble, the
rest in one row ``other`` (``by_event_type``) — with its figures, its flow-control state, a
depth sparkline from the sampler's history per event type, and a status that comes only from
the rules' own state (``alerts.coverage``); firing rules over the whole outbox are listed
above it. The history split by event type is ``split_chart`` (the Overview's Charts).
"""

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from outbox_monitor.alerts import coverage
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.browse.events import database_now
from outbox_monitor.figures import by_event_type, metrics
from outbox_monitor.figures.backlog import BacklogPass
from outbox_monitor.figures.forecast import DEFAULT_LOOKBACK_SECONDS
from outbox_monitor.flow.controls import controls
from outbox_monitor.store.db import Database
from outbox_monitor.ui import backlog_sample, charts, format
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.format import Column
from outbox_monitor.ui.state import Filters
from outbox_monitor.units import OTHER, bounded_key

HISTORY_FIGURES = {
    "queue_depth": ("Queue depth (due now)", "rows"),
    "oldest_pending_age_seconds": ("Oldest pending age", "seconds"),
    "latency_p95_seconds": ("Latency P95", "seconds"),
    "failed_in_window": ("Dead-lettered in window", "rows"),
    "retrying": ("Pending retries (attempts ≥ 1)", "rows"),
}
"""The per-event-type sample columns the split chart can draw: label and unit."""
SPLIT_CHOICES = 50
"""Event types offered by "split by event type" (those sampled most recently)."""
SPLIT_DEFAULT = 5
"""Event types the split chart starts with: the table's most troubled that have samples."""


@cached
def _table(
    key: str,
    _db: Database,
    window: float,
    event_type: str | None,
    top: int,
    pinned: tuple,
    sampled_at: str | None,
    _backlog: BacklogPass | None,
    finished_at: str | None,
    _finished: BacklogPass | None,
) -> dict[str, Any]:
    with _db.session():
        rows = by_event_type.measure(
            _db,
            top=top,
            window=window,
            event_type=event_type,
            pinned=pinned,
            backlog=_backlog,
            finished=_finished.finished if finished_at else None,
        )
        found = controls(_db)
        history = by_event_type.history(
            _db,
            event_types=by_event_type.trend_keys(rows),
            window=max(window, DEFAULT_LOOKBACK_SECONDS),
        )
        samples = metrics.samples_series(_db, window=DEFAULT_LOOKBACK_SECONDS)
        now = database_now(_db)
    trends = by_event_type.depth_trends(rows, history, samples, now)
    return {
        "rows": rows,
        "flow": by_event_type.flows(rows, found),
        "controls": found,
        "history": history,
        "samples": samples,
        "trends": trends,
        "now": now,
        "window_seconds": window,
        "sampled_age_seconds": _backlog.age_seconds if sampled_at else None,
        "finished_age_seconds": _finished.age_seconds if finished_at else None,
    }


@cached
def _choices(key: str, _db: Database, window: float) -> list[str]:
    return by_event_type.sampled_event_types(_db, window=window, limit=SPLIT_CHOICES)


def type_link(page: str, event_type: str, f: Filters) -> str | None:
    """A relative link to a page pre-filtered on exactly this type and the window; ``None``
    for a type holding ``%``: the pages' filter would read it as a LIKE pattern (SPEC §2)
    and show — and offer to replay — other types too."""
    if "%" in event_type:
        return None
    return f"{page}?{urlencode({'event_type': event_type, 'window': f.window_label})}"


def table_rows(
    loaded: dict[str, Any], instances: list[dict], ruleset: RuleSet | None, f: Filters
) -> list[dict[str, Any]]:
    """The table's rows: per event type its status and the rules that set it, each with its
    scope (``coverage.set_by``), flow control, the depth sparkline, the figures, and the depth
    trend with its drain ETA (the one trend of the type's samples, ``forecast.series_trend``:
    what its firing alert and a tile filtered to it say); links to Events and Dead letters
    pre-filtered.

    Args:
        loaded: ``_table``'s value (``by_event_type.measure`` rows, flows, history, trends).
        instances: ``alerts.state.list_instances``'s rows.
        ruleset: the loaded rules (``None``: the file is invalid).
        f: the sidebar's filters (window for the links).
    """
    depth: dict[str, list[float]] = {}
    since = loaded["now"] - timedelta(seconds=loaded["window_seconds"])
    for sample in loaded["history"]:
        if sample["sampled_at"] <= since:
            continue  # read over the trends' window too, when it is the longer
        depth.setdefault(sample["event_type"], []).append(float(sample["queue_depth"]))
    result = []
    for row in loaded["rows"]:
        name = row["event_type"]
        if name == OTHER:
            # the worst of the folded types' own verdicts, never one guessed for the group
            verdict = coverage.worst(
                [coverage.verdict(t, instances, ruleset) for t in row["folded"]]
            )
            label = f"other ({format.plural(row['event_types'], 'event type')})"
            flow, spark, events, dead = "–", [], None, None
            trend, drains = "–", "–"
        else:
            verdict = coverage.verdict(name, instances, ruleset)
            label = name
            state = loaded["flow"].get(name)
            flow = state.state if state else "running"
            spark = depth.get(bounded_key(name), [])  # the samples' key of the type
            events, dead = type_link("events", name, f), type_link("dead_letters", name, f)
            said = loaded["trends"][name]
            trend, drains = said.rate_text, said.drain_text(int(row["queue_depth"]))
        result.append(
            {
                "event type": label,
                "status": verdict.label,
                # the backlog and its one trend before who says (a long "set by" would push
                # them out of sight at 1440 px)
                "queue depth": row["queue_depth"],
                "retrying": row["retrying"],
                "depth trend": trend,
                "drain ETA": drains,
                "set by": coverage.set_by(verdict, ruleset),
                "events": events,
                "dead letters": dead,
                "flow control": flow,
                "depth": spark,
                "pending": row["pending_total"],
                "oldest pending": row["oldest_pending_age"],
                "processing": row["processing"],
                "stuck": row["stuck_locks"],
                "P95 latency": row["latency_p95"],
                "processed/min": row.get("processed_per_minute"),
                "created/min": row.get("created_per_minute"),
                "failed": row["failed_in_window"],
            }
        )
    return result


COLUMNS = [
    Column("event type", "event type", 130),
    Column(
        "status",
        "status",
        120,
        help="The state of the alert rules whose scope holds the type (the rule: in the row's "
        "detail); a status comes only from a rule, never from the figures themselves.",
    ),
    Column("flow control", "flow control", 95, help="Paused, limited or a breaker's state."),
    Column("queue depth", "queue depth", 90, help="Pending rows due now."),
    Column(
        "depth trend",
        f"trend ({format.duration_label(DEFAULT_LOOKBACK_SECONDS)})",
        100,
        help="Queue depth per minute, least squares over the last "
        f"{format.duration_label(DEFAULT_LOOKBACK_SECONDS)} of samples: the trend the tiles "
        "and the firing alerts say too.",
    ),
    Column(
        "retrying",
        "retrying",
        70,
        help="Pending rows with attempts > 0 (SPEC §2 retrying): waiting for, or due for, "
        "another try after a failure — what a failing downstream answers before anything is "
        "dead-lettered.",
    ),
    Column(
        "oldest pending",
        "oldest pending",
        110,
        unit="seconds",
        help="Since the oldest pending row was created, including rows waiting in backoff.",
    ),
    Column("stuck", "stuck", 50, help="Processing rows past the lock timeout."),
    Column("failed", "failed", 58, help="Dead-lettered in the window."),
    Column("dead letters", "dead letters", 95, link="dead letters"),
    Column(
        "depth",
        "depth over the window",
        help="Queue depth per sample over the window (the sampler's history per event type).",
        chart=True,
    ),
    Column(
        "drain ETA",
        "drain ETA",
        help="When the queue depth reaches 0 at its trend; never when it grows or holds.",
    ),
    Column("P95 latency", "P95 latency", unit="seconds"),
    Column("events", "events", link="events"),
    Column("set by", "status set by"),
    Column("pending", "pending"),
    Column("processing", "processing"),
    Column("processed/min", "processed per minute", unit="rows/min"),
    Column("created/min", "created per minute", unit="rows/min"),
]
"""The table's columns: its key columns fit at 1440 px (``format.grid``); the depth's
sparkline, the drain ETA, P95 latency, the rule that set the status, pending, processing,
the rates and the link to its events show with a chosen row's detail."""


def _unscoped(instances: list[dict], ruleset: RuleSet | None) -> None:
    """Firing rules over the whole outbox or table (they label no event type)."""
    for instance in coverage.unscoped_firing(instances, ruleset):
        rule = instance["rule_model"]
        st.warning(
            f"**{format.md_text(rule.name)}** firing over all event types: "
            f"{format.md_text(rule.format(instance['value']))} ({format.md_text(rule.condition)})"
            f" since {format.instant(instance['firing_since'])}",
            icon=":material/notifications_active:",
        )


def load(
    db: Database,
    f: Filters,
    *,
    top: int,
    instances: list[dict],
    ruleset: RuleSet | None,
    backlog: BacklogPass | None = None,
    finished: BacklogPass | None = None,
) -> dict[str, Any]:
    """The table's figures (cached): ``by_event_type.measure``'s rows — the types a firing
    alert names pinned first — their flow-control states and their sampled history.

    Args:
        db: the page's Database.
        f: the sidebar's filters (window, event-type filter).
        top: event types with a row of their own (``settings.overview_top_event_types``).
        instances, ruleset: the alert states and rules (which types are pinned).
        backlog: the pass over the backlog of the same filter and window that the tiles came
            from (``loaders.status``' ``"backlog_pass"``): the rows' backlog figures are its
            own, not read again; default: read.
        finished: the scheduler's fresh snapshot holding the window's finished rows per
            event type over ``f.window`` (``loaders.status``' ``"finished_sample"``): each
            named type's latency P95 and rates come from it, not from the window's finished
            rows read now; default: read.

    Returns:
        ``{"rows": [...], "flow": {event_type: EventTypeFlow}, "controls": [Control]
        (``flow.controls.controls``), "history": [...] (over the window, and at least the
        trends' ``forecast.DEFAULT_LOOKBACK_SECONDS``; `other`'s rows too), "samples": [...]
        (the headline samples of the trends' window), "trends": {event_type: SeriesTrend}
        (each named type's depth, ``forecast.series_trend`` of ``forecast.scope_points``),
        "now": the database clock they were read at, "window_seconds": the window,
        "sampled_age_seconds": the age of the scheduler's sample the backlog columns come
        from, ``None`` when counted now, "finished_age_seconds": the age of the sample the
        P95 and rates come from, ``None`` when read now}``.
    """
    pinned = tuple(coverage.firing_event_types(instances, ruleset))
    sampled_at = backlog.sampled_at.isoformat() if backlog and backlog.sampled_at else None
    # loaders.status gives it only when it holds this window's (BacklogPass.finished_over)
    finished_at = finished.sampled_at.isoformat() if finished and finished.sampled_at else None
    return _table(
        db_key(db),
        db,
        f.window,
        f.event_type,
        top,
        pinned,
        sampled_at,
        backlog,
        finished_at,
        finished,
    )


def section(
    loaded: dict[str, Any],
    f: Filters,
    *,
    top: int,
    instances: list[dict],
    ruleset: RuleSet | None,
) -> None:
    """The section: firing rules over the whole outbox, then the table by event type.

    Args:
        loaded: ``load``'s value.
        f: the sidebar's filters (window, event-type filter).
        top: event types with a row of their own (``settings.overview_top_event_types``).
        instances, ruleset: the alert states and rules (each row's status).
    """
    st.subheader("By event type")
    _unscoped(instances, ruleset)
    if not loaded["rows"]:
        st.caption(
            f"No event type has rows pending, processing or dead-lettered in the last "
            f"{f.window_label}."
        )
        return
    st.caption(
        f"The {format.plural(top, 'event type')} in the most trouble, the rest as one row · "
        f"figures over the last {f.window_label}, the trend over the last "
        f"{format.duration_label(DEFAULT_LOOKBACK_SECONDS)} of samples"
        + backlog_sample.table_note(loaded.get("sampled_age_seconds"))
        + backlog_sample.finished_note(loaded.get("finished_age_seconds"))
        + ("" if ruleset is not None else " · the alert rules file is invalid: no status"),
        help="Most troubled first: firing, then stuck, dead-lettered, queue depth, oldest age. "
        "A status comes only from the alert rules whose scope holds the type, named with "
        "their scope. Select a row for the rest of its figures.",
    )
    format.grid(table_rows(loaded, instances, ruleset, f), COLUMNS, key="overview.by_type")


def split_chart(db: Database, f: Filters, troubled: list[str]) -> None:
    """History split by event type: a multiselect of sampled types (the ``troubled`` ones
    chosen first) and a figure."""
    choices = _choices(db_key(db), db, f.window)
    if not choices:
        st.caption(
            "No history per event type yet — `outbox-monitor scheduler` samples the top "
            "event types every few seconds."
        )
        return
    left, right = st.columns([3, 1])
    default = [bounded_key(n) for n in troubled if bounded_key(n) in choices][:SPLIT_DEFAULT]
    chosen = left.multiselect(
        "Split by event type", choices, default=default, key="overview.split_event_types"
    )
    column = right.selectbox(
        "Figure",
        list(HISTORY_FIGURES),
        format_func=lambda name: HISTORY_FIGURES[name][0],
        key="overview.split_figure",
    )
    if not chosen:
        return
    history = _history(db_key(db), db, f.window, tuple(chosen))
    unit = HISTORY_FIGURES[column][1]
    st.altair_chart(charts.by_event_type(history, column, unit), width="stretch")


@cached
def _history(key: str, _db: Database, window: float, names: tuple) -> list[dict[str, Any]]:
    return by_event_type.history(_db, event_types=names, window=window)
