"""The outbox table's tuples, vacuum and analyze times, autovacuum setting and sizes, from
``pg_stat_user_tables`` and the catalog (summed over the partitions of a partitioned table).

PostgreSQL counts dead tuples per table only: an index's dead entries are not counted
anywhere cheap (``pgstattuple`` reads the whole index), so indexes have their sizes
(``index_sizes``). Statistics are flushed lazily (PostgreSQL 15: by each backend at most once
a second, at the end of a transaction), so a figure may trail a change by a second or so.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.store.db import Database


@dataclass(frozen=True)
class TableHealth:
    """One reading of ``health_table``; counts in tuples, sizes in bytes, instants aware.

    Attributes:
        now: the database clock of the reading.
        partitions: leaf tables read (1 for a plain table).
        with_statistics: of them, those that have a ``pg_stat_user_tables`` row.
        live_tuples, dead_tuples: ``n_live_tup``, ``n_dead_tup`` (estimates kept by
            PostgreSQL; exact after the changes that made them, until a vacuum or analyze
            re-estimates them).
        modified_since_analyze: ``n_mod_since_analyze``.
        last_vacuum, last_autovacuum, last_analyze, last_autoanalyze: ``None`` for never
            (since statistics began).
        vacuum_count, autovacuum_count: vacuums since statistics began.
        autovacuum_enabled: the server's ``autovacuum`` and the table's
            ``autovacuum_enabled`` storage parameter (every partition's) are both on.
        autovacuum_threshold: dead tuples past which autovacuum vacuums the table
            (``autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor * reltuples``,
            the table's own settings first). A table (a partition) never vacuumed nor
            analyzed has ``reltuples`` -1 (PostgreSQL 14+): it counts 0 tuples here, as
            autovacuum itself counts it, so the threshold is ``autovacuum_vacuum_threshold``
            alone (50 by default) until the first vacuum or analyze sets ``reltuples``.
        tuples_counted: every leaf has been vacuumed or analyzed (``reltuples`` ≥ 0):
            ``False`` while the threshold counts a table's tuples as 0.
        table_bytes: heap, TOAST, free space and visibility maps (``pg_table_size``).
        indexes_bytes: every index of it (``pg_indexes_size``).
        statistics_since: the later of the database's statistics reset and the server's
            start: "never vacuumed" means "not since then".
    """

    now: datetime
    partitions: int
    with_statistics: int
    live_tuples: int
    dead_tuples: int
    modified_since_analyze: int
    last_vacuum: datetime | None
    last_autovacuum: datetime | None
    last_analyze: datetime | None
    last_autoanalyze: datetime | None
    vacuum_count: int
    autovacuum_count: int
    autovacuum_enabled: bool
    autovacuum_threshold: int
    tuples_counted: bool
    table_bytes: int
    indexes_bytes: int
    statistics_since: datetime | None

    @property
    def dead_tuple_fraction(self) -> float:
        """Dead tuples over all tuples, 0–1 (0 for an empty table): above 0.5 dead tuples
        outnumber live ones."""
        total = self.live_tuples + self.dead_tuples
        return self.dead_tuples / total if total else 0.0

    @property
    def last_vacuumed(self) -> datetime | None:
        """The later of the last vacuum by hand and by autovacuum; ``None`` for never."""
        times = [t for t in (self.last_vacuum, self.last_autovacuum) if t is not None]
        return max(times, default=None)

    @property
    def time_since_autovacuum(self) -> float | None:
        """Seconds since autovacuum last vacuumed the table; ``None`` when it never did
        (since ``statistics_since``)."""
        return _seconds_between(self.last_autovacuum, self.now)

    @property
    def vacuum_overdue(self) -> float:
        """While dead tuples outnumber live ones, seconds since the table was last vacuumed
        (by autovacuum or by hand; since ``statistics_since`` when it never was: at least
        that long); 0 otherwise."""
        if self.dead_tuples <= self.live_tuples:
            return 0.0
        return _seconds_between(self.last_vacuumed or self.statistics_since, self.now) or 0.0


def _seconds_between(start: datetime | None, end: datetime) -> float | None:
    return None if start is None else max((end - start).total_seconds(), 0.0)


def table_health(db: Database) -> TableHealth:
    """The outbox table's health now (named query ``health_table``; statistics views and the
    catalog only, no row of the table is read).

    Returns:
        A ``TableHealth``; on a partitioned table the sums over its partitions and the
        latest vacuum and analyze of any of them.

    Raises:
        The connector's errors (``QueryTimeout``, ``DatabaseUnavailable``, …).
    """
    row = db.fetch_one("health_table", {"table_regclass": db.table_regclass})
    return TableHealth(**row)


def index_sizes(db: Database) -> list[dict[str, Any]]:
    """The outbox table's indexes, largest first (named query ``health_indexes``).

    Returns:
        ``[{"index": name, "bytes": size, "scans": index scans since statistics began (None
        for a partitioned index), "is_unique", "is_valid"}]``.

    Raises:
        The connector's errors.
    """
    return db.fetch_all("health_indexes", {"table_regclass": db.table_regclass})
