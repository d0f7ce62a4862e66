"""The figure registry: every alertable figure once, under each of its names — SPEC §2's,
SPEC §5's flow control (``FLOW_FIGURES``), the table's health (``HEALTH_FIGURES``) and the
claim's plan (``CLAIM_FIGURES``), both issue 14.

One entry per ``alerts.yml`` metric (SPEC §2 "One name per figure"): its unit, its window
kind, the function of ``metrics`` that computes it for one event-type filter, its
``status --json`` key, its Prometheus family and help, the rows that make an event type one
of its alert instances, and the samples column that charts it over time. Alert rules
(``alerts/rules.py``, ``alerts/measure.py``), the exporter and the sampler read this table.
Adding a figure means one entry here, its query in ``sql/queries.sql``, its function in
``metrics.py`` and their tests (``tests/integration/test_figures.py`` checks every entry
against ``metrics.status``).
"""

from collections.abc import Callable
from dataclasses import dataclass

from outbox_monitor import metrics
from outbox_monitor.db import Database
from outbox_monitor.flow.held import breaker_filters, breakers_open, held
from outbox_monitor.health.claim_plan import claim_health
from outbox_monitor.health.horizon import inactive_slots_holding_horizon, xmin_horizon_age
from outbox_monitor.health.table import table_health

Measure = Callable[[Database, float | None, str | None, int], float | None]
"""``(db, window seconds or None for the settings' window, event-type filter, attempts)`` →
the figure's value in its unit, or ``None`` when it has none."""


@dataclass(frozen=True)
class InstanceRows:
    """Which rows make an event type an alert instance of a figure: rows in ``open``
    statuses, rows in ``closed`` statuses processed in the window, rows created in the
    window (``created``)."""

    open: tuple[str, ...] = ()
    closed: tuple[str, ...] = ()
    created: bool = False


@dataclass(frozen=True)
class Figure:
    """One alertable figure of SPEC §2 under all its names.

    Attributes:
        metric: its ``alerts.yml`` metric (the registry's key).
        unit: ``"rows"``, ``"seconds"``, ``"rows/min"``, ``"breakers"``, ``"slots"``,
            ``"bytes"``, ``"fraction"`` (0–1), ``"flag"`` (0 or 1) or ``"cost"`` (the
            planner's units) (values and thresholds; ``units.format_value``).
        status_key: where ``status --json`` holds it (``"latency_seconds.p95"``: a key of
            a nested object).
        prometheus: its ``/metrics`` family (``outbox_latency_seconds`` for the three
            quantiles, told apart by their ``quantile`` label).
        help: the family's help text.
        measure: computes it (``Measure``), through ``metrics``.
        instances: the rows that make an event type an instance (``by: [event_type]``).
        window: ``"none"`` (no window), ``"optional"`` (the settings' window by default) or
            ``"required"``.
        attempts: the metric takes ``attempts: n``.
        sample_column: the ``outbox_monitor.samples`` column that records it (``None``:
            not sampled), with its chart label ``sample_label``.
        candidates: ``(db, filter) → instance values`` when a ``by: [event_type]`` rule's
            instances are not event types with relevant rows (``instances``) but, as for
            ``breaker_open``, the filters of the controls it watches.
        scope: ``"event_type"`` (rows of the outbox, filtered by event type) or ``"table"``
            (the table or its database as a whole: a rule takes no ``event_type`` and no
            ``by``, and its alert links to the Health page).
    """

    metric: str
    unit: str
    status_key: str
    prometheus: str
    help: str
    measure: Measure
    instances: InstanceRows
    window: str = "none"
    attempts: bool = False
    sample_column: str | None = None
    sample_label: str | None = None
    candidates: Callable[[Database, str | None], list[str]] | None = None
    scope: str = "event_type"

    @property
    def is_duration(self) -> bool:
        """Whether values (and so thresholds) are durations in seconds."""
        return self.unit == "seconds"


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


def _table(attribute: str) -> Measure:
    """A figure of ``health.table.TableHealth`` (the event-type filter does not apply)."""

    def measure(db: Database, window: float | None, event_type: str | None, _: int) -> object:
        return getattr(table_health(db), attribute)

    return measure  # type: ignore[return-value]


_TABLE = InstanceRows()


FIGURES: dict[str, Figure] = {
    figure.metric: figure
    for figure in (
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
        Figure(
            "xmin_horizon_age",
            "seconds",
            "health.xmin_horizon_age_seconds",
            "outbox_xmin_horizon_age_seconds",
            "Seconds the xmin horizon of the outbox's database has been held by its oldest "
            "holder of known age (a session's transaction, a prepared transaction); 0 when none.",
            lambda db, window, event_type, _: xmin_horizon_age(db),
            _TABLE,
            sample_column="xmin_horizon_age_seconds",
            sample_label="xmin horizon held (s)",
            scope="table",
        ),
        Figure(
            "inactive_slots_holding_horizon",
            "slots",
            "health.inactive_slots_holding_horizon",
            "outbox_inactive_slots_holding_horizon",
            "Replication slots holding the xmin horizon with no consumer connected (a standby "
            "gone): PostgreSQL keeps no time for them, so alert on how long this stays above 0.",
            lambda db, window, event_type, _: inactive_slots_holding_horizon(db),
            _TABLE,
            scope="table",
        ),
        Figure(
            "dead_tuples",
            "rows",
            "health.dead_tuples",
            "outbox_dead_tuples",
            "Dead tuples of the outbox table (n_dead_tup; summed over partitions): row versions "
            "vacuum has not removed.",
            _table("dead_tuples"),
            _TABLE,
            sample_column="dead_tuples",
            sample_label="Dead tuples",
            scope="table",
        ),
        Figure(
            "live_tuples",
            "rows",
            "health.live_tuples",
            "outbox_live_tuples",
            "Live tuples of the outbox table (n_live_tup; summed over partitions).",
            _table("live_tuples"),
            _TABLE,
            sample_column="live_tuples",
            sample_label="Live tuples",
            scope="table",
        ),
        Figure(
            "dead_tuple_fraction",
            "fraction",
            "health.dead_tuple_fraction",
            "outbox_dead_tuple_fraction",
            "Dead over all tuples of the outbox table, 0-1 (above 0.5 dead ones outnumber live).",
            _table("dead_tuple_fraction"),
            _TABLE,
            scope="table",
        ),
        Figure(
            "time_since_autovacuum",
            "seconds",
            "health.time_since_autovacuum_seconds",
            "outbox_time_since_autovacuum_seconds",
            "Seconds since autovacuum last vacuumed the outbox table (absent when it never did "
            "since statistics began).",
            _table("time_since_autovacuum"),
            _TABLE,
            scope="table",
        ),
        Figure(
            "vacuum_overdue",
            "seconds",
            "health.vacuum_overdue_seconds",
            "outbox_vacuum_overdue_seconds",
            "While dead tuples of the outbox table outnumber live ones, seconds since it was "
            "last vacuumed (by autovacuum or by hand); 0 otherwise.",
            _table("vacuum_overdue"),
            _TABLE,
            scope="table",
        ),
        Figure(
            "table_bytes",
            "bytes",
            "health.table_bytes",
            "outbox_table_bytes",
            "Size of the outbox table in bytes (heap, TOAST, free space and visibility maps).",
            _table("table_bytes"),
            _TABLE,
            sample_column="table_bytes",
            sample_label="Table size (bytes)",
            scope="table",
        ),
        Figure(
            "indexes_bytes",
            "bytes",
            "health.indexes_bytes",
            "outbox_indexes_bytes",
            "Size of every index of the outbox table together, in bytes.",
            _table("indexes_bytes"),
            _TABLE,
            sample_column="indexes_bytes",
            sample_label="Indexes size (bytes)",
            scope="table",
        ),
        # issue 14 item 2: the workers' claim plan (health.claim_plan), not SPEC §2's
        Figure(
            "claim_plan_degraded",
            "flag",
            "health.claim_plan.degraded",
            "outbox_claim_plan_degraded",
            "1 when the planned claim (users' SPEC section 1 SQL or outbox_monitor.claim) walks "
            "rows that are not pending (an index not led by status, a status filter, a "
            "sequential scan) or its estimated cost jumped 10x over its recent median, else 0.",
            lambda db, window, event_type, _: claim_health(db).degraded,
            _TABLE,
            scope="table",
        ),
        Figure(
            "claim_plan_cost",
            "cost",
            "health.claim_plan.cost",
            "outbox_claim_plan_cost",
            "Estimated total cost (planner units, not time) of the costlier planned claim "
            "statement.",
            lambda db, window, event_type, _: claim_health(db).cost,
            _TABLE,
            scope="table",
        ),
    )
}
"""Every alertable figure by its ``alerts.yml`` metric: SPEC §2's in its order, then the
flow-control figures of SPEC §5 (``FLOW_FIGURES``), then the table's health
(``HEALTH_FIGURES``), then the claim's plan (``CLAIM_FIGURES``)."""

FLOW_FIGURES = ("rows_held", "rows_throttled", "breaker_open")
"""The figures of SPEC §5 (flow control), which SPEC §2's name table does not list."""

HEALTH_FIGURES = (
    "xmin_horizon_age",
    "inactive_slots_holding_horizon",
    "dead_tuples",
    "live_tuples",
    "dead_tuple_fraction",
    "time_since_autovacuum",
    "vacuum_overdue",
    "table_bytes",
    "indexes_bytes",
)
"""The table's health (issue 14; README, "Table health"), which SPEC §2's name table does not
list: each describes the table or its database as a whole (``scope="table"``), and
``status --json`` holds it under ``health``."""

CLAIM_FIGURES = ("claim_plan_degraded", "claim_plan_cost")
"""The claim's plan (issue 14 item 2, ``health.claim_plan``), which SPEC §2's name table does
not list: figures of the whole table (``scope="table"``), the same whatever the event-type
filter."""


def by_family(prometheus: str) -> tuple[str, ...]:
    """The metrics whose values a Prometheus family holds (``outbox_latency_seconds`` →
    the three latency quantiles)."""
    return tuple(name for name, figure in FIGURES.items() if figure.prometheus == prometheus)


SAMPLED: dict[str, str] = {
    figure.sample_column: figure.sample_label or figure.sample_column
    for figure in FIGURES.values()
    if figure.sample_column
}
"""The ``outbox_monitor.samples`` columns (besides ``table_name`` and ``sampled_at``) with
the label a chart shows for each. Durations are seconds; counts are rows."""
