"""The registry's figures of the outbox table as a whole (``scope="table"``): its health and
the workers' claim plan (issue 14), then the workers' liveness (issue 15 item 7)."""

from outbox_monitor.figures.figure_model import Figure, InstanceRows, Measure
from outbox_monitor.figures.workers import no_claim_while_due
from outbox_monitor.health.claim_plan import claim_health
from outbox_monitor.health.horizon import inactive_slots_holding_horizon, xmin_horizon_age
from outbox_monitor.health.table import table_health
from outbox_monitor.store.db import Database


def _table(attribute: str) -> Measure:
    """A figure of ``health.table.TableHealth`` (the event-type filter does not apply)."""

    def measure(db: Database, window: float | None, event_type: str | None, _: int) -> object:
        return getattr(table_health(db), attribute)

    return measure  # type: ignore[return-value]


_TABLE = InstanceRows()

TABLE_FIGURES: tuple[Figure, ...] = (
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
        "Estimated total cost (planner units, not time) of the costlier planned claim statement.",
        lambda db, window, event_type, _: claim_health(db).cost,
        _TABLE,
        scope="table",
    ),
    # issue 15 item 7: "no claim for N min while rows are due" (workers.no_claim_while_due)
    Figure(
        "no_claim_while_due",
        "seconds",
        "workers.no_claim_while_due_seconds",
        "outbox_no_claim_while_due_seconds",
        "While rows are due that no flow control holds, seconds since the latest of the newest "
        "claim (max locked_at of processing rows), the newest claim that failed fast into a "
        "retry (its available_at minus its longest backoff), the newest outcome (max "
        "processed_at of done and failed rows) and the instant the oldest of those rows "
        "became due; 0 when none is due. Growing: the worker fleet is down, not slow.",
        lambda db, window, event_type, _: no_claim_while_due(db),
        _TABLE,
        scope="table",
    ),
)
"""The table's health (``figures.registry.HEALTH_FIGURES``), then the claim's plan
(``figures.registry.CLAIM_FIGURES``), then the workers' liveness
(``figures.registry.WORKER_FIGURES``)."""
