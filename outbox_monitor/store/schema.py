"""init-db (tables, recommended indexes, migrations) and the start-up table check."""

import difflib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from outbox_monitor.errors import ColumnsMissing, SchemaNotInitialised, TableMissing
from outbox_monitor.store.audited_writers import create_writers
from outbox_monitor.store.db import Database, lock_timeout
from outbox_monitor.store.indexes import (
    FLOW_CONTROL_INDEX,
    RECOMMENDED_INDEXES,
    RETIRED_INDEXES,
    RecommendedIndex,
    RetiredIndex,
    build_index,
    index_name,
    present_indexes,
    retired_index_names,
    retired_params,
)
from outbox_monitor.store.partitioned_indexes import create_partitioned_index
from outbox_monitor.store.partitioning import check_partitioning, table_shape
from outbox_monitor.store.queries import compose, migration_files

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
CREATE_TABLE_FLAG = "--create-table"
"""init-db's flag that lets it create a missing outbox table and ledger (issue 29 item 11)."""
LISTED_CANDIDATES = 5
"""A missing table's message lists every table with the outbox's columns up to this many;
beyond it, only the close matches of the name (``difflib``) and the count."""
NEAR_NAME_RATIO = 0.85
"""A missing table's name this similar to an outbox table's (``difflib`` ratio) is taken for
a misspelling of it: its hint never offers ``--create-table``, which warns when it creates one."""
DROP_LOCK_TIMEOUT_SECONDS = 5.0
INDEX_LOCK_POLL_SECONDS = 0.2


@dataclass
class InitReport:
    """What ``init_db`` did: names of what it created or dropped, the ledger it left absent
    (``missing_tables``: not created without ``create_table``), the schema version reached,
    the retired indexes it could not drop (left in place, with the reason), on a
    partitioned outbox the recommended indexes it could not finish (not valid yet, with the
    reason: run init-db again), and the outbox tables named close to one it created."""

    created_tables: list[str] = field(default_factory=list)
    missing_tables: list[str] = field(default_factory=list)
    created_indexes: list[str] = field(default_factory=list)
    dropped_indexes: list[str] = field(default_factory=list)
    applied_migrations: list[str] = field(default_factory=list)
    schema_version: int = 0
    undropped_indexes: dict[str, str] = field(default_factory=dict)
    unfinished_indexes: dict[str, str] = field(default_factory=dict)
    near_tables: dict[str, list[str]] = field(default_factory=dict)
    """A table ``--create-table`` created → the existing outbox tables named close to it
    (a misspelled name is created as asked, and said)."""


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


WORKER_FUNCTIONS_MIGRATION = 30
"""The migration that installs the per-table worker functions' generator (``030_static_worker_
functions.sql``): init-db prepares its table once the schema has it."""


def init_db(
    db: Database,
    *,
    create_table: bool = False,
    create_indexes: bool = True,
    flow_control: bool = False,
) -> InitReport:
    """Create what is absent; never change a user table's columns or data (SPEC §1).

    Creates the outbox table and the idempotency ledger when absent only with
    ``create_table`` (``--create-table``): a misspelled table name must not become a new,
    empty outbox that the monitor then shows as a healthy empty queue. Without it a missing
    outbox table stops init-db before it changes anything, and a missing ledger (which only
    workers guarding their effects use) is left absent and reported. Then it applies the
    ``outbox_monitor`` schema migrations not yet applied (under an advisory lock, so two
    runs at once are safe), then creates the recommended indexes with
    ``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` outside any transaction and without the
    statement timeout — on a partitioned outbox ``CREATE INDEX … ON ONLY`` the parent, then
    ``CONCURRENTLY`` on each partition and ``ALTER INDEX … ATTACH PARTITION``, the DDL that
    blocks writes while it waits under a lock timeout of ``PARTITION_DDL_LOCK_TIMEOUT_SECONDS``
    (partitions created later get the index from the parent) — and drops the indexes an
    earlier release created that harm the users' claim (``RETIRED_INDEXES``: only by name and
    exact definition) with ``DROP INDEX CONCURRENTLY`` under a lock timeout of
    ``DROP_LOCK_TIMEOUT_SECONDS``. It (re)creates the table's audited writers
    (``store.audited_writers``: the functions through which the operator login changes the
    outbox, each writing its audit row) and its worker functions (migration 030: claim,
    ack, fail and ack_many with the table in static, plan-cached statements, to which the
    shared ``outbox_monitor.claim``/``ack``/``fail``/``ack_many`` dispatch). Running it twice
    is a no-op.

    Args:
        db: the connector of the target database.
        create_table: ``True`` for ``--create-table``: create the outbox table and the
            ledger when absent; ``False``: a missing outbox table raises ``TableMissing``,
            a missing ledger is named in ``InitReport.missing_tables``.
        create_indexes: ``False`` for ``--no-indexes`` (creates and drops no index).
        flow_control: ``True`` for ``--flow-control``: also ``FLOW_CONTROL_INDEX``.

    Returns:
        An ``InitReport``; a retired index that could not be dropped (lock timeout) is in
        ``undropped_indexes`` with the reason, a partitioned index not finished (lock
        timeout, a partition's index left invalid) in ``unfinished_indexes``; the rest is
        done.

    Raises:
        TableMissing: without ``create_table``, the outbox table does not exist; the
            message names the tables of the database that have the outbox's columns
            (``missing_outbox_table``); nothing was changed.
        DatabaseUnavailable, PermissionDenied: from the connector.
    """
    report = InitReport()
    schema, table = db.settings.table_parts
    ledger_schema, ledger = db.settings.ledger_parts
    with db.direct_connection(statement_timeout=None) as conn:
        with conn.transaction():
            conn.execute(compose("lock_migrations"))
            if not create_table:
                _refuse_missing_outbox(db, conn)
            if not _exists(conn, schema, table):
                near = near_outbox_tables(f"{schema}.{table}", outbox_like_tables(conn))
                if near:  # --create-table of a name one typo from an outbox: say so
                    report.near_tables[f"{schema}.{table}"] = near
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
                )
                conn.execute(create_outbox_table(db.table, table, keys=OUTBOX_KEYS))
                report.created_tables.append(f"{schema}.{table}")
            if not _exists(conn, ledger_schema, ledger) and not create_table:
                report.missing_tables.append(f"{ledger_schema}.{ledger}")
            elif not _exists(conn, ledger_schema, ledger):
                schema_of_ledger = sql.Identifier(ledger_schema)
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema_of_ledger))
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
            create_writers(conn, db.settings)
            if current >= WORKER_FUNCTIONS_MIGRATION:
                conn.execute(
                    compose("install_worker_functions"), {"table_regclass": db.table_regclass}
                )
        if create_indexes:
            with _index_builder_lock(conn):
                wanted = RECOMMENDED_INDEXES + ((FLOW_CONTROL_INDEX,) if flow_control else ())
                wanted += tuple(index for index in _replacements(db, conn) if index not in wanted)
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


def _create_indexes(
    db: Database, conn, indexes: tuple[RecommendedIndex, ...], report: InitReport
) -> None:
    schema, table = db.settings.table_parts
    present = present_indexes(db, conn)
    partitioned = _is_partitioned(conn, schema, table)
    for index in indexes:
        name = index.name(table)
        if name in present:
            continue
        if partitioned:
            unfinished = create_partitioned_index(db, conn, index)
            if unfinished:
                report.unfinished_indexes[name] = unfinished
                continue
        else:
            valid = conn.execute(
                compose("index_valid"), {"table_regclass": db.table_regclass, "name": name}
            ).fetchone()["valid"]
            if valid is False:  # an interrupted CONCURRENTLY build: built again
                conn.execute(compose("drop_index", index=sql.Identifier(schema, name)))
            conn.execute(build_index(index, name, db.table, leaf=True))
        conn.execute(compose("comment_recommended_index", index=sql.Identifier(schema, name)))
        report.created_indexes.append(name)


def _is_partitioned(conn, schema: str, table: str) -> bool:
    row = conn.execute(compose("outbox_shape"), {"schema": schema, "name": table}).fetchone()
    return bool(row and row["partitioned"])


def _replacements(db: Database, conn) -> list[RecommendedIndex]:
    """The indexes replacing the retired ones the table still has (``RetiredIndex.replaced_by``)."""
    schema, table = db.settings.table_parts
    return [
        retired.replaced_by
        for purpose, retired in RETIRED_INDEXES.items()
        if retired.replaced_by
        for name in retired_index_names(table, purpose)
        if conn.execute(
            compose("retired_index_present"), retired_params(schema, table, name, retired)
        ).fetchone()["present"]
    ]


def _drop_retired_indexes(db: Database, conn, report: InitReport) -> None:
    schema, table = db.settings.table_parts
    partitioned = _is_partitioned(conn, schema, table)
    with lock_timeout(conn, DROP_LOCK_TIMEOUT_SECONDS):
        for purpose, retired in RETIRED_INDEXES.items():
            for name in retired_index_names(table, purpose):
                _drop_retired_index(conn, schema, table, name, retired, partitioned, report)


def _drop_retired_index(
    conn,
    schema: str,
    table: str,
    name: str,
    retired: RetiredIndex,
    partitioned: bool,
    report: InitReport,
) -> None:
    params = retired_params(schema, table, name, retired)
    if not conn.execute(compose("retired_index_present"), params).fetchone()["present"]:
        return
    if partitioned:  # DROP INDEX CONCURRENTLY cannot drop a partitioned index
        report.undropped_indexes[name] = (
            "a partitioned index, which only a DROP INDEX holding every partition "
            "exclusively can drop: drop it yourself at a quiet moment"
        )
        return
    try:
        conn.execute(compose("drop_index", index=sql.Identifier(schema, name)))
    except psycopg.errors.LockNotAvailable:
        report.undropped_indexes[name] = (
            f"lock timeout ({DROP_LOCK_TIMEOUT_SECONDS:g} s): a long transaction or "
            "another DDL holds the table"
        )
        return
    report.dropped_indexes.append(name)


def _one_of(types: tuple[str, ...]) -> str:
    """``integer, bigint or smallint``."""
    return " or ".join(filter(None, (", ".join(types[:-1]), types[-1])))


def _fixes(outbox: str) -> tuple[str, str]:
    """The init-db command and the setting of the table that a table check's hint names:
    ``OUTBOX_MONITOR_TABLE``, or for the fleet file's ``outbox`` its own ``--outbox`` and
    ``table:``."""
    if not outbox:
        return "`outbox-monitor init-db`", "OUTBOX_MONITOR_TABLE"
    return (
        f"`outbox-monitor init-db --outbox {outbox}`",
        f'the `table:` of outbox "{outbox}" in the fleet file',
    )


def outbox_like_tables(conn) -> list[str]:
    """The tables of ``conn``'s database (never a partition, never ``outbox_monitor``'s)
    that have every SPEC §1 column of the outbox (``OUTBOX_COLUMNS``, by name), as
    ``schema.table``, sorted. Reads the catalog only."""
    rows = conn.execute(compose("outbox_like_tables"), {"columns": list(OUTBOX_COLUMNS)})
    return [f"{row['schema']}.{row['name']}" for row in rows.fetchall()]


def missing_outbox_table(wanted: str, candidates: list[str], outbox: str = "") -> TableMissing:
    """The error of an outbox table ``wanted`` (``schema.table``) that does not exist.

    The message names what the database has instead: the close matches of ``wanted`` among
    ``candidates`` (``outbox_like_tables``) as "did you mean …?" (``difflib``), else every
    candidate when there are at most ``LISTED_CANDIDATES``, else their count; the hint says
    to point the table's setting (``OUTBOX_MONITOR_TABLE``, ``--table``, or the fleet
    file's ``table:`` of ``outbox``) at the table meant when one is a typo away
    (``near_outbox_tables``), else at the real table or to create a new empty outbox with
    ``init-db --create-table``.
    """
    init_db_command, table_setting = _fixes(outbox)
    close = difflib.get_close_matches(wanted, candidates, n=3, cutoff=0.6)
    if close:
        found = f"did you mean {' or '.join(close)}?"
    elif not candidates:
        found = "no table of this database has the outbox's columns (SPEC §1)"
    elif len(candidates) <= LISTED_CANDIDATES:
        found = f"tables with the outbox's columns: {', '.join(candidates)}"
    else:
        found = f"{len(candidates)} tables have the outbox's columns, none named like it"
    create = init_db_command.replace("init-db", f"init-db {CREATE_TABLE_FLAG}")
    setting = f"{table_setting}{'' if outbox else ' (or --table)'}"
    near = near_outbox_tables(wanted, candidates)
    if near:  # a misspelling: never hint at creating it
        hint = f"Set {setting} to the table you meant ({near[0]})."
    else:
        hint = (
            f"Set {setting} to your outbox table (schema.table). "
            f"To create a new, empty outbox named {wanted}, run {create}."
        )
    return TableMissing(
        f"the outbox table {wanted} does not exist in this database; {found}", hint=hint
    )


def near_outbox_tables(wanted: str, candidates: list[str]) -> list[str]:
    """The tables of ``candidates`` (``outbox_like_tables``) whose names are a typo away
    from ``wanted``: ``difflib`` ratio at least ``NEAR_NAME_RATIO`` (``integration_outbx``
    0.98; ``no_such_outbox`` against ``integration_outbox`` 0.70 is not)."""
    return difflib.get_close_matches(wanted, candidates, n=3, cutoff=NEAR_NAME_RATIO)


def _refuse_missing_outbox(db: Database, conn) -> None:
    """init-db without ``--create-table``: raise ``missing_outbox_table`` when the outbox
    table is absent."""
    schema, table = db.settings.table_parts
    if not _exists(conn, schema, table):
        raise missing_outbox_table(
            f"{schema}.{table}", outbox_like_tables(conn), db.settings.fleet_outbox
        )


def check_outbox_table(db: Database) -> None:
    """Check that the configured table exists with the SPEC §1 columns and types; each
    hint names the fix (``init-db``, the table's setting: ``_fixes``).

    Raises:
        TableMissing: the table does not exist; the message names the tables that have
            the outbox's columns ("did you mean …?", ``missing_outbox_table``), the hint
            says to point ``OUTBOX_MONITOR_TABLE`` there or create a new one with
            ``init-db --create-table``.
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
    init_db_command, table_setting = _fixes(db.settings.fleet_outbox)
    columns = {
        row["column_name"]: row["data_type"]
        for row in db.fetch_all("table_columns", {"schema": schema, "name": table})
    }
    if not columns and db.fetch_one("table_exists", {"schema": schema, "name": table})["exists"]:
        # information_schema hides the columns of a table the role may not read: say which
        # grant is missing (PermissionDenied from the connector) rather than "missing".
        db.fetch_all("outbox_select_probe")
    if not columns:
        with db.connection() as conn:
            candidates = outbox_like_tables(conn)
        raise missing_outbox_table(f"{schema}.{table}", candidates, db.settings.fleet_outbox)
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
            hint="; ".join(fixes)
            + " (see docs/index.md, 'Pointing it at an existing outbox'), or set "
            f"{table_setting} to the right table.",
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
            hint=f"Run {init_db_command} (idempotent; it only adds what is missing).",
        )
