"""Every figure of SPEC §2, one function each; the dashboard, CLI and alerts call these.

All durations are seconds (float). "now" is the database's ``now()``. Every function takes
an optional ``event_type`` filter: a value containing ``%`` is a LIKE pattern (``_`` and
``\\`` literal), any other value an exact match. ``window`` and ``lock_timeout`` default to
the settings of ``db`` (1 h and 15 min unless configured).
"""

import logging
from typing import Any

from psycopg.errors import ReadOnlySqlTransaction

from outbox_monitor.db import Database
from outbox_monitor.errors import PermissionDenied, SchemaNotInitialised
from outbox_monitor.filters import Where

ERROR_GROUPS_BATCH = 10_000
"""Failed rows one ``error_groups_refresh`` call normalises at most (≈ 0.3 s of regexes
for stack traces of ≈ 900 characters; benchmarks/error_groups.py)."""

log = logging.getLogger(__name__)
_warned_exact_error_groups: set[str] = set()  # tables warned about, once per process


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
    db: Database, *, window: float | None = None, event_type: str | None = None
) -> dict[str, float]:
    """Rows per minute over the window (SPEC §2 throughput).

    Returns:
        ``{"processed_per_minute": done rows with processed_at in the window / minutes,
        "created_per_minute": rows with created_at in the window / minutes}``.
    """
    seconds = _window(db, window)
    minutes = seconds / 60
    processed = _count(db, "processed_in_window", event_type, window=seconds)
    created = _count(db, "created_in_window", event_type, window=seconds)
    return {"processed_per_minute": processed / minutes, "created_per_minute": created / minutes}


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


def attempts_histogram(db: Database, *, event_type: str | None = None) -> dict[int, int]:
    """Retry pressure: rows not yet done (pending, processing, failed) by ``attempts``.

    Returns:
        ``{attempts: rows}`` in ascending attempts; only values that occur.
    """
    where = Where().event_type(event_type)
    rows = db.fetch_all("attempts_histogram", where.params, and_filters=where.fragment)
    return {row["attempts"]: row["rows"] for row in rows}


def attempts_at_least(db: Database, attempts: int, *, event_type: str | None = None) -> int:
    """Rows not yet done with ``attempts >= attempts`` (SPEC §2 alerts metric)."""
    return _count(db, "attempts_at_least", event_type, attempts=attempts)


def error_groups(
    db: Database, *, event_type: str | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    """Failed rows grouped by event type and normalised ``last_error`` (SPEC §2).

    Each failed row is normalised once: ``outbox_monitor.refresh_error_groups`` (migration
    006) keeps every row's fingerprint and the groups' counts in the ``outbox_monitor``
    schema, and a refresh normalises only the dead letters that are new since the last
    one (a replay, delete or prune recounts from the cache). A login that may not execute
    that function (the grants of an older ``--print-grants``), or whose transactions are
    read-only (``default_transaction_read_only``, a standby), gets the same groups
    computed from every failed row, as before the cache, and a WARNING once per process
    and table.

    Returns:
        Rows ``{group_id (12 hex), event_type, fingerprint, failed, first_seen,
        last_seen, sample_error}`` (``sample_error``: the ``last_error`` of the group's
        largest id), biggest group first, at most ``limit``.

    Raises:
        QueryTimeout, DatabaseUnavailable: from the connector.
    """
    where = Where().event_type(event_type)
    params = {"limit": limit, "table_regclass": db.table_name, **where.params}
    try:
        refresh_error_groups(db)
    except (PermissionDenied, SchemaNotInitialised, ReadOnlySqlTransaction) as error:
        if db.table_name not in _warned_exact_error_groups:
            _warned_exact_error_groups.add(db.table_name)
            log.warning(
                "error groups of %s are computed from every failed row (slow with many dead "
                "letters): outbox_monitor.refresh_error_groups failed: %s. Give this login "
                "EXECUTE on it (run the output of `outbox-monitor init-db --print-grants` "
                "again) and a read-write connection to the primary.",
                db.table_name,
                str(error).splitlines()[0],
            )
        return db.fetch_all("error_groups_exact", params, and_filters=where.fragment)
    return db.fetch_all("error_groups", params, and_filters=where.fragment)


def refresh_error_groups(db: Database, *, batch: int = ERROR_GROUPS_BATCH) -> int:
    """Bring the cached error groups of the outbox table up to date (SPEC §2 error groups).

    Calls ``outbox_monitor.refresh_error_groups`` until it reports them current; each call
    is one statement under the statement timeout and normalises at most ``batch`` rows,
    so a first fill of many dead letters takes several calls (their progress is kept).

    Returns:
        The number of calls made (1 when at most ``batch`` rows were new).

    Raises:
        PermissionDenied: the login may not execute the function (or SELECT the table).
        SchemaNotInitialised: migration 006 is not applied (run ``init-db``).
        QueryTimeout, DatabaseUnavailable: from the connector.
    """
    calls = 1
    params = {"table_regclass": db.table_name, "batch": batch}
    while not db.fetch_one("error_groups_refresh", params)["done"]:
        calls += 1
    return calls


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
) -> dict[str, Any]:
    """Every SPEC §2 figure under its ``status --json`` key, all exact.

    Returns:
        ``{"queue_depth", "pending_total", "scheduled_retries",
        "oldest_pending_age_seconds", "processing", "stuck_locks",
        "latency_seconds": {"p50","p95","p99"}, "processed_per_minute",
        "created_per_minute", "failed_in_window", "failed_by_event_type",
        "attempts_histogram" ({"<attempts>": rows}), "window_seconds",
        "lock_timeout_seconds", "event_type", "table", "now"}``.
    """
    window = _window(db, window)
    lock_timeout = db.settings.lock_timeout if lock_timeout is None else lock_timeout
    failed = failed_by_event_type(db, window=window, event_type=event_type)
    return {
        "table": db.table_name,
        "now": db.fetch_one("db_now")["now"].isoformat(),
        "event_type": event_type or None,
        "window_seconds": window,
        "lock_timeout_seconds": lock_timeout,
        "queue_depth": queue_depth(db, event_type=event_type),
        "pending_total": pending_total(db, event_type=event_type),
        "scheduled_retries": scheduled_retries(db, event_type=event_type),
        "oldest_pending_age_seconds": oldest_pending_age(db, event_type=event_type),
        "processing": processing(db, event_type=event_type),
        "stuck_locks": stuck_locks(db, lock_timeout=lock_timeout, event_type=event_type),
        "latency_seconds": latency_percentiles(db, window=window, event_type=event_type),
        **throughput(db, window=window, event_type=event_type),
        "failed_in_window": sum(failed.values()),
        "failed_by_event_type": failed,
        "attempts_histogram": {
            str(attempts): rows
            for attempts, rows in attempts_histogram(db, event_type=event_type).items()
        },
    }
