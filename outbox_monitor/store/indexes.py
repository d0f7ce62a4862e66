"""The recommended and retired indexes (SPEC §1): their names, build statement, and presence."""

import hashlib
from dataclasses import dataclass

from psycopg import sql

from outbox_monitor.store.db import Database
from outbox_monitor.store.queries import compose

MAX_IDENTIFIER_LENGTH = 63
# Why the indexes by type key on ``left(event_type, 200)`` (filters.EVENT_TYPE_KEY_CHARS,
# written so in queries.sql, migration 024 and filters.Where): a btree entry holds at most
# 2,704 bytes and the users' table takes an event type of any length, so an index on the whole
# column refused (a publish, a dead-lettering) every row whose type was longer (issue 29 item
# 1). 200 characters of at most 4 bytes each are 800 bytes, with the other key columns (16
# bytes) far under the limit. Every query reading these indexes states the prefix *and* the
# exact condition on event_type (the prefix finds the entries, the exact condition rechecks
# the row): the prefix index of MySQL's ``KEY (col(200))``, written as an expression index.


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


FAILED_BY_TYPE = RecommendedIndex(
    "failed_by_type",
    "create_index_failed_by_type",
    "(left(event_type, 200), attempts) of failed rows: retry pressure",
)
# The recommended indexes (SPEC §1, chosen by benchmarks/claim.py and figures.py). None of them
# can serve the users' claim (no created_at order, no predicate its clauses imply) and the
# claim's UPDATE to 'processing' writes an entry in none of them.
RECOMMENDED_INDEXES: tuple[RecommendedIndex, ...] = (
    RecommendedIndex(
        "done_at",
        "create_index_done_at",
        "(processed_at) INCLUDE (created_at) of done rows: latency, processed and created per "
        "minute",
    ),
    RecommendedIndex(
        "failed_at",
        "create_index_failed_at",
        "(processed_at) INCLUDE (created_at) of failed rows: failures in window, created per "
        "minute",
    ),
    FAILED_BY_TYPE,
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
    "pending_types",
    "create_index_pending_types",
    "(left(event_type, 200), available_at, created_at) of pending rows: claims skip held rows "
    "unread",
)


@dataclass(frozen=True)
class RetiredIndex:
    """An index an earlier init-db created: its key columns and, for a partial one, its
    predicate as Postgres prints it (``pg_get_expr``; either spelling of a text or a varchar
    ``status``). One without a predicate is taken for ours only where an early release ran
    init-db (``retired_index_present``): Postgres gives the users' own ``CREATE INDEX ON t
    (created_at)`` the same name. ``replaced_by``: the index init-db builds in its place
    wherever it finds it, asked or not (an install of ``--flow-control`` keeps its claim's
    skip of held rows through a plain ``init-db``). ``harm``: why it goes, as the Overview
    and init-db say it. ``included``: its ``INCLUDE`` columns, in order."""

    columns: tuple[str, ...]
    predicates: tuple[str, ...] = ()
    replaced_by: RecommendedIndex | None = None
    harm: str = "slows the workers' claim once a backlog forms"
    included: tuple[str, ...] = ()


# Indexes an earlier init-db created, by name suffix. (created_at) let the users' claim walk
# the whole history in created_at order once a backlog formed, and (status, processed_at) let
# it read every pending row in a retry storm (benchmarks/RESULTS.md). (event_type, attempts)
# and (event_type, available_at, created_at) keyed on the whole event type, so they refused
# every row whose type was longer than a btree entry holds (issue 29 item 1): replaced by
# failed_by_type and pending_types (EVENT_TYPE_KEY_CHARS). finished, (status, processed_at)
# INCLUDE (created_at) of done and failed rows, cost every ack a descent from its root (its done
# keys sit before its failed ones, never on the rightmost leaf): replaced by done_at and
# failed_at (issue 32). IF NOT EXISTS matches by name, so a changed definition needs a new
# name and the old one retired.
REFUSES_LONG_TYPES = "refuses every row whose event type is longer than an index entry holds"
RETIRED_INDEXES: dict[str, RetiredIndex] = {
    "created_at": RetiredIndex(("created_at",)),
    "status_processed_at": RetiredIndex(("status", "processed_at")),
    "dead_letters": RetiredIndex(
        ("event_type", "attempts"),
        ("(status = 'failed'::text)", "((status)::text = 'failed'::text)"),
        FAILED_BY_TYPE,
        REFUSES_LONG_TYPES,
    ),
    "finished": RetiredIndex(
        ("status", "processed_at"),
        (
            "(status = ANY (ARRAY['done'::text, 'failed'::text]))",
            "((status)::text = ANY ((ARRAY['done'::character varying, "
            "'failed'::character varying])::text[]))",
        ),
        harm="slows the workers' ack: a descent of the index per acked row",
        included=("created_at",),
    ),
    "pending_by_type": RetiredIndex(
        ("event_type", "available_at", "created_at"),
        (
            "((status = 'pending'::text) AND (event_type IS NOT NULL))",
            "(((status)::text = 'pending'::text) AND (event_type IS NOT NULL))",
        ),
        FLOW_CONTROL_INDEX,
        REFUSES_LONG_TYPES,
    ),
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


def retired_index_names(table: str, purpose: str) -> list[str]:
    """The names an earlier release gave an index: ``<table>_<purpose>_idx`` cut to 63 bytes,
    as Postgres cuts a longer one, and (a release with ``index_name``) cut with the table's
    md5; one name when the table's is short."""
    cut = f"{table}_{purpose}_idx".encode()[:MAX_IDENTIFIER_LENGTH].decode(errors="ignore")
    return list(dict.fromkeys((cut, index_name(table, purpose))))


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
        Human-readable descriptions, e.g. ``["integration_outbox_done_at_idx: (processed_at)
        INCLUDE (created_at) of done rows: ..."]``; empty when all are present.
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
    for purpose, retired in RETIRED_INDEXES.items():
        for name in retired_index_names(table, purpose):
            params = retired_params(schema, table, name, retired)
            if db.fetch_one("retired_index_present", params)["present"]:
                found.append(name)
    return found


def retired_harm(table: str, name: str) -> str:
    """Why the retired index ``name`` of ``table`` goes (``RetiredIndex.harm``)."""
    return next(
        retired.harm
        for purpose, retired in RETIRED_INDEXES.items()
        if name in retired_index_names(table, purpose)
    )


def retired_params(schema: str, table: str, name: str, retired: RetiredIndex) -> dict:
    """The parameters of ``retired_index_present`` for ``retired`` named ``name`` on
    ``schema.table``."""
    return {
        "schema": schema,
        "table": table,
        "name": name,
        "columns": list(retired.columns),
        "included": list(retired.included),
        "predicates": list(retired.predicates),
    }
