"""The registry's figures of the outbox's rows, for an event-type filter: SPEC §2's, in its
order, then SPEC §5's flow control."""

from outbox_monitor.figures import metrics
from outbox_monitor.figures.figure_model import Figure, InstanceRows, Measure
from outbox_monitor.flow.held import breaker_filters, breakers_open, held
from outbox_monitor.store.db import Database

_PENDING = InstanceRows(open=("pending",))
_PROCESSING = InstanceRows(open=("processing",))
_LATENCY_HELP = "Percentile (continuous) of processed_at - created_at over rows done in the window."


def _latency(key: str) -> Measure:
    def measure(db: Database, window: float | None, event_type: str | None, _: int) -> object:
        return metrics.latency_percentiles(db, window=window, event_type=event_type)[key]

    return measure  # type: ignore[return-value]


def _throughput(key: str) -> Measure:
    def measure(db: Database, window: float | None, event_type: str | None, _: int) -> object:
        return metrics.throughput(db, window=window, event_type=event_type)[key]

    return measure  # type: ignore[return-value]


def _failed_in_window(db: Database, window: float | None, event_type: str | None, _: int) -> float:
    return sum(metrics.failed_by_event_type(db, window=window, event_type=event_type).values())


EVENT_TYPE_FIGURES: tuple[Figure, ...] = (
    Figure(
        "queue_depth",
        "rows",
        "queue_depth",
        "outbox_queue_depth",
        "Rows due now: pending, available_at <= now().",
        lambda db, window, event_type, _: metrics.queue_depth(db, event_type=event_type),
        _PENDING,
        sample_column="queue_depth",
        sample_label="Queue depth (due now)",
    ),
    Figure(
        "pending_total",
        "rows",
        "pending_total",
        "outbox_pending",
        "All pending rows, due or in backoff.",
        lambda db, window, event_type, _: metrics.pending_total(db, event_type=event_type),
        _PENDING,
        sample_column="pending_total",
        sample_label="Pending (total)",
    ),
    Figure(
        "scheduled_retries",
        "rows",
        "scheduled_retries",
        "outbox_scheduled_retries",
        "Pending rows with available_at > now().",
        lambda db, window, event_type, _: metrics.scheduled_retries(db, event_type=event_type),
        _PENDING,
        sample_column="scheduled_retries",
        sample_label="Scheduled retries",
    ),
    Figure(
        "oldest_pending_age",
        "seconds",
        "oldest_pending_age_seconds",
        "outbox_oldest_pending_age_seconds",
        "Seconds since the oldest pending row was created (absent when none is pending).",
        lambda db, window, event_type, _: metrics.oldest_pending_age(db, event_type=event_type),
        _PENDING,
        sample_column="oldest_pending_age_seconds",
        sample_label="Oldest pending age (s)",
    ),
    Figure(
        "processing",
        "rows",
        "processing",
        "outbox_processing",
        "Rows claimed by a worker (processing).",
        lambda db, window, event_type, _: metrics.processing(db, event_type=event_type),
        _PROCESSING,
        sample_column="processing",
        sample_label="Processing",
    ),
    Figure(
        "stuck_locks",
        "rows",
        "stuck_locks",
        "outbox_stuck_locks",
        "Processing rows locked longer than the lock timeout or with no lock time (reap them).",
        lambda db, window, event_type, _: metrics.stuck_locks(db, event_type=event_type),
        _PROCESSING,
        sample_column="stuck_locks",
        sample_label="Stuck locks",
    ),
    Figure(
        "latency_p50",
        "seconds",
        "latency_seconds.p50",
        "outbox_latency_seconds",
        _LATENCY_HELP,
        _latency("p50"),
        InstanceRows(closed=("done",)),
        window="optional",
        sample_column="latency_p50_seconds",
        sample_label="Latency P50 (s)",
    ),
    Figure(
        "latency_p95",
        "seconds",
        "latency_seconds.p95",
        "outbox_latency_seconds",
        _LATENCY_HELP,
        _latency("p95"),
        InstanceRows(closed=("done",)),
        window="optional",
        sample_column="latency_p95_seconds",
        sample_label="Latency P95 (s)",
    ),
    Figure(
        "latency_p99",
        "seconds",
        "latency_seconds.p99",
        "outbox_latency_seconds",
        _LATENCY_HELP,
        _latency("p99"),
        InstanceRows(closed=("done",)),
        window="optional",
    ),
    Figure(
        "processed_per_minute",
        "rows/min",
        "processed_per_minute",
        "outbox_processed_per_minute",
        "Rows done with processed_at in the window, per minute.",
        _throughput("processed_per_minute"),
        # a type with a backlog but nothing processed is exactly one to watch
        InstanceRows(open=("pending", "processing"), closed=("done",)),
        window="optional",
    ),
    Figure(
        "created_per_minute",
        "rows/min",
        "created_per_minute",
        "outbox_created_per_minute",
        "Rows with created_at in the window, per minute.",
        _throughput("created_per_minute"),
        InstanceRows(created=True),
        window="optional",
    ),
    Figure(
        "failed_in_window",
        "rows",
        "failed_in_window",
        "outbox_failed_in_window",
        "Rows dead-lettered (failed) with processed_at in the window.",
        _failed_in_window,
        InstanceRows(closed=("failed",)),
        window="required",
        sample_column="failed_in_window",
        sample_label="Dead-lettered in window",
    ),
    Figure(
        "attempts_at_least",
        "rows",
        "attempts_histogram",
        "outbox_rows_by_attempts",
        "Rows not yet done (pending, processing, failed) by attempts (retry pressure).",
        lambda db, window, event_type, attempts: metrics.attempts_at_least(
            db, attempts, event_type=event_type
        ),
        InstanceRows(open=("pending", "processing", "failed")),
        attempts=True,
    ),
    Figure(
        "retrying",
        "rows",
        "retrying",
        "outbox_retrying",
        "Pending rows with attempts > 0: waiting for or due for another try after a failure.",
        lambda db, window, event_type, _: metrics.retrying(db, event_type=event_type),
        _PENDING,
        sample_column="retrying",
        sample_label="Retrying",
    ),
    Figure(
        "rows_held",
        "rows",
        "rows_held",
        "outbox_rows_held",
        "Due rows held by a flow control that grants 0 now (pause, open breaker, spent limit).",
        lambda db, window, event_type, _: held(db, event_type=event_type).rows_held,
        _PENDING,
    ),
    Figure(
        "rows_throttled",
        "rows",
        "rows_throttled",
        "outbox_rows_throttled",
        "Due rows beyond what a limiting flow control hands out now.",
        lambda db, window, event_type, _: held(db, event_type=event_type).rows_throttled,
        _PENDING,
    ),
    Figure(
        "breaker_open",
        "breakers",
        "breakers_open",
        "outbox_breaker_open",
        "1 while the circuit breaker of an event-type filter (the event_type label) is open "
        "or half-open, else 0.",
        lambda db, window, event_type, _: breakers_open(db, event_type),
        _PENDING,
        candidates=breaker_filters,
    ),
)
"""SPEC §2's figures in its order, then SPEC §5's (``figures.registry.FLOW_FIGURES``)."""
