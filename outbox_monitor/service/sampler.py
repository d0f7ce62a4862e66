"""The sampler: record the headline figures into ``outbox_monitor.samples`` (issue 2 §1) and
the figures of the top event types into ``outbox_monitor.event_type_samples`` (issue 15).

Samples give every headline figure a chart over time (queue depth over time can only come
from samples: the table keeps no history of its own state), and so the table's health: its
dead and live tuples, its size and its indexes' (their growth), the xmin horizon's age (issue
14), what each worker holds (``worker_sightings``, issue 15 item 7), and the history per
event type, bounded as /metrics is: the top ``OUTBOX_MONITOR_METRICS_TOP_EVENT_TYPES`` event
types by trouble and ``other`` (``by_event_type``). The scheduler calls ``record_sample``
every ``settings.sample_interval`` seconds.
"""

import logging
from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from outbox_monitor.figures import by_event_type, metrics
from outbox_monitor.figures.backlog import BacklogPass, backlog_pass, record_snapshot
from outbox_monitor.figures.error_grouping import keep_retry_error_groups_counted
from outbox_monitor.figures.registry import FIGURES, SAMPLED
from outbox_monitor.figures.worker_sightings import record_workers
from outbox_monitor.store.db import Database
from outbox_monitor.units import bounded_key

# the logger keeps its name from before the move into a package (log filters use it)
log = logging.getLogger("outbox_monitor.sampler")

SAMPLES_PRUNE_BATCH_ROWS = 5000
"""Samples of each kind deleted past the retention per pass, at most: ≈ 6 hours of headline
samples at the default 15 s interval, or ≈ 30 min of samples of 10 event types plus other;
a few milliseconds each (docs/deploy.md, "Retention of outbox-monitor's own tables")."""

HEADLINE = SAMPLED
"""The ``outbox_monitor.samples`` columns with their chart labels (``figures.registry.SAMPLED``)."""


def measure_headline(db: Database) -> dict[str, Any]:
    """Compute the headline figures now, each through its registry entry's ``measure``
    (``figures.registry.FIGURES``, SPEC §2 definitions); the latency quantiles from one query.

    Args:
        db: the connector; its settings give ``window`` (failed in window, latency) and
            ``lock_timeout`` (stuck locks).

    Returns:
        ``{column: value}`` for every key of ``HEADLINE``: counts (rows, tuples) and sizes
        (bytes) as ``int``, durations as seconds (``float``) or ``None`` (no pending row, no
        done row in the window).

    Raises:
        DatabaseUnavailable, QueryTimeout and the other errors of the connector.
    """
    window = db.settings.window
    values = {}
    with db.session():  # one connection checkout for the dozen statements
        # the latency quantiles come from one percentile query, not one query per quantile
        latency = metrics.latency_percentiles(db, window=window)
        for figure in FIGURES.values():
            if figure.sample_column:
                key, _, quantile = figure.status_key.partition(".")
                if key == "latency_seconds":
                    values[figure.sample_column] = latency[quantile]
                else:
                    values[figure.sample_column] = figure.measure(db, window, None, 1)
    return values


EVENT_TYPE_COLUMNS = {
    "queue_depth": "queue_depth",
    "oldest_pending_age_seconds": "oldest_pending_age",
    "latency_p95_seconds": "latency_p95",
    "failed_in_window": "failed_in_window",
    "retrying": "retrying",
}
"""The ``outbox_monitor.event_type_samples`` columns (migration 014) and the
``by_event_type.measure`` keys they record."""


def measure_event_types(
    db: Database,
    *,
    backlog: BacklogPass | None = None,
    finished: Mapping[str, Mapping[str, Any]] | None = None,
    failed: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """The per-event-type part of a sample now: the top
    ``settings.metrics_top_event_types`` event types by trouble and ``other``
    (``by_event_type.measure`` without rates, over the settings' window).

    Args:
        backlog: the pass over the backlog of every event type, over the settings' window,
            when the caller read it (``record_sample``, which stores it too); default: read.
        finished: ``metrics.finished_by_event_type`` of every event type over the settings'
            window, when the caller read it (``record_sample``, which stores it too);
            default: read for the kept types.
        failed: ``metrics.failed_by_event_type`` over the settings' window, when the caller
            read it (``record_sample``); default: read.

    Returns:
        ``{"event_type" (``units.bounded_key``), <every EVENT_TYPE_COLUMNS column>}`` rows;
        none when no event type has open rows or dead letters in the window.
    """
    rows = by_event_type.measure(
        db,
        top=db.settings.metrics_top_event_types,
        rates=False,
        backlog=backlog,
        finished=finished,
        failed=failed,
    )
    return [
        {"event_type": bounded_key(row["event_type"])}
        | {column: row[key] for column, key in EVENT_TYPE_COLUMNS.items()}
        for row in rows
    ]


NOTHING_FINISHED = {"latency_p95": None, "processed": 0, "created_finished": 0}
"""``metrics.finished_by_event_type``'s entry of a type without finished rows in the window."""


def finished_of_every_type(
    db: Database, passed: BacklogPass, failed: Mapping[str, int]
) -> dict[str, dict[str, Any]]:
    """``metrics.finished_by_event_type`` of every event type over the settings' window, with
    ``NOTHING_FINISHED`` for each type that has open rows (``passed``, the sampler's pass) or
    dead letters in the window (``failed``, ``metrics.failed_by_event_type`` over it) but no
    finished row: the snapshot then knows every type of its instant, and a reader tells a
    type new since (read now) from one with nothing finished (``by_event_type.measure``)."""
    finished = metrics.finished_by_event_type(db, event_types=None)
    known = {row["event_type"] for row in passed.by_event_type()}
    known |= set(failed)
    return {name: finished.get(name, NOTHING_FINISHED) for name in sorted(known | set(finished))}


def record_sample(db: Database, *, primary: Database | None = None) -> dict[str, Any]:
    """Record one sample of the headline figures, then drop samples past the retention; then
    one pass over the workers (``worker_sightings.record_workers``); then the retry error
    groups' count when half an interval old (``error_grouping.keep_retry_error_groups_counted``),
    so the pages only read it.

    Measures through ``db``, inserts one row with the named query ``sample_insert``
    (``sampled_at`` is the writing database's ``now()``) and the per-event-type rows at the
    same instant (``event_type_sample_insert``), the pass over the backlog they came from as the
    table's backlog snapshot with the window's finished rows of every event type
    (``backlog.record_snapshot``, migrations 031 and 033), and deletes this
    table's samples of both kinds older than ``settings.sample_retention`` seconds
    (``samples_prune``, ``event_type_samples_prune``) through ``primary``, at most
    ``SAMPLES_PRUNE_BATCH_ROWS`` of each kind a pass, oldest first (after the retention was
    lowered, the backlog goes over the next passes, each under the statement timeout).

    Args:
        db: the connector of the monitored database (a hot standby may serve it).
        primary: the connector the scheduler writes through (``OUTBOX_MONITOR_PRIMARY_DSN``);
            default ``db``.

    Returns:
        ``{"table_name", "sampled_at" (datetime), <every HEADLINE column>,
        "event_types" (``measure_event_types``'s rows), "pruned" (samples deleted by the
        retention), "event_types_pruned" (per-event-type rows deleted), "workers" (workers
        recorded), "retry_groups_counted_at" (when the retry error groups were counted;
        ``None`` when this login may not count them or the count timed out: logged)}``.

    Raises:
        DatabaseUnavailable, QueryTimeout, SchemaNotInitialised (no samples table: run
        ``init-db``) and the other errors of the connector. Nothing is recorded then.
    """
    figures = measure_headline(db)
    passed = backlog_pass(db)
    failed = metrics.failed_by_event_type(db)
    finished = finished_of_every_type(db, passed, failed)
    event_types = measure_event_types(db, backlog=passed, finished=finished, failed=failed)
    writes = primary or db
    params = {"table_name": db.table_name, **figures}
    retention = {
        "table_name": db.table_name,
        "retention": db.settings.sample_retention,
        "batch": SAMPLES_PRUNE_BATCH_ROWS,
    }
    with writes.connection() as conn, conn.transaction():
        inserted = conn.execute(writes.compose("sample_insert"), params).fetchone()
        if event_types:
            conn.execute(
                writes.compose("event_type_sample_insert"),
                {
                    "table_name": db.table_name,
                    "sampled_at": inserted["sampled_at"],
                    "rows": Jsonb(event_types),
                },
            )
        # the pass itself, for the Overview above backlog.SAMPLED_ABOVE_ROWS (migration 031)
        record_snapshot(
            conn,
            writes.compose,
            db.table_name,
            passed,
            sampled_at=inserted["sampled_at"],
            finished=finished,
            finished_window=db.settings.window,
        )
        pruned = conn.execute(writes.compose("samples_prune"), retention).rowcount
        types_pruned = conn.execute(writes.compose("event_type_samples_prune"), retention).rowcount
    workers = record_workers(db, primary=writes)
    # counted every pass (its count is an interval old), unless a page or status just did
    counted_at = keep_retry_error_groups_counted(writes, max_age=db.settings.sample_interval / 2)
    log.debug("sample of %s: %s (pruned %d, %d workers)", db.table_name, figures, pruned, workers)
    return {
        "table_name": db.table_name,
        "sampled_at": inserted["sampled_at"],
        **figures,
        "event_types": event_types,
        "pruned": pruned,
        "event_types_pruned": types_pruned,
        "workers": workers,
        "retry_groups_counted_at": counted_at,
    }
