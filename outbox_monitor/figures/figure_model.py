"""What a figure of the registry (``figures.registry.FIGURES``) is: its names, unit, window kind,
how it is measured and which rows make an event type one of its alert instances."""

from collections.abc import Callable
from dataclasses import dataclass

from outbox_monitor.store.db import Database

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
