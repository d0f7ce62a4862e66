"""The recommended and retired indexes (SPEC §1): their names, build statement, and presence."""

import hashlib
from dataclasses import dataclass

from psycopg import sql

from outbox_monitor.store.db import Database
from outbox_monitor.store.queries import compose

MAX_IDENTIFIER_LENGTH = 63


@dataclass(frozen=True)
class RecommendedIndex:
    """One recommended index (SPEC §1): its name suffix, its ``queries.sql`` block, and what
    it serves (for the "missing index" warning)."""

    purpose: str
    block: str
    serves: str

    def name(self, table: str) -> str:
        """The index name on ``table``: ``<table>_<purpose>_idx`` (``index_name``)."""
        return index_name(table, self.purpose)


# The recommended indexes (SPEC §1, chosen by benchmarks/claim.py and figures.py). None of them
# can serve the users' claim (no created_at order, no predicate its clauses imply) and the
# claim's UPDATE to 'processing' writes an entry in none of them.
RECOMMENDED_INDEXES: tuple[RecommendedIndex, ...] = (
    RecommendedIndex(
        "finished",
        "create_index_finished",
        "(status, processed_at) of done/failed rows: latency, throughput, failures, prune",
    ),
    RecommendedIndex(
        "dead_letters",
        "create_index_dead_letters",
        "(event_type, attempts) of failed rows: retry pressure",
    ),
    RecommendedIndex(
        "clock_skew",
        "create_index_clock_skew",
        "(created_at) of rows processed before they were created: created per minute",
    ),
)
# The index through which a claim under flow control skips the rows a pause or an open breaker
# holds without reading them (migration 009). Only for a team using flow control (`init-db
# --flow-control`): every publish and retry writes an entry in it, +2 to +18 % per statement
# at 1 M rows (benchmarks/RESULTS.md), a cost the others need not pay. Without it a claim reads
# every held row, and the product says so wherever controls are shown.
FLOW_CONTROL_INDEX = RecommendedIndex(
    "pending_by_type",
    "create_index_pending_by_type",
    "(event_type, available_at, created_at) of pending rows: claims skip held rows unread",
)
# Indexes an earlier init-db created, by name suffix and key columns. (created_at) let the
# users' claim walk the whole history in created_at order once a backlog formed, and
# (status, processed_at) let it read every pending row in a retry storm (benchmarks/RESULTS.md).
RETIRED_INDEXES: dict[str, tuple[str, ...]] = {
    "created_at": ("created_at",),
    "status_processed_at": ("status", "processed_at"),
}


def index_name(table: str, purpose: str) -> str:
    """``<table>_<purpose>_idx``; when that is longer than Postgres' 63 bytes, the table part
    is cut and followed by 8 hex digits of its md5, so that two purposes never share a name
    (a plain cut would give one name to ``claim``, ``clock_skew`` and ``created_at`` of a
    61-character table, and init-db would take one index for another)."""
    name = f"{table}_{purpose}_idx"
    if len(name.encode()) <= MAX_IDENTIFIER_LENGTH:
        return name
    suffix = f"_{hashlib.md5(table.encode()).hexdigest()[:8]}_{purpose}_idx"
    room = MAX_IDENTIFIER_LENGTH - len(suffix.encode())
    return table.encode()[:room].decode(errors="ignore") + suffix


def retired_index_name(table: str, purpose: str) -> str:
    """The name an earlier release gave an index: ``<table>_<purpose>_idx`` cut to 63 bytes,
    as Postgres cuts a longer one."""
    return f"{table}_{purpose}_idx".encode()[:MAX_IDENTIFIER_LENGTH].decode(errors="ignore")


def present_indexes(db: Database, conn) -> set[str]:
    """The names of the outbox table's indexes, read on ``conn`` (init-db's own connection)."""
    schema, table = db.settings.table_parts
    rows = conn.execute(compose("table_indexes"), {"schema": schema, "name": table})
    return {row["index_name"] for row in rows}


def build_index(
    index: RecommendedIndex, name: str, table: sql.Identifier, *, leaf: bool
) -> sql.Composed:
    """The statement building ``index`` as ``name`` on ``table``: ``CONCURRENTLY`` on an
    ordinary table (a leaf partition too), ``ON ONLY`` a partitioned one (invalid until the
    index of each of its partitions is attached)."""
    return compose(
        index.block,
        index=sql.Identifier(name),
        table=table,
        concurrently=sql.SQL("CONCURRENTLY" if leaf else ""),
        only=sql.SQL("" if leaf else "ONLY"),
    )


def missing_recommended_indexes(db: Database) -> list[str]:
    """Recommended indexes (SPEC §1) that the outbox table lacks, looked up by the name
    ``init-db`` gives them (``<table>_<purpose>_idx``).

    Returns:
        Human-readable descriptions, e.g. ``["integration_outbox_finished_idx: (status,
        processed_at) of done/failed rows: ..."]``; empty when all are present.
    """
    schema, table = db.settings.table_parts
    present = {
        row["index_name"]
        for row in db.fetch_all("table_indexes", {"schema": schema, "name": table})
    }
    return [
        f"{index.name(table)}: {index.serves}"
        for index in RECOMMENDED_INDEXES
        if index.name(table) not in present
    ]


def retired_indexes_present(db: Database) -> list[str]:
    """Indexes an earlier ``init-db`` created that slow the users' claim (``RETIRED_INDEXES``),
    still on the outbox table: ``init-db`` drops them.

    Returns:
        Their names; empty when none is left.
    """
    schema, table = db.settings.table_parts
    found = []
    for purpose, columns in RETIRED_INDEXES.items():
        name = retired_index_name(table, purpose)
        params = {"schema": schema, "table": table, "name": name, "columns": list(columns)}
        if db.fetch_one("retired_index_present", params)["present"]:
            found.append(name)
    return found
