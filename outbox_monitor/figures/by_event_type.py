"""The SPEC §2 figures per event type, bounded (issue 15 items 1 and 2): the top N event types
by trouble, each with its own row, and one row ``other`` for the rest — the Overview's table
and the sampler's history per event type.

O(backlog) whatever the number of event types: the backlog figures of every type come from
one pass over the pending and processing rows (``backlog.backlog_pass``), the dead
letters of every type from one grouped count (``metrics.failed_by_event_type``), and the kept
types' latency P95 and throughput from one statement over the window's finished rows
(``metrics.finished_by_event_type``: the predicates of ``latency_percentiles`` and
``throughput`` per type; the open part of created per minute from the one backlog pass). Three
statements however many types are kept, and every value is the ``metrics`` figure for exactly
that type (the tests compare them).
"""

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from outbox_monitor.figures import metrics
from outbox_monitor.figures.backlog import BACKLOG_COUNTS, BacklogPass, backlog_pass
from outbox_monitor.figures.forecast import SeriesTrend, scope_points, series_trend
from outbox_monitor.flow.controls import Control
from outbox_monitor.flow.event_types import EventTypeFlow, event_type_flows
from outbox_monitor.flow.model import matches
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import ExactEventType
from outbox_monitor.units import OTHER, bounded_key

COUNTS = BACKLOG_COUNTS
"""Row counts of ``BacklogPass.by_event_type`` (summed into ``other``), with ``retrying``."""


def trouble(row: Mapping[str, Any], pinned: Collection[str] = ()) -> tuple:
    """The sort key of an event type by trouble, most troubled first: pinned (a firing alert
    names it) first, then stuck locks, dead letters in the window, queue depth, oldest pending
    age, and the name.

    Args:
        row: a row with ``event_type``, ``stuck_locks``, ``failed_in_window``,
            ``queue_depth`` and ``oldest_pending_age`` (seconds or ``None``).
        pinned: event types ranked first.
    """
    return (
        row["event_type"] not in pinned,
        -row["stuck_locks"],
        -row["failed_in_window"],
        -row["queue_depth"],
        -(row["oldest_pending_age"] or 0.0),
        row["event_type"],
    )


def ranked(
    open_rows: Sequence[Mapping[str, Any]],
    failed: Mapping[str, int],
    *,
    pinned: Collection[str] = (),
) -> list[dict[str, Any]]:
    """Every event type with open rows or dead letters in the window, most troubled first
    (``trouble``).

    Args:
        open_rows: ``metrics.open_by_event_type``'s (``BacklogPass.by_event_type``'s) rows.
        failed: ``metrics.failed_by_event_type`` (``{event_type: dead letters}``).
        pinned: event types ranked first, also listed when they have neither.

    Returns:
        Rows of ``open_by_event_type``'s keys plus ``failed_in_window`` (zeros for a type
        with none of those rows).
    """
    empty = dict.fromkeys((*COUNTS, "retrying"), 0) | {
        "oldest_pending_age": None,
        "oldest_pending_at": None,
    }
    rows = {row["event_type"]: {**empty, **row, "failed_in_window": 0} for row in open_rows}
    for event_type in (*failed, *pinned):
        rows.setdefault(event_type, {**empty, "event_type": event_type, "failed_in_window": 0})
    for event_type, count in failed.items():
        rows[event_type]["failed_in_window"] = count
    return sorted(rows.values(), key=lambda row: trouble(row, pinned))


def fold(rows: Sequence[Mapping[str, Any]], *, top: int) -> list[dict[str, Any]]:
    """Keep the first ``top`` rows and fold the rest into one row ``OTHER`` (bounded, as the
    ``event_type`` label of /metrics): counts and dead letters summed, the oldest pending age
    the largest; ``event_types`` says how many types a row holds (1, or the folded ones),
    ``folded`` names them (``OTHER``'s row only). A real event type named ``other`` is folded
    there too, as on /metrics.

    Returns:
        At most ``top + 1`` rows; no ``OTHER`` row when nothing is folded.
    """
    kept = [{**row, "event_types": 1} for row in rows[:top] if row["event_type"] != OTHER]
    rest = [row for row in rows if row["event_type"] == OTHER] + [
        row for row in rows[top:] if row["event_type"] != OTHER
    ]
    if rest:
        ages = [row["oldest_pending_age"] for row in rest if row["oldest_pending_age"] is not None]
        created = [row["oldest_pending_at"] for row in rest if row.get("oldest_pending_at")]
        other: dict[str, Any] = {
            "event_type": OTHER,
            "oldest_pending_age": max(ages, default=None),
            "oldest_pending_at": min(created, default=None),
            "event_types": len(rest),
            "folded": [row["event_type"] for row in rest],
        }
        for name in (*COUNTS, "retrying", "failed_in_window"):
            other[name] = sum(row[name] for row in rest)
        kept.append(other)
    return kept


def measure(
    db: Database,
    *,
    top: int,
    window: float | None = None,
    event_type: str | None = None,
    pinned: Collection[str] = (),
    rates: bool = True,
    backlog: BacklogPass | None = None,
    finished: Mapping[str, Mapping[str, Any]] | None = None,
    failed: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """The figures per event type now: the ``top`` event types by trouble and ``other``.

    Args:
        top: event types with a row of their own (``OUTBOX_MONITOR_OVERVIEW_TOP_EVENT_TYPES``
            on the Overview, ``OUTBOX_MONITOR_METRICS_TOP_EVENT_TYPES`` for the samples).
        window: seconds of the windowed figures (default: settings).
        event_type: SPEC §2 filter over the event types listed.
        pinned: event types ranked first (a firing alert names them).
        rates: also measure processed and created per minute (the table; not the samples).
        backlog: the pass over the backlog when the caller read it already, with the same
            ``event_type`` (the Overview shares ``metrics.status``'s): each type's backlog row
            comes from it (``BacklogPass.by_event_type``); default: read. When its window
            (``BacklogPass.window``: a snapshot's is the sampler's) is not ``window``, the
            named types' open rows created in the window are counted now
            (``metrics.created_open_by_event_type``), and ``other``'s from the filter's.
        finished: ``metrics.finished_by_event_type`` over the same ``window``, with an entry
            (zeros when none finished) for every type with open rows or dead letters when read
            (the scheduler's sample, ``BacklogPass.finished_over``, or the sampler's own read,
            ``sampler.finished_of_every_type``): each named type's P95, processed and created
            come from it; a named type it has no entry for (new since the sample) is read now,
            so that no type's created rows are missing beside its dead letters counted now;
            default: read for the named types.
        failed: ``metrics.failed_by_event_type`` over the same ``window`` and ``event_type``
            when the caller read it (the sampler, which needs it for ``finished`` too);
            default: read.

    Returns:
        ``fold``'s rows, each named type's with ``created_in_window`` (rows created in the
        window, open or finished), each with ``latency_p95`` (seconds; ``None`` for ``other``:
        percentiles do not add up, and for a type with no row done in the window) and, with
        ``rates``, ``processed_per_minute`` and ``created_per_minute`` (``other``'s: the
        filter's total less the kept types', or with ``finished`` given, the sum of the
        filter's other types in it, so that every rate is of one instant).

    Raises:
        The connector's errors (``QueryTimeout``, ``DatabaseUnavailable``, …).
    """
    seconds = db.settings.window if window is None else window
    with db.session():
        if backlog is None:
            backlog = backlog_pass(db, event_type=event_type, window=seconds)
        open_rows = backlog.by_event_type()
        if failed is None:
            failed = metrics.failed_by_event_type(db, window=seconds, event_type=event_type)
        rows = fold(ranked(open_rows, failed, pinned=pinned), top=top)
        named = [row for row in rows if row["event_type"] != OTHER]
        open_other = None  # the open rows created in the window no named type holds
        if backlog.window != seconds:  # a snapshot of the sampler's window (attack33)
            counted = metrics.created_open_by_event_type(
                db, event_types=[row["event_type"] for row in named], window=seconds
            )
            for row in named:
                row["created_open_in_window"] = counted.get(row["event_type"], 0)
            open_other = metrics.created_open_in_window(
                db, window=seconds, event_type=event_type
            ) - sum(counted.values())
        sampled = finished is not None
        unknown = [row["event_type"] for row in named if row["event_type"] not in (finished or {})]
        if unknown:
            read = metrics.finished_by_event_type(db, event_types=unknown, window=seconds)
            finished = {**(finished or {}), **read}
        for row in rows:
            row["latency_p95"] = None
        for row in named:
            done = finished.get(row["event_type"], {})
            row["latency_p95"] = done.get("latency_p95")
            # the open part of created came with the one pass over the backlog
            row["created_in_window"] = row["created_open_in_window"] + done.get(
                "created_finished", 0
            )
            if rates:
                row["processed_per_minute"] = done.get("processed", 0) / (seconds / 60)
                row["created_per_minute"] = row["created_in_window"] / (seconds / 60)
        if rates and rows and rows[-1]["event_type"] == OTHER and sampled:
            if open_other is None:
                open_other = backlog.created_open_in_window() - sum(
                    row["created_open_in_window"] for row in named
                )
            rows[-1].update(_other_rates(finished, named, open_other, event_type, seconds))
        elif rates and rows and rows[-1]["event_type"] == OTHER:
            total = metrics.throughput(
                db,
                window=seconds,
                event_type=event_type,
                open_created=None
                if backlog.sampled_at or backlog.window != seconds
                else backlog.created_open_in_window(),
            )
            for key, value in total.items():
                named_sum = sum(row[key] for row in named)
                rows[-1][key] = max(value - named_sum, 0.0)
    return rows


def _other_rates(
    finished: Mapping[str, Mapping[str, Any]],
    named: Sequence[Mapping[str, Any]],
    open_created: int,
    event_type: str | None,
    seconds: float,
) -> dict[str, float]:
    """``other``'s rates from the same finished rows as the named types' (the scheduler's
    sample): the types of ``finished`` the filter ``event_type`` holds and no row names, with
    ``open_created``, the open rows created in the window beyond the named types'; never a
    total of finished rows counted now less sampled figures (attack33)."""
    kept = {row["event_type"] for row in named}
    rest = [
        done
        for name, done in finished.items()
        if name not in kept
        and (
            not event_type
            or (
                name == event_type
                if isinstance(event_type, ExactEventType)
                else matches(event_type, name)
            )
        )
    ]
    minutes = seconds / 60
    return {
        "processed_per_minute": sum(done.get("processed", 0) for done in rest) / minutes,
        "created_per_minute": (open_created + sum(done.get("created_finished", 0) for done in rest))
        / minutes,
    }


def flows(rows: Sequence[Mapping[str, Any]], found: Sequence[Control]) -> dict[str, EventTypeFlow]:
    """The flow-control state of each row's event type (``other`` left out): SPEC §5's
    ``event_type_flows`` of its pending, due and processing rows under the controls ``found``
    (``flow.controls.controls``), by event type."""
    named = [
        {
            "event_type": row["event_type"],
            "pending": row["pending_total"],
            "due": row["queue_depth"],
            "processing": row["processing"],
        }
        for row in rows
        if row["event_type"] != OTHER
    ]
    return {flow.event_type: flow for flow in event_type_flows(named, found)}


def history(
    db: Database, *, event_types: Sequence[str], window: float | None = None
) -> list[dict[str, Any]]:
    """The sampler's per-event-type rows (``outbox_monitor.event_type_samples``, migration 014)
    of these event types (``other`` when named) over the window, oldest first.

    Returns:
        Rows ``{sampled_at, event_type, queue_depth, oldest_pending_age_seconds,
        latency_p95_seconds, failed_in_window, retrying}``.
    """
    return db.fetch_all(
        "event_type_samples_series",
        {
            "table_name": db.table_name,
            "window": db.settings.window if window is None else window,
            "event_types": list(event_types),
        },
    )


def sampled_event_types(db: Database, *, window: float | None = None, limit: int) -> list[str]:
    """The event types with per-event-type samples over the window, the most recently
    sampled first: at most ``limit`` (the choices of "split by event type")."""
    rows = db.fetch_all(
        "event_type_samples_names",
        {
            "table_name": db.table_name,
            "window": db.settings.window if window is None else window,
            "limit": limit,
        },
    )
    return [row["event_type"] for row in rows]


def depth_trends(
    rows: Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]],
    samples: Sequence[Mapping[str, Any]],
    now: datetime,
) -> dict[str, SeriesTrend]:
    """Each named event type's queue-depth trend, the one the Overview's tile, per-type row,
    firing alerts and "what is wrong" line all say: ``forecast.series_trend`` of
    ``forecast.scope_points`` (its rows and ``other``'s, as the evaluator reads a
    ``predict`` rule's).

    Args:
        rows: ``measure`` rows (``other``'s is skipped).
        history: ``history`` rows of those types and ``other``, over at least
            ``forecast.DEFAULT_LOOKBACK_SECONDS``.
        samples: ``metrics.samples_series`` rows of that window.
        now: the database clock they were read at.

    Returns:
        ``{event_type: SeriesTrend}``.
    """
    by_key: dict[str, list[Mapping[str, Any]]] = {}  # each type's rows, grouped once for all
    for sample in history:
        by_key.setdefault(sample["event_type"], []).append(sample)
    trends = {}
    for row in rows:
        if row["event_type"] == OTHER:
            continue
        key = bounded_key(row["event_type"])
        mine = [*by_key.get(key, []), *by_key.get(OTHER, [])]
        points = scope_points(samples, mine, "queue_depth", now, event_type=key)
        trends[row["event_type"]] = series_trend(points)
    return trends


def trend_keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ``history`` keys ``depth_trends`` needs: each row's type as the samples key it
    (``units.bounded_key``), and ``other`` (a sample that folded a type holds no point)."""
    return list(dict.fromkeys([*(bounded_key(row["event_type"]) for row in rows), OTHER]))


def known_event_types(db: Database, *, window: float, limit: int, dead_letters: bool) -> list[str]:
    """The event types known without reading the outbox's history (``known_event_types``):
    the planner's statistics of its ``event_type`` column (most common values, histogram
    bounds), the types of its pending and processing rows (the backlog, through the claim
    index), those of the per-event-type samples of the last ``window`` seconds (without
    ``other``) and, with ``dead_letters``, those of its dead letters (their first 200
    characters, ``filters.EVENT_TYPE_KEY_CHARS``: one probe of the recommended
    ``failed_by_type`` index per type). A type with only done rows that the statistics
    missed is not among them.

    Args:
        window: seconds of samples to read.
        limit: at most this many types, in order.
        dead_letters: read the dead letters' types: only when the ``failed_by_type`` index
            is there (without it each probe would scan the table).

    Returns:
        The event types, sorted.

    Raises:
        The connector's errors (``QueryTimeout``, ``DatabaseUnavailable``, …).
    """
    schema, table = db.settings.table_parts
    rows = db.fetch_all(
        "known_event_types",
        {
            "schema": schema,
            "table": table,
            "table_name": db.table_name,
            "window": window,
            "other": OTHER,
            "limit": limit,
            "dead_letters": dead_letters,
        },
    )
    return [row["event_type"] for row in rows]
