"""Prometheus exporter of the scheduler process: the SPEC §2 figures of ``/metrics`` (served
by ``export.server``; the process's own state comes from ``scheduler_status``). Its bounded
labels are ``export.labels``'s, its families without event types ``export.families``'.

``OutboxCollector`` computes, on a scrape, every SPEC §2 figure under its Prometheus name
(SPEC §2 "One name per figure") — through ``metrics.py``, except the seven figures of open
rows, which come per event type from ONE grouped query (``metrics.open_by_event_type``,
the same predicates as the ``metrics`` blocks) instead of seven queries:

- ``outbox_queue_depth``, ``outbox_pending``, ``outbox_scheduled_retries``,
  ``outbox_processing``, ``outbox_stuck_locks``, ``outbox_retrying`` ``{event_type}``: rows;
  ``outbox_oldest_pending_age_seconds{event_type}``: seconds (no sample when nothing of
  that type is pending);
- ``outbox_latency_seconds{quantile="0.5|0.95|0.99", window}``,
  ``outbox_processed_per_minute{window}``, ``outbox_created_per_minute{window}``,
  ``outbox_failed_in_window{event_type, window}``: ``window`` is ``duration_label`` of
  ``OUTBOX_MONITOR_WINDOW`` (``"1h"``) plus every window an alerts.yml rule uses for that
  figure (``"15m"`` of payment-failed), so Prometheus rules can match alerts.yml;
- ``outbox_rows_by_attempts{attempts}``: rows not yet done, by attempts;
- the table's health (issue 14), unlabelled: ``outbox_xmin_horizon_age_seconds``,
  ``outbox_inactive_slots_holding_horizon``, ``outbox_dead_tuples``, ``outbox_live_tuples``,
  ``outbox_dead_tuple_fraction``, ``outbox_time_since_autovacuum_seconds`` (absent when never),
  ``outbox_vacuum_overdue_seconds``, ``outbox_table_bytes``, ``outbox_indexes_bytes``; and
  ``outbox_index_bytes{index}``;
- the workers' claim planned now (issue 14 item 2, ``health.claim_plan``; EXPLAIN, never
  run), unlabelled: ``outbox_claim_plan_degraded`` (0/1) and ``outbox_claim_plan_cost``.

``event_type`` has bounded cardinality: the ``top`` (default 10) event types by value are
labelled one by one, event types matching an alerts.yml rule's ``event_type`` filter first
(so ``notification.%`` stays visible however small), and the rest are folded into
``event_type="other"`` (summed; the oldest age for ``outbox_oldest_pending_age_seconds``).
A real event type named ``other`` is folded there too. Summed over ``event_type``, a
family equals the ``metrics`` figure.

The monitor itself: ``outbox_monitor_up`` (1 when the database answered the figures
query), ``outbox_monitor_leader``, ``outbox_monitor_alert_state{rule, alert_instance,
state}`` (1 for the instance's state, 0 for the others; ``alert_instance`` because
Prometheus owns the ``instance`` label), ``outbox_monitor_evaluation_duration_seconds``
(last pass of this process), ``outbox_monitor_notifications_total{outcome}`` (the
sender's counts), ``outbox_monitor_sampler_lag_seconds`` (now − the newest sample of the
table, whoever sampled it), ``outbox_monitor_refused_actions`` (the audit log's ``refused``
rows of the table in the last hour, issue 29 item 5),
``outbox_monitor_figures_duration_seconds``, and from this
process's stall watch (``alerts.stall``, every tick): ``outbox_monitor_last_evaluation_age_seconds``
(now − the last completed evaluation of the table, by any scheduler; database clock) and
``outbox_monitor_alerting_stalled`` (1 when none completed for more than 3 intervals).
Read replicas (``store.standby``): ``outbox_monitor_replica_in_recovery`` (1 when
``OUTBOX_MONITOR_DSN`` is a hot standby) and ``outbox_monitor_replica_lag_seconds`` (its
replay lag; 0 on a primary; absent when unknown), read at each refresh by every process, and
``outbox_monitor_evaluation_skipped`` (1 while this process, the leader, evaluates no rule
because that lag is over ``OUTBOX_MONITOR_MAX_REPLICA_LAG``; ``alerts.replica_lag``). Alert
states and the sampler lag are read where the scheduler writes them (``primary``).

A scrape never hurts the database: figures are cached ``OUTBOX_MONITOR_METRICS_CACHE``
seconds (default 5) and concurrent scrapes share one refresh. A database failure answers
200 with ``outbox_monitor_up 0`` and without the database's families (the process's own
ones stay), never an HTTP 500.

Every scheduler replica exposes the same figures: aggregate with ``max by (outbox,
event_type)`` before summing across replicas, per outbox (``deploy/prometheus/rules.yml``
does; ``outbox`` is ``export.fleet``'s label, absent without a fleet file).
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from outbox_monitor.durations import duration_label
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.export.families import (
    alert_state_family,
    claim_plan_families,
    figure_family,
    health_families,
    process_families,
    receiver_families,
    replica_families,
    worker_families,
)
from outbox_monitor.export.labels import Combine, bound_event_types, figure_windows
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.figures import metrics
from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.flow.controls import controls
from outbox_monitor.flow.held import OPEN_STATES, held_by
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import like_escape
from outbox_monitor.store.standby import replica_status

# the logger keeps its name from before the move into a package (log filters use it)
log = logging.getLogger("outbox_monitor.exporter")

QUANTILES = (("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99"))


@dataclass(frozen=True)
class _OpenFamily:
    column: str
    name: str
    help: str
    combine: Combine = sum
    empty_other: float | None = 0.0


# The figures of ``metrics.open_by_event_type`` (one column each), each a family by event
# type; an age folds the rest of the event types with max and has no value when none is
# pending, a count with sum (0 when nothing is folded).
OPEN_FAMILIES = tuple(
    _OpenFamily(
        name,
        FIGURES[name].prometheus,
        FIGURES[name].help,
        *((max, None) if FIGURES[name].is_duration else ()),
    )
    for name in (
        "queue_depth",
        "pending_total",
        "scheduled_retries",
        "oldest_pending_age",
        "processing",
        "stuck_locks",
        "retrying",
    )
)


@dataclass
class _Snapshot:
    families: list[Metric] = field(default_factory=list)
    up: bool = False
    taken_at: float = 0.0
    seconds: float = 0.0


class OutboxCollector(Collector):
    """The custom collector: every SPEC §2 figure plus the monitor's own state (see module).

    Args:
        db: the connector (the scheduler's pool; a scrape takes one connection at a time).
        status: the scheduler's ``SchedulerStatus`` (leader, evaluation, notifications).
        primary: where the scheduler writes (alert states, samples): its
            ``OUTBOX_MONITOR_PRIMARY_DSN`` Database; default ``db``.
        ruleset: the loaded alerts.yml (rule windows and pinned event types), or ``None``.
        top_event_types: event types labelled one by one (default: settings, 10).
        cache_seconds: figures are reused this long (default: settings, 5 s; 0: never).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        db: Database,
        status: SchedulerStatus,
        *,
        primary: Database | None = None,
        ruleset: Any = None,
        top_event_types: int | None = None,
        cache_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        settings = db.settings
        self.db = db
        self.primary = primary or db
        self.status = status
        self.top = settings.metrics_top_event_types if top_event_types is None else top_event_types
        self.cache_seconds = settings.metrics_cache if cache_seconds is None else cache_seconds
        self.windows = figure_windows(settings.window, ruleset)
        patterns = {rule.event_type for rule in getattr(ruleset, "rules", ()) if rule.event_type}
        self.pinned_patterns = sorted(like_escape(pattern) for pattern in patterns)
        self.ruleset = ruleset
        self.clock = clock
        self._lock = threading.Lock()
        self._snapshot: _Snapshot | None = None
        self._was_up: bool | None = None

    def collect(self) -> Iterator[Metric]:
        """Yield every family for one scrape (figures from the cache when fresh)."""
        snapshot = self.snapshot()
        yield GaugeMetricFamily(
            "outbox_monitor_up",
            "1 when the database answered the figures query of this scrape, else 0.",
            value=1.0 if snapshot.up else 0.0,
        )
        yield GaugeMetricFamily(
            "outbox_monitor_figures_duration_seconds",
            "Wall time of the last figures refresh (cached between scrapes).",
            value=snapshot.seconds,
        )
        yield from snapshot.families
        yield from process_families(self.status)

    def snapshot(self) -> _Snapshot:
        """The cached figures, refreshed when older than ``cache_seconds``; never raises."""
        with self._lock:
            current = self._snapshot
            if current is not None and self.clock() - current.taken_at < self.cache_seconds:
                return current
            started = time.perf_counter()
            try:
                snapshot = _Snapshot(self.measure(), up=True)
            except Exception as error:
                snapshot = _Snapshot(up=False)
                self._log_failure(error)
            else:
                if self._was_up is False:
                    log.info("/metrics: the database answers again")
            self._was_up = snapshot.up
            snapshot.seconds = time.perf_counter() - started
            snapshot.taken_at = self.clock()
            self._snapshot = snapshot
            return snapshot

    def _log_failure(self, error: Exception) -> None:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        if not isinstance(error, OutboxMonitorError):
            log.exception("/metrics: computing the figures failed; outbox_monitor_up 0")
        elif self._was_up is not False:
            log.warning("/metrics: %s; outbox_monitor_up 0 until it answers", first)
        else:
            log.debug("/metrics: still failing: %s", first)

    def measure(self) -> list[Metric]:
        """Compute every database family now (no cache).

        Returns:
            The families in exposition order.

        Raises:
            DatabaseUnavailable, QueryTimeout and the connector's other errors.
        """
        db, settings = self.db, self.db.settings
        open_rows = metrics.open_by_event_type(db, lock_timeout=settings.lock_timeout)
        failed = {
            window: metrics.failed_by_event_type(db, window=window)
            for window in self.windows["failed"]
        }
        names = {row["event_type"] for row in open_rows}
        for by_type in failed.values():
            names.update(by_type)
        pinned = self._pinned(sorted(names))
        families: list[Metric] = []
        for spec in OPEN_FAMILIES:
            family = GaugeMetricFamily(spec.name, spec.help, labels=["event_type"])
            values = {row["event_type"]: row[spec.column] for row in open_rows}
            bounded = bound_event_types(
                values,
                top=self.top,
                pinned=pinned,
                combine=spec.combine,
                empty_other=spec.empty_other,
            )
            for event_type, value in bounded.items():
                family.add_metric([event_type], value)
            families.append(family)
        families += self._windowed(failed, pinned)
        attempts = figure_family("attempts_at_least", labels=["attempts"])
        for count, rows in metrics.attempts_histogram(db).items():
            attempts.add_metric([str(count)], rows)
        families.append(attempts)
        families += self._flow_families(pinned)
        families += health_families(self.db)
        families.append(alert_state_family(self.primary))
        families += receiver_families(self.primary, self.ruleset)
        families += replica_families(replica_status(db))
        families += claim_plan_families(db)
        families += worker_families(db)
        lag = self.primary.fetch_one("exporter_sampler_lag", {"table_name": db.table_name})[
            "lag_seconds"
        ]
        sampler = GaugeMetricFamily(
            "outbox_monitor_sampler_lag_seconds",
            "Seconds since the newest sample of this outbox table (absent before the first).",
        )
        if lag is not None:
            sampler.add_metric([], max(lag, 0.0))
        families.append(sampler)
        refused = self.primary.fetch_one("audit_refused_count", {"table_name": db.table_name})
        families.append(
            GaugeMetricFamily(
                "outbox_monitor_refused_actions",
                "Actions refused to a person's role on this outbox table in the last hour: "
                "the refused rows of the audit log (rate-limited: one per person and action "
                "a minute, 30 a minute).",
                value=refused["refused"],
            )
        )
        return families

    def _flow_families(self, pinned: set[str]) -> list[Metric]:
        """Rows held per event type and control, rows throttled per control (SPEC §5); the
        event types of one control bounded like the other families'."""
        found = controls(self.db)
        flow = held_by(found)
        rows_held = figure_family("rows_held", labels=["event_type", "control"])
        for control, by_type in flow.by_control.items():
            bounded = bound_event_types(by_type, top=self.top, pinned=pinned, empty_other=None)
            for event_type, rows in bounded.items():
                rows_held.add_metric([event_type, control], rows)
        throttled = figure_family("rows_throttled", labels=["control"])
        for control, rows in flow.throttled_by_control.items():
            throttled.add_metric([control], rows)
        breakers = figure_family("breaker_open", labels=["event_type"])
        for control in found:
            if control.settings.breaker:
                breakers.add_metric(
                    [control.event_type_filter], float(control.breaker_state in OPEN_STATES)
                )
        return [rows_held, throttled, breakers]

    def _pinned(self, names: list[str]) -> set[str]:
        if not self.pinned_patterns or not names:
            return set()
        rows = self.db.fetch_all(
            "exporter_event_types_matching", {"names": names, "patterns": self.pinned_patterns}
        )
        return {row["name"] for row in rows}

    def _windowed(
        self, failed: Mapping[float, Mapping[str, int]], pinned: set[str]
    ) -> list[Metric]:
        db = self.db
        latency = figure_family("latency_p50", labels=["quantile", "window"])
        for window in self.windows["latency"]:
            percentiles = metrics.latency_percentiles(db, window=window)
            for quantile, key in QUANTILES:
                if percentiles[key] is not None:
                    latency.add_metric([quantile, duration_label(window)], percentiles[key])
        processed = figure_family("processed_per_minute", labels=["window"])
        created = figure_family("created_per_minute", labels=["window"])
        for window in self.windows["throughput"]:
            rates = metrics.throughput(db, window=window)
            processed.add_metric([duration_label(window)], rates["processed_per_minute"])
            created.add_metric([duration_label(window)], rates["created_per_minute"])
        dead = figure_family("failed_in_window", labels=["event_type", "window"])
        for window, by_type in failed.items():
            for event_type, value in bound_event_types(
                by_type, top=self.top, pinned=pinned
            ).items():
                dead.add_metric([event_type, duration_label(window)], value)
        return [latency, processed, created, dead]
