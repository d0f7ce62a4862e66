"""The figure registry: every alertable figure once, under each of its names — SPEC §2's,
SPEC §5's flow control (``FLOW_FIGURES``), the table's health (``HEALTH_FIGURES``) and the
claim's plan (``CLAIM_FIGURES``), both issue 14, and the workers' liveness
(``WORKER_FIGURES``, issue 15).

One entry per ``alerts.yml`` metric (SPEC §2 "One name per figure"): its unit, its window
kind, the function of ``metrics`` that computes it for one event-type filter, its
``status --json`` key, its Prometheus family and help, the rows that make an event type one
of its alert instances, and the samples column that charts it over time. Alert rules
(``alerts/rules.py``, ``alerts/measure.py``), the exporter and the sampler read this table.
The entries are ``event_type_figures.py``'s (of the outbox's rows) and ``table_figures.py``'s
(of the table as a whole), each a ``figure_model.Figure``. Adding a figure means one entry
there, its query in ``sql/queries.sql``, its function in ``metrics.py`` and their tests
(``tests/integration/test_figures.py`` checks every entry against ``metrics.status``).
"""

from outbox_monitor.figures.event_type_figures import EVENT_TYPE_FIGURES
from outbox_monitor.figures.figure_model import Figure
from outbox_monitor.figures.table_figures import TABLE_FIGURES

FIGURES: dict[str, Figure] = {
    figure.metric: figure for figure in (*EVENT_TYPE_FIGURES, *TABLE_FIGURES)
}
"""Every alertable figure by its ``alerts.yml`` metric: SPEC §2's in its order, then the
flow-control figures of SPEC §5 (``FLOW_FIGURES``), then the table's health
(``HEALTH_FIGURES``), then the claim's plan (``CLAIM_FIGURES``), then the workers' liveness
(``WORKER_FIGURES``)."""

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
"""The table's health (issue 14; docs/health.md, "Table health"), which SPEC §2's name table
does not list: each describes the table or its database as a whole (``scope="table"``), and
``status --json`` holds it under ``health``."""

CLAIM_FIGURES = ("claim_plan_degraded", "claim_plan_cost")
"""The claim's plan (issue 14 item 2, ``health.claim_plan``), which SPEC §2's name table does
not list: figures of the whole table (``scope="table"``), the same whatever the event-type
filter."""

WORKER_FIGURES = ("no_claim_while_due",)
"""The workers' liveness (issue 15 item 7, ``workers.py``; docs/health.md, "Workers"), which
SPEC §2's name table does not list: a figure of the whole table (``scope="table"``) that
``status --json`` holds under ``workers``."""


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
