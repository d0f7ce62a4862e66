"""Table health as one JSON object: ``status --json``'s ``health`` key, the Overview's and
the Health page's figures, read together."""

from dataclasses import asdict
from typing import Any

from outbox_monitor.health.horizon import GRANT_HINT, Horizon, horizon
from outbox_monitor.health.table import TableHealth, index_sizes, table_health
from outbox_monitor.health.vacuum import VacuumRun, vacuums_running
from outbox_monitor.store.db import Database


def health_status(db: Database) -> dict[str, Any]:
    """The outbox table's health now, every value JSON-ready (instants as ISO-8601 text,
    durations in seconds, sizes in bytes).

    Returns:
        ``{"live_tuples", "dead_tuples", "dead_tuple_fraction" (0–1),
        "modified_since_analyze", "last_vacuum", "last_autovacuum", "last_analyze",
        "last_autoanalyze" (ISO text or null: never since "statistics_since"),
        "time_since_autovacuum_seconds" (null: never), "vacuum_overdue_seconds",
        "autovacuum_enabled", "autovacuum_threshold" (dead tuples that trigger it),
        "autovacuum_threshold_counts_tuples" (false before the table's first vacuum or
        analyze: autovacuum, and the threshold, count its tuples as 0 until then),
        "table_bytes", "indexes_bytes", "indexes" ([{"index", "bytes", "scans", …}]),
        "partitions", "vacuums" ([running vacuums of the outbox: pid, phase, progress,
        "scanned_fraction"]),
        "hidden_vacuums" (vacuums of this database whose table this role cannot see),
        "xmin_horizon_age_seconds" (0 when nothing holds it),
        "inactive_slots_holding_horizon" (replication slots of a consumer gone holding it),
        "xmin_horizon_holders"
        ([``Holder.as_json``], longest held first), "hidden" ([what this role cannot see,
        with how to see it]), "statistics_since"}``.

    Raises:
        The connector's errors.
    """
    with db.session():
        table = table_health(db)
        indexes = index_sizes(db)
        vacuums = vacuums_running(db)
        holders = horizon(db)
    return {
        **table_figures(table),
        "indexes": indexes,
        "vacuums": [
            {**asdict(v), "scanned_fraction": v.scanned_fraction} for v in vacuums if v.on_outbox
        ],
        "hidden_vacuums": sum(1 for v in vacuums if v.hidden),
        "xmin_horizon_age_seconds": holders.age_seconds,
        "inactive_slots_holding_horizon": holders.inactive_slots_holding,
        "xmin_horizon_holders": [h.as_json() for h in holders.holders],
        "hidden": hidden(holders, vacuums),
    }


def table_figures(table: TableHealth) -> dict[str, Any]:
    """A ``TableHealth`` as the JSON values of ``health_status``."""
    return {
        "live_tuples": table.live_tuples,
        "dead_tuples": table.dead_tuples,
        "dead_tuple_fraction": table.dead_tuple_fraction,
        "modified_since_analyze": table.modified_since_analyze,
        "last_vacuum": _iso(table.last_vacuum),
        "last_autovacuum": _iso(table.last_autovacuum),
        "last_analyze": _iso(table.last_analyze),
        "last_autoanalyze": _iso(table.last_autoanalyze),
        "time_since_autovacuum_seconds": table.time_since_autovacuum,
        "vacuum_overdue_seconds": table.vacuum_overdue,
        "autovacuum_enabled": table.autovacuum_enabled,
        "autovacuum_threshold": table.autovacuum_threshold,
        "autovacuum_threshold_counts_tuples": table.tuples_counted,
        "table_bytes": table.table_bytes,
        "indexes_bytes": table.indexes_bytes,
        "partitions": table.partitions,
        "statistics_since": _iso(table.statistics_since),
    }


def hidden(holders: Horizon, vacuums: list[VacuumRun]) -> list[str]:
    """What this role cannot see, each with how to see it (empty when it sees everything)."""
    notes = [holders.hidden_note] if holders.hidden_note else []
    unseen = sum(1 for v in vacuums if v.hidden)
    if unseen:
        notes.append(
            f"{unseen} vacuum(s) run in this database on a table this role cannot see (it may "
            f"be the outbox): to see them, " + GRANT_HINT.format(role=holders.role)
        )
    return notes


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None
