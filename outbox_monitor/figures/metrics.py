"""Every figure of SPEC §2, one function each; the dashboard, CLI and alerts call these (the
error groups, with their cache: ``error_grouping``).

All durations are seconds (float). "now" is the database's ``now()``. Every function takes
an optional ``event_type`` filter: a value containing ``%`` is a LIKE pattern (``_`` and
``\\`` literal), any other value an exact match. ``window`` and ``lock_timeout`` default to
the settings of ``db`` (1 h and 15 min unless configured).
"""

from collections.abc import Sequence
from typing import Any

from outbox_monitor.figures import dead_letter_attempts
from outbox_monitor.figures.backlog import BacklogPass, backlog_pass
from outbox_monitor.figures.error_grouping import retry_error_groups
from outbox_monitor.figures.workers import liveness
from outbox_monitor.flow.controls import controls
from outbox_monitor.flow.held import breakers_open_among, held_by
from outbox_monitor.health.status import health_status
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where


def _window(db: Database, window: float | None) -> float:
    """The window in seconds: the argument, or the settings' window when ``None``."""
    return db.settings.window if window is None else window


def _count(db: Database, query: str, event_type: str | None, **params: Any) -> Any:
    where = Where().event_type(event_type)
    row = db.fetch_one(query, {**params, **where.params}, and_filters=where.fragment)
    return row["value"]


def queue_depth(db: Database, *, event_type: str | None = None) -> int:
    """Rows due now: ``status='pending' and available_at <= now()`` (SPEC §2 queue depth)."""
    return _count(db, "queue_depth", event_type)


def pending_total(db: Database, *, event_type: str | None = None) -> int:
    """All ``pending`` rows, due or waiting in backoff (SPEC §2 pending total)."""
    return _count(db, "pending_total", event_type)


def scheduled_retries(db: Database, *, event_type: str | None = None) -> int:
    """``pending`` rows with ``available_at > now()`` (SPEC §2 scheduled retries)."""
    return _count(db, "scheduled_retries", event_type)


def retrying(db: Database, *, event_type: str | None = None) -> int:
    """``pending`` rows with ``attempts > 0``: waiting for, or due for, another try after a
    failure (SPEC §2 retrying), whether in backoff or due now."""
    return _count(db, "retrying", event_type)


def oldest_pending_age(db: Database, *, event_type: str | None = None) -> float | None:
    """Seconds from the oldest pending row's ``created_at`` to now (SPEC §2).

    Returns:
        Seconds, or ``None`` when no row is pending. Rows waiting in backoff count.
    """
    return _count(db, "oldest_pending_age", event_type)


def processing(db: Database, *, event_type: str | None = None) -> int:
    """Rows in ``processing`` (claimed, not yet acked) (SPEC §2)."""
    return _count(db, "processing", event_type)


def stuck_locks(
    db: Database, *, lock_timeout: float | None = None, event_type: str | None = None
) -> int:
    """``processing`` rows with ``locked_at < now() - lock_timeout`` or ``locked_at`` null
    (an orphan: stuck by definition) (SPEC §2).

    Args:
        lock_timeout: seconds (default: settings, 15 min).
    """
    timeout = db.settings.lock_timeout if lock_timeout is None else lock_timeout
    return _count(db, "stuck_locks", event_type, lock_timeout=timeout)


def latency_percentiles(
    db: Database, *, window: float | None = None, event_type: str | None = None
) -> dict[str, float | None]:
    """Continuous P50/P95/P99 of ``processed_at - created_at`` in seconds (SPEC §2).

    Over rows with ``status='done'`` and ``processed_at`` in ``(now() - window, now()]``;
    a negative duration (clock skew) counts as 0.

    Returns:
        ``{"p50": s, "p95": s, "p99": s}``, each ``None`` when no row is in the window.
    """
    where = Where().event_type(event_type)
    row = db.fetch_one(
        "latency_percentiles",
        {"window": _window(db, window), **where.params},
        and_filters=where.fragment,
    )
    return {key: row[key] for key in ("p50", "p95", "p99")}


def throughput(
    db: Database,
    *,
    window: float | None = None,
    event_type: str | None = None,
    open_created: int | None = None,
) -> dict[str, float]:
    """Rows per minute over the window (SPEC §2 throughput).

    Rows created in the window are counted in two parts: the open ones (pending,
    processing: ``created_open_in_window``) and the finished ones
    (``created_finished_in_window``).

    Args:
        window: seconds (default: settings).
        event_type: SPEC §2 filter.
        open_created: the open rows of ``event_type`` created in the window when the caller
            counted them already (``open_by_event_type``'s ``created_open_in_window``, over
            the same window): not read again.

    Returns:
        ``{"processed_per_minute": done rows with processed_at in the window / minutes,
        "created_per_minute": rows with created_at in the window / minutes}``.
    """
    seconds = _window(db, window)
    minutes = seconds / 60
    processed = _count(db, "processed_in_window", event_type, window=seconds)
    if open_created is None:
        open_created = created_open_in_window(db, window=seconds, event_type=event_type)
    created = open_created + _count(db, "created_finished_in_window", event_type, window=seconds)
    return {"processed_per_minute": processed / minutes, "created_per_minute": created / minutes}


def created_open_in_window(
    db: Database, *, window: float | None = None, event_type: str | None = None
) -> int:
    """Open rows (pending, processing) with ``created_at`` in ``(now() - window, now()]``:
    the open part of SPEC §2 throughput's rows created in the window (named query
    ``created_open_in_window``).

    Args:
        window: seconds (default: settings).
        event_type: SPEC §2 filter.
    """
    return _count(db, "created_open_in_window", event_type, window=_window(db, window))


def created_open_by_event_type(
    db: Database, *, event_types: Sequence[str], window: float | None = None
) -> dict[str, int]:
    """``created_open_in_window`` of each of ``event_types`` (exact names), in one statement
    (named query ``created_open_by_event_type``).

    Args:
        event_types: exact event type names (no pattern).
        window: seconds (default: settings).

    Returns:
        ``{event_type: rows}``; a type without such rows is absent (read as 0).
    """
    if not event_types:
        return {}
    rows = db.fetch_all(
        "created_open_by_event_type",
        {"window": _window(db, window), "event_types": list(event_types)},
    )
    return {row["event_type"]: row["created_open_in_window"] for row in rows}


def finished_by_event_type(
    db: Database, *, event_types: Sequence[str] | None, window: float | None = None
) -> dict[str, dict[str, Any]]:
    """Per event type, the window's figures of finished rows, in one statement for every type
    (named query ``finished_by_event_type``): for each, what ``latency_percentiles``' P95,
    ``throughput``'s processed rows and the finished part of its created rows count for
    exactly that type (SPEC §2 latency and throughput).

    Args:
        event_types: exact event type names (no pattern); ``None``: every event type with
            finished rows in the window (the scheduler's sample, ``backlog.record_snapshot``).
        window: seconds (default: settings).

    Returns:
        ``{event_type: {"latency_p95": seconds or None, "processed": rows,
        "created_finished": rows}}``; a type without such rows is absent (read as ``None``,
        0 and 0).
    """
    if event_types is not None and not event_types:
        return {}
    rows = db.fetch_all(
        "finished_by_event_type",
        {
            "window": _window(db, window),
            "event_types": None if event_types is None else list(event_types),
        },
    )
    return {
        row["event_type"]: {
            "latency_p95": row["p95"],
            "processed": row["processed"],
            "created_finished": row["created_finished"],
        }
        for row in rows
    }


def failed_by_event_type(
    db: Database, *, window: float | None = None, event_type: str | None = None
) -> dict[str, int]:
    """Dead-lettered rows by event type, counted by time of failure (SPEC §2 failures).

    Rows with ``status='failed'`` and ``processed_at`` in ``(now() - window, now()]``.

    Returns:
        ``{event_type: count}``, biggest first; empty when none failed in the window.
    """
    where = Where().event_type(event_type)
    rows = db.fetch_all(
        "failed_by_event_type",
        {"window": _window(db, window), **where.params},
        and_filters=where.fragment,
    )
    return {row["event_type"]: row["failed"] for row in rows}


def failed_in_window(
    db: Database, *, window: float | None = None, event_type: str | None = None
) -> int:
    """Rows dead-lettered with ``processed_at`` in ``(now() - window, now()]`` (SPEC §2
    failures, all event types together): the sum of ``failed_by_event_type`` without
    reading each row's event type (an index-only scan of the recommended index when
    unfiltered). Exact."""
    return _count(db, "failed_in_window", event_type, window=_window(db, window))


def backlog(
    db: Database, *, lock_timeout: float | None = None, event_type: str | None = None
) -> dict[str, Any]:
    """Every backlog figure of SPEC §2 from one pass over the pending and processing rows
    (``backlog_pass``).

    The same definitions as ``queue_depth``, ``pending_total``, ``scheduled_retries``,
    ``retrying``, ``oldest_pending_age``, ``processing`` and ``stuck_locks`` (each of which
    reads only what its own figure needs), computed together in one snapshot: what
    ``status`` shows, with retry pressure. Reading ``attempts`` and ``locked_at`` visits the
    heap row of every backlog row (neither is in an index of the users'), which most of the
    separate counts avoid: a caller that needs no histogram (an alert rule) is cheaper with
    the separate counts (benchmarks/RESULTS.md).

    Args:
        lock_timeout: seconds (default: settings, 15 min).

    Returns:
        ``{"queue_depth", "pending_total", "scheduled_retries", "retrying", "processing",
        "stuck_locks"}`` as rows (``retrying``: the pending rows of the groups with
        attempts > 0), ``"oldest_pending_age_seconds"`` (``None`` when nothing is
        pending) and ``"attempts_histogram"``: the backlog's ``{attempts: rows}`` in
        ascending attempts (the dead letters are not in it).
    """
    return backlog_pass(db, lock_timeout=lock_timeout, event_type=event_type).backlog()


def open_by_event_type(
    db: Database,
    *,
    lock_timeout: float | None = None,
    event_type: str | None = None,
    window: float | None = None,
) -> list[dict[str, Any]]:
    """The backlog figures of SPEC §2 per event type, from ONE pass over the pending and
    processing rows (``backlog_pass``: the predicates of ``queue_depth``, ``pending_total``,
    ``scheduled_retries``, ``oldest_pending_age``, ``processing`` and ``stuck_locks``, each
    a FILTER): O(backlog) however many event types there are.

    Args:
        lock_timeout: seconds (default: settings, 15 min).
        window: seconds of ``created_open_in_window`` (default: settings).

    Returns:
        One row per event type with open rows, by name: ``event_type``, ``queue_depth``,
        ``pending_total``, ``scheduled_retries``, ``oldest_pending_age`` (seconds, ``None``
        when nothing of that type is pending), ``oldest_pending_at`` (that row's
        ``created_at``), ``processing``, ``stuck_locks`` and
        ``retrying`` (pending rows with ``attempts >= 1``: retries in backoff or due again)
        and ``created_open_in_window`` (its open rows created in the window: ``throughput``'s
        ``open_created``).
    """
    return backlog_pass(
        db, lock_timeout=lock_timeout, event_type=event_type, window=window
    ).by_event_type()


def attempts_histogram(db: Database, *, event_type: str | None = None) -> dict[int, int]:
    """Retry pressure: rows not yet done (pending, processing, failed) by ``attempts``
    (SPEC §2): the backlog's part from ``backlog``, the dead letters' from their index.

    Returns:
        ``{attempts: rows}`` in ascending attempts; only values that occur.
    """
    where = Where(keyed=True).event_type(event_type)
    return dead_letter_attempts.added(
        backlog(db, event_type=event_type)["attempts_histogram"],
        dead_letter_attempts.exact(db, where),
    )


def attempts_histogram_capped(
    db: Database, *, cap: int, event_type: str | None = None
) -> tuple[dict[int, int], bool]:
    """Retry pressure for the dashboard: ``attempts_histogram``, with its dead letters
    estimated when there are more than ``cap`` of them and a sample can tell (SPEC §2: only
    the dashboard estimates, labelled).

    The backlog (pending, processing) is counted exactly, and so are the dead letters up to
    ``cap`` (index-only). Above it they may be estimated from a sample of the table's pages
    (``dead_letter_attempts.capped``: ≈ 10 ms instead of reading every dead letter's index
    entry, ≈ 100 ms for 1 M; benchmarks/RESULTS.md).

    Args:
        cap: dead letters counted exactly (``estimates.DASHBOARD_COUNT_CAP``).

    Returns:
        ``({attempts: rows}, exact)``: ascending attempts; ``exact`` false when the dead
        letters' counts are estimates.
    """
    dead_letters, exact = dead_letter_attempts.capped(
        db, Where(keyed=True).event_type(event_type), cap
    )
    backlog_part = backlog(db, event_type=event_type)["attempts_histogram"]
    return dead_letter_attempts.added(backlog_part, dead_letters), exact


def attempts_at_least(db: Database, attempts: int, *, event_type: str | None = None) -> int:
    """Rows not yet done with ``attempts >= attempts`` (SPEC §2 alerts metric)."""
    return _count(db, "attempts_at_least", event_type, attempts=attempts)


def throughput_series(
    db: Database, *, window: float | None = None, bucket: float = 60, event_type: str | None = None
) -> list[dict[str, Any]]:
    """Rows created, processed and dead-lettered per ``bucket`` seconds over the window.

    Returns:
        Rows ``{bucket (timestamptz), kind ("created"|"processed"|"dead-lettered"),
        rows}``, oldest first; buckets without rows are absent.
    """
    where = Where().event_type(event_type)
    return db.fetch_all(
        "throughput_series",
        {"window": _window(db, window), "bucket": bucket, **where.params},
        and_filters=where.fragment,
    )


def latency_series(
    db: Database, *, window: float | None = None, bucket: float = 60, event_type: str | None = None
) -> list[dict[str, Any]]:
    """P50/P95 latency (seconds) of done rows per ``processed_at`` bucket over the window.

    Returns:
        Rows ``{bucket, p50, p95}``, oldest first.
    """
    where = Where().event_type(event_type)
    return db.fetch_all(
        "latency_series",
        {"window": _window(db, window), "bucket": bucket, **where.params},
        and_filters=where.fragment,
    )


def samples_series(db: Database, *, window: float | None = None) -> list[dict[str, Any]]:
    """Samples recorded by the sampler over the window (all event types), oldest first.

    Returns:
        Rows with ``sampled_at`` and the headline figures (see ``sampler.HEADLINE``).
    """
    return db.fetch_all(
        "samples_series", {"table_name": db.table_name, "window": _window(db, window)}
    )


def status(
    db: Database,
    *,
    window: float | None = None,
    lock_timeout: float | None = None,
    event_type: str | None = None,
    count_cap: int | None = None,
    backlog: BacklogPass | None = None,
    every_type: BacklogPass | None = None,
) -> dict[str, Any]:
    """Every SPEC §2 figure under its ``status --json`` key, all exact (``status --json``,
    the sampler), unless the dashboard passes ``count_cap``.

    The backlog is read once (``backlog_pass``): its figures, its part of retry pressure, the
    open part of created per minute and, without an event-type filter, the workers' liveness
    come from that one pass (with a filter the liveness, of every event type, reads its own).

    Args:
        backlog: the pass when the caller read it already (the Overview: its table by event
            type comes from the same pass), with the same ``event_type``, ``window`` and
            ``lock_timeout``; default: read here. A snapshot (``backlog.sampled_pass``: the
            Overview above ``backlog.SAMPLED_ABOVE_ROWS``) gives its backlog figures, retry
            pressure's backlog part and the liveness as sampled; the open part of created per
            minute is then counted now.
        every_type: with an event-type filter, the pass of every event type the workers'
            liveness comes from when the caller has it (a snapshot); default: read here.
        count_cap: the dashboard's cap (``estimates.DASHBOARD_COUNT_CAP``): the dead letters
            of ``attempts_histogram`` may then be estimated above it
            (``attempts_histogram_capped``; SPEC §2: only the dashboard estimates, and says
            so). ``None``: every figure exact.

    Returns:
        ``{"queue_depth", "pending_total", "scheduled_retries", "retrying",
        "oldest_pending_age_seconds", "processing", "stuck_locks",
        "latency_seconds": {"p50","p95","p99"}, "processed_per_minute",
        "created_per_minute", "failed_in_window", "failed_by_event_type",
        "attempts_histogram" ({"<attempts>": rows}),
        "retry_error_groups" (without ``count_cap`` only: the retrying rows' error groups,
        exact, ``error_grouping.retry_error_groups`` counted now (migrations 025, 026);
        the dashboard, which passes ``count_cap``, reads them with their totals through
        ``error_grouping.retry_groups``), "rows_held",
        "rows_held_by_event_type" ({event type: due rows held by a control, SPEC §5}),
        "rows_throttled", "rows_throttled_by_control" ({control filter: rows}),
        "breakers_open" (circuit breakers open or half-open),
        "health" (the table's health, ``health.status.health_status``: tuples, vacuum,
        sizes, the xmin horizon's holders; whatever the event-type filter),
        "workers" (the fleet's liveness, ``workers.Liveness.as_json``; whatever the filter),
        "window_seconds", "lock_timeout_seconds", "event_type", "table", "now"}``; with
        ``count_cap`` also
        ``"estimated"``: the keys whose values are estimates (``[]`` or
        ``["attempts_histogram"]``).
    """
    window = _window(db, window)
    lock_timeout = db.settings.lock_timeout if lock_timeout is None else lock_timeout
    failed = failed_by_event_type(db, window=window, event_type=event_type)
    where = Where(keyed=True).event_type(event_type)
    if count_cap is None:
        dead_letters, exact = dead_letter_attempts.exact(db, where), True
    else:
        dead_letters, exact = dead_letter_attempts.capped(db, where, count_cap)
    if backlog is None:
        backlog = backlog_pass(db, lock_timeout=lock_timeout, event_type=event_type, window=window)
    backlog_figures = backlog.backlog()
    histogram = dead_letter_attempts.added(backlog_figures.pop("attempts_histogram"), dead_letters)
    figures = {
        "table": db.table_name,
        "now": db.fetch_one("db_now")["now"].isoformat(),
        "event_type": event_type or None,
        "window_seconds": window,
        "lock_timeout_seconds": lock_timeout,
        **backlog_figures,
        "latency_seconds": latency_percentiles(db, window=window, event_type=event_type),
        **throughput(
            db,
            window=window,
            event_type=event_type,
            open_created=None
            if backlog.sampled_at or backlog.window != window
            else backlog.created_open_in_window(),
        ),
        "failed_in_window": sum(failed.values()),
        "failed_by_event_type": failed,
        "attempts_histogram": {str(attempts): rows for attempts, rows in histogram.items()},
    }
    found = controls(db)
    flow = held_by(found, event_type=event_type)
    figures.update(
        rows_held=flow.rows_held,
        rows_held_by_event_type=flow.by_event_type,
        rows_throttled=flow.rows_throttled,
        rows_throttled_by_control=flow.throttled_by_control,
        breakers_open=breakers_open_among(found, event_type),
        health=health_status(db),
        workers=liveness(
            db,
            flow=held_by(found) if event_type else flow,
            backlog=every_type if event_type else backlog,
        ).as_json(),
    )
    if count_cap is None:
        # counted now: status --json is exact (SPEC §2)
        figures["retry_error_groups"] = retry_error_groups(db, event_type=event_type, max_age=0)
    else:
        figures["estimated"] = [] if exact else ["attempts_histogram"]
    return figures
