"""Vacuums running in the monitored database now (``pg_stat_progress_vacuum``): the outbox
table's with their phase and progress, and how many this role may not see."""

from dataclasses import dataclass

from outbox_monitor.store.db import Database


@dataclass(frozen=True)
class VacuumRun:
    """One vacuum in progress.

    Attributes:
        pid: its backend.
        hidden: another role's vacuum (an autovacuum worker's, to a role without
            ``pg_read_all_stats``): its table, phase and progress are unknown.
        on_outbox: it vacuums the outbox table (or one of its partitions); ``None`` when
            hidden.
        relation: the table it vacuums (``None`` when hidden).
        phase: PostgreSQL's phase name (``"scanning heap"``, ``"vacuuming indexes"``, …).
        heap_blks_total, heap_blks_scanned, heap_blks_vacuumed: 8 kB pages.
        index_vacuum_count: passes over the indexes so far (more than 1: its dead-tuple
            memory, ``maintenance_work_mem``, filled up).
        automatic: run by autovacuum (``None`` when hidden).
        running_seconds: since its transaction began (``None`` when hidden).
    """

    pid: int
    hidden: bool
    on_outbox: bool | None
    relation: str | None
    phase: str | None
    heap_blks_total: int | None
    heap_blks_scanned: int | None
    heap_blks_vacuumed: int | None
    index_vacuum_count: int | None
    automatic: bool | None
    running_seconds: float | None

    @property
    def scanned_fraction(self) -> float | None:
        """Heap pages scanned over the table's pages, 0–1; ``None`` when unknown."""
        if not self.heap_blks_total or self.heap_blks_scanned is None:
            return None
        return self.heap_blks_scanned / self.heap_blks_total


def vacuums_running(db: Database) -> list[VacuumRun]:
    """The vacuums running in this database now, the outbox table's first (named query
    ``health_vacuum_progress``).

    Raises:
        The connector's errors.
    """
    rows = db.fetch_all("health_vacuum_progress", {"table_regclass": db.table_regclass})
    return [VacuumRun(**row) for row in rows]
