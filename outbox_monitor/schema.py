"""init-db (tables, recommended indexes, migrations) and the start-up table check."""

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from outbox_monitor.db import Database
from outbox_monitor.errors import (
    ColumnsMissing,
    PartitioningUnsupported,
    SchemaNotInitialised,
    TableMissing,
)
from outbox_monitor.queries import compose, migration_files

TEXT_TYPES = ("text", "character varying")
TIMESTAMPTZ = ("timestamp with time zone",)
# SPEC §1: every column the product reads or writes, with the types it accepts.
OUTBOX_COLUMNS: dict[str, tuple[str, ...]] = {
    "id": ("bigint",),
    "event_type": TEXT_TYPES,
    "aggregate_type": TEXT_TYPES,
    "aggregate_id": TEXT_TYPES,
    "event_key": TEXT_TYPES,
    "payload": ("jsonb",),
    "status": TEXT_TYPES,
    "attempts": ("integer", "bigint", "smallint"),
    "available_at": TIMESTAMPTZ,
    "locked_at": TIMESTAMPTZ,
    "locked_by": TEXT_TYPES,
    "last_error": TEXT_TYPES,
    "created_at": TIMESTAMPTZ,
    "processed_at": TIMESTAMPTZ,
}


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
DROP_LOCK_TIMEOUT_SECONDS = 5.0
PARTITION_DDL_LOCK_TIMEOUT_SECONDS = 2.0
"""How long init-db's DDL on a partitioned outbox waits for its lock: ``CREATE INDEX … ON ONLY``
the parent (a SHARE lock, which the workers' writes queue behind while it waits) and the
``ATTACH`` of each partition's index. It then gives up, and the index is reported unfinished
(``InitReport.unfinished_indexes``): run init-db again."""
MAX_IDENTIFIER_LENGTH = 63
INDEX_LOCK_POLL_SECONDS = 0.2
PARTITION_KEY = ("created_at",)
"""The partition key the product supports: range partitions of ``created_at`` (SPEC §1)."""
STRATEGIES = {"r": "range", "l": "list", "h": "hash"}


@dataclass(frozen=True)
class TableShape:
    """How the outbox table is built (SPEC §1): ``partitioned`` (declarative partitioning),
    its ``strategy`` (``"r"`` range, ``"l"`` list, ``"h"`` hash) and ``key_columns`` (``None``
    when the key holds an expression), whether it has a default partition, and whether a valid
    unique index has exactly ``event_key`` and ``created_at`` as its key columns (the arbiter
    of publish's ``ON CONFLICT DO NOTHING`` on a partitioned table)."""

    partitioned: bool
    strategy: str | None = None
    key_columns: tuple[str, ...] | None = None
    has_default: bool = False
    event_key_unique: bool = False

    @property
    def by_created_at(self) -> bool:
        """Partitioned by range of ``created_at``: the shape the product supports."""
        return self.partitioned and self.strategy == "r" and self.key_columns == PARTITION_KEY


def table_shape(db: Database) -> TableShape | None:
    """The configured outbox table's shape, read from the catalog (one statement).

    Returns:
        A ``TableShape``, or ``None`` when the table (ordinary or partitioned) does not
        exist.

    Raises:
        The errors of ``Database.fetch_one``.
    """
    schema, table = db.settings.table_parts
    row = db.fetch_one("outbox_shape", {"schema": schema, "name": table})
    if row is None:
        return None
    keys = row["key_columns"]
    return TableShape(
        partitioned=row["partitioned"],
        strategy=row["strategy"],
        key_columns=None if keys is None else tuple(keys),
        has_default=row["has_default"],
        event_key_unique=row["event_key_unique"],
    )


@contextmanager
def lock_timeout(
    conn: psycopg.Connection, seconds: float, *, local: bool = False
) -> Iterator[None]:
    """Run the block with a ``lock_timeout`` of ``seconds``: DDL on the outbox then waits at
    most that long for its lock and fails with ``psycopg.errors.LockNotAvailable`` rather than
    queue the workers' statements behind it. For the session (none again after the block) or,
    with ``local``, for the rest of the caller's transaction."""
    milliseconds = str(max(1, round(seconds * 1000)))
    conn.execute(compose("set_lock_timeout"), {"milliseconds": milliseconds, "local": local})
    try:
        yield
    finally:
        if not local and not conn.closed:
            conn.execute(compose("set_lock_timeout"), {"milliseconds": "0", "local": False})


@dataclass
class InitReport:
    """What ``init_db`` did: names of what it created or dropped, the schema version reached,
    the retired indexes it could not drop (left in place, with the reason) and, on a
    partitioned outbox, the recommended indexes it could not finish (not valid yet, with the
    reason: run init-db again)."""

    created_tables: list[str] = field(default_factory=list)
    created_indexes: list[str] = field(default_factory=list)
    dropped_indexes: list[str] = field(default_factory=list)
    applied_migrations: list[str] = field(default_factory=list)
    schema_version: int = 0
    undropped_indexes: dict[str, str] = field(default_factory=dict)
    unfinished_indexes: dict[str, str] = field(default_factory=dict)


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


OUTBOX_KEYS = sql.SQL("PRIMARY KEY (id), UNIQUE (event_key)")
NOT_PARTITIONED = sql.SQL("")


def create_outbox_table(
    table: sql.Identifier,
    name: str,
    *,
    keys: sql.Composable,
    partitioning: sql.Composable = NOT_PARTITIONED,
) -> sql.Composed:
    """The statements creating the SPEC §1 outbox ``table`` (named ``name``) with the indexes
    users have, if absent: ``keys`` its primary and unique keys (``OUTBOX_KEYS``), and
    ``partitioning`` empty — or a ``PARTITION BY`` clause, whose keys must hold the partition
    key (``demo.partitioned``)."""
    return compose(
        "create_outbox_table",
        table=table,
        keys=keys,
        partitioning=partitioning,
        claim_index=sql.Identifier(index_name(name, "claim")),
        aggregate_index=sql.Identifier(index_name(name, "aggregate")),
    )


def _retired_index_name(table: str, purpose: str) -> str:
    """The name an earlier release gave an index: ``<table>_<purpose>_idx`` cut to 63 bytes,
    as Postgres cuts a longer one."""
    return f"{table}_{purpose}_idx".encode()[:MAX_IDENTIFIER_LENGTH].decode(errors="ignore")


def init_db(db: Database, *, create_indexes: bool = True, flow_control: bool = False) -> InitReport:
    """Create what is absent; never change a user table's columns or data (SPEC §1).

    Creates the outbox table and the idempotency ledger only if absent, applies the
    ``outbox_monitor`` schema migrations not yet applied (under an advisory lock, so two
    runs at once are safe), then creates the recommended indexes with
    ``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` outside any transaction and without the
    statement timeout — on a partitioned outbox ``CREATE INDEX … ON ONLY`` the parent, then
    ``CONCURRENTLY`` on each partition and ``ALTER INDEX … ATTACH PARTITION``, the DDL that
    blocks writes while it waits under a lock timeout of ``PARTITION_DDL_LOCK_TIMEOUT_SECONDS``
    (partitions created later get the index from the parent) — and drops the indexes an
    earlier release created that harm the users' claim (``RETIRED_INDEXES``: only by name and
    exact definition) with ``DROP INDEX CONCURRENTLY`` under a lock timeout of
    ``DROP_LOCK_TIMEOUT_SECONDS``. Running it twice is a no-op.

    Args:
        db: the connector of the target database.
        create_indexes: ``False`` for ``--no-indexes`` (creates and drops no index).
        flow_control: ``True`` for ``--flow-control``: also ``FLOW_CONTROL_INDEX``.

    Returns:
        An ``InitReport``; a retired index that could not be dropped (lock timeout) is in
        ``undropped_indexes`` with the reason, a partitioned index not finished (lock
        timeout, a partition's index left invalid) in ``unfinished_indexes``; the rest is
        done.

    Raises:
        DatabaseUnavailable, PermissionDenied: from the connector.
    """
    report = InitReport()
    schema, table = db.settings.table_parts
    ledger_schema, ledger = db.settings.ledger_parts
    with db.direct_connection(statement_timeout=None) as conn:
        with conn.transaction():
            conn.execute(compose("lock_migrations"))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            if not _exists(conn, schema, table):
                conn.execute(create_outbox_table(db.table, table, keys=OUTBOX_KEYS))
                report.created_tables.append(f"{schema}.{table}")
            if not _exists(conn, ledger_schema, ledger):
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(ledger_schema))
                )
                conn.execute(compose("create_ledger_table", ledger=db.ledger))
                report.created_tables.append(f"{ledger_schema}.{ledger}")
            conn.execute(compose("create_monitor_schema"))
            current = _schema_version(conn)
            for version, name, text in migration_files():
                if version > current:
                    conn.execute(sql.SQL(text))
                    conn.execute(compose("record_migration"), {"version": version, "name": name})
                    report.applied_migrations.append(f"{version:03d}_{name}")
                    current = version
            report.schema_version = current
        if create_indexes:
            with _index_builder_lock(conn):
                wanted = RECOMMENDED_INDEXES + ((FLOW_CONTROL_INDEX,) if flow_control else ())
                _create_indexes(db, conn, wanted, report)
                _drop_retired_indexes(db, conn, report)
    return report


@contextmanager
def _index_builder_lock(conn) -> Iterator[None]:
    """One index builder at a time. Waiting inside pg_advisory_lock would hold a snapshot
    that the other run's CREATE INDEX CONCURRENTLY waits for (a deadlock), so poll instead."""
    while not conn.execute(compose("try_lock_index_builder")).fetchone()["locked"]:
        time.sleep(INDEX_LOCK_POLL_SECONDS)
    try:
        yield
    finally:
        conn.execute(compose("unlock_index_builder"))


def _schema_version(conn) -> int:
    if not _exists(conn, "outbox_monitor", "schema_migrations"):
        return 0
    return conn.execute(compose("monitor_schema_version")).fetchone()["version"] or 0


def _exists(conn, schema: str, name: str) -> bool:
    return conn.execute(compose("table_exists"), {"schema": schema, "name": name}).fetchone()[
        "exists"
    ]


def _present_indexes(db: Database, conn) -> set[str]:
    schema, table = db.settings.table_parts
    rows = conn.execute(compose("table_indexes"), {"schema": schema, "name": table})
    return {row["index_name"] for row in rows}


def _create_indexes(
    db: Database, conn, indexes: tuple[RecommendedIndex, ...], report: InitReport
) -> None:
    schema, table = db.settings.table_parts
    present = _present_indexes(db, conn)
    partitioned = _is_partitioned(conn, schema, table)
    for index in indexes:
        name = index.name(table)
        if name in present:
            continue
        if partitioned:
            unfinished = _create_partitioned_index(db, conn, index)
            if unfinished:
                report.unfinished_indexes[name] = unfinished
                continue
        else:
            valid = conn.execute(
                compose("index_valid"), {"table_regclass": db.table_regclass, "name": name}
            ).fetchone()["valid"]
            if valid is False:  # an interrupted CONCURRENTLY build: built again
                conn.execute(compose("drop_index", index=sql.Identifier(schema, name)))
            conn.execute(_build(index, name, db.table, leaf=True))
        conn.execute(compose("comment_recommended_index", index=sql.Identifier(schema, name)))
        report.created_indexes.append(name)


def _is_partitioned(conn, schema: str, table: str) -> bool:
    row = conn.execute(compose("outbox_shape"), {"schema": schema, "name": table}).fetchone()
    return bool(row and row["partitioned"])


def _build(
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


def _create_partitioned_index(db: Database, conn, index: RecommendedIndex) -> str | None:
    """Build ``index`` on a partitioned outbox without holding up its writes: ``ON ONLY`` each
    partitioned table of the tree, ``CONCURRENTLY`` on each leaf, each partition's index
    attached to its parent's as soon as it is built (the parent's becomes valid with the
    last). What an earlier run left is reused: an index attached already, a valid index of
    the partition's name (attached now), an invalid one (dropped and built again).

    Returns:
        ``None`` when the index is valid on the outbox, else why it is not (a lock timeout,
        a partition's invalid index); a next run goes on from there.
    """
    schema, table = db.settings.table_parts
    root = index.name(table)
    index_of = {(schema, table): root}
    try:
        with lock_timeout(conn, PARTITION_DDL_LOCK_TIMEOUT_SECONDS):
            conn.execute(_build(index, root, db.table, leaf=False))
        tree = conn.execute(compose("partition_tree"), {"table_regclass": db.table_regclass})
        for part in tree.fetchall():
            here = (part["schema"], part["name"])
            parent = sql.Identifier(
                part["parent_schema"], index_of[(part["parent_schema"], part["parent_name"])]
            )
            own = index_name(part["name"], index.purpose)
            state = conn.execute(
                compose("partition_index"),
                {
                    "parent_index": parent.as_string(conn),
                    "partition": sql.Identifier(*here).as_string(conn),
                    "name": own,
                },
            ).fetchone()
            if state["attached"] is not None:
                index_of[here] = state["attached"]
                if state["attached_valid"] or not part["leaf"]:
                    continue
                return (
                    f"the index {state['attached']} of partition {'.'.join(here)} is invalid: "
                    "drop it (DROP INDEX CONCURRENTLY) and run init-db again"
                )
            index_of[here] = own
            if not part["leaf"]:
                with lock_timeout(conn, PARTITION_DDL_LOCK_TIMEOUT_SECONDS):
                    conn.execute(_build(index, own, sql.Identifier(*here), leaf=False))
            else:
                if state["named_valid"] is False:  # an interrupted CONCURRENTLY build
                    conn.execute(compose("drop_index", index=sql.Identifier(part["schema"], own)))
                conn.execute(_build(index, own, sql.Identifier(*here), leaf=True))
            with lock_timeout(conn, PARTITION_DDL_LOCK_TIMEOUT_SECONDS):
                conn.execute(
                    compose(
                        "attach_index",
                        parent_index=parent,
                        child_index=sql.Identifier(part["schema"], own),
                    )
                )
    except psycopg.errors.LockNotAvailable:
        return (
            f"lock timeout ({PARTITION_DDL_LOCK_TIMEOUT_SECONDS:g} s): a long transaction or "
            "another DDL holds the table; run init-db again to finish it"
        )
    if root not in _present_indexes(db, conn):
        return "not valid yet: a partition's index is missing; run init-db again"
    return None


def _drop_retired_indexes(db: Database, conn, report: InitReport) -> None:
    schema, table = db.settings.table_parts
    partitioned = _is_partitioned(conn, schema, table)
    with lock_timeout(conn, DROP_LOCK_TIMEOUT_SECONDS):
        for purpose, columns in RETIRED_INDEXES.items():
            name = _retired_index_name(table, purpose)
            params = {"schema": schema, "table": table, "name": name, "columns": list(columns)}
            if not conn.execute(compose("retired_index_present"), params).fetchone()["present"]:
                continue
            if partitioned:  # DROP INDEX CONCURRENTLY cannot drop a partitioned index
                report.undropped_indexes[name] = (
                    "a partitioned index, which only a DROP INDEX holding every partition "
                    "exclusively can drop: drop it yourself at a quiet moment"
                )
                continue
            try:
                conn.execute(compose("drop_index", index=sql.Identifier(schema, name)))
            except psycopg.errors.LockNotAvailable:
                report.undropped_indexes[name] = (
                    f"lock timeout ({DROP_LOCK_TIMEOUT_SECONDS:g} s): a long transaction or "
                    "another DDL holds the table"
                )
                continue
            report.dropped_indexes.append(name)


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
        name = _retired_index_name(table, purpose)
        params = {"schema": schema, "table": table, "name": name, "columns": list(columns)}
        if db.fetch_one("retired_index_present", params)["present"]:
            found.append(name)
    return found


def _one_of(types: tuple[str, ...]) -> str:
    """``integer, bigint or smallint``."""
    return " or ".join(filter(None, (", ".join(types[:-1]), types[-1])))


def check_outbox_table(db: Database) -> None:
    """Check that the configured table exists with the SPEC §1 columns and types.

    Raises:
        TableMissing: the table does not exist; the message says how to create it or
            point ``OUTBOX_MONITOR_TABLE`` elsewhere.
        ColumnsMissing: lists every missing column and every column of another type
            (its type and the types accepted); the hint has the fix of each.
        PartitioningUnsupported: a partitioned table not partitioned by range of
            ``created_at``, or without a valid unique index on ``(event_key, created_at)``
            (``check_partitioning``).
        SchemaNotInitialised: the ``outbox_monitor`` schema is absent or older than
            this version of the package.
        PermissionDenied: the table exists but the role may not read it (or its
            schema); the message names the missing grant (``db_errors.mapped_errors``).
        DatabaseUnavailable: from the connector.
    """
    schema, table = db.settings.table_parts
    columns = {
        row["column_name"]: row["data_type"]
        for row in db.fetch_all("table_columns", {"schema": schema, "name": table})
    }
    if not columns and db.fetch_one("table_exists", {"schema": schema, "name": table})["exists"]:
        # information_schema hides the columns of a table the role may not read: say which
        # grant is missing (PermissionDenied from the connector) rather than "missing".
        db.fetch_all("outbox_select_probe")
    if not columns:
        raise TableMissing(
            f"the outbox table {schema}.{table} does not exist in this database",
            hint="Create it with `outbox-monitor init-db`, or set OUTBOX_MONITOR_TABLE "
            "to your outbox table (schema.table).",
        )
    missing = [name for name in OUTBOX_COLUMNS if name not in columns]
    problems, fixes = [], []
    if missing:
        problems.append(f"missing columns: {', '.join(missing)}")
        fixes.append(f"Add the missing column{'s' * (len(missing) > 1)} ({', '.join(missing)})")
    for name, types in OUTBOX_COLUMNS.items():
        if name in columns and columns[name] not in types:
            problems.append(f"column {name} is {columns[name]}, expected {_one_of(types)}")
            fixes.append(
                f"ALTER TABLE {schema}.{table} ALTER COLUMN {name} TYPE {types[0]} "
                f"USING {name}::{types[0]} (it rewrites the table under an exclusive lock)"
            )
    if problems:
        raise ColumnsMissing(
            f"the outbox table {schema}.{table} does not match SPEC §1: " + "; ".join(problems),
            hint="; ".join(fixes) + " (see README, 'Pointing it at an existing outbox'), or set "
            "OUTBOX_MONITOR_TABLE to the right table.",
        )
    shape = table_shape(db)
    if shape is not None:
        check_partitioning(f"{schema}.{table}", shape)
    with db.connection() as conn:
        version = _schema_version(conn)
    latest = migration_files()[-1][0]
    if version < latest:
        raise SchemaNotInitialised(
            f"outbox-monitor's schema is at version {version}, this release needs {latest}",
            hint="Run `outbox-monitor init-db` (idempotent; it only adds what is missing).",
        )


def check_partitioning(table: str, shape: TableShape) -> None:
    """Check that a partitioned outbox has the shape the product works on (SPEC §1): range
    partitions of ``created_at`` and a valid unique index on ``(event_key, created_at)``;
    an ordinary table passes.

    Args:
        table: ``schema.table``, for the messages.
        shape: its ``table_shape``.

    Raises:
        PartitioningUnsupported: the message says what is wrong, the hint how to fix it.
    """
    if not shape.partitioned:
        return
    if not shape.by_created_at:
        key = "an expression" if shape.key_columns is None else ", ".join(shape.key_columns)
        strategy = STRATEGIES.get(shape.strategy or "", "?")
        raise PartitioningUnsupported(
            f"the outbox table {table} is partitioned by {strategy} of {key}; outbox-monitor "
            "works on an outbox partitioned by range of created_at",
            hint="Partition it by RANGE (created_at) (pg_partman's time-based partitioning "
            "does), or point OUTBOX_MONITOR_TABLE at an ordinary table (see README, "
            "'A partitioned outbox').",
        )
    if not shape.event_key_unique:
        raise PartitioningUnsupported(
            f"the partitioned outbox table {table} has no valid unique index on "
            "(event_key, created_at): publish's ON CONFLICT DO NOTHING would not skip a "
            "duplicate event_key",
            hint=f"Create it: CREATE UNIQUE INDEX ON {table} (event_key, created_at) "
            "(Postgres needs the partition key in every unique index of a partitioned table; "
            "on a busy table build it without blocking writes: ON ONLY the parent, "
            "CONCURRENTLY on each partition, then ALTER INDEX … ATTACH PARTITION). The "
            "trade-off (SPEC §1): one intent published twice at different instants makes "
            "two rows, so the idempotency ledger is the guard (README, 'A partitioned outbox').",
        )
