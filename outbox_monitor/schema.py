"""init-db (tables, recommended indexes, migrations) and the start-up table check."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from psycopg import sql

from outbox_monitor.db import Database
from outbox_monitor.errors import ColumnsMissing, SchemaNotInitialised, TableMissing
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

# The recommended indexes (SPEC §1), by purpose and key columns. (status, processed_at)
# serves every windowed figure over done/failed rows (latency, processed per minute,
# failures in window) and prune; (created_at) serves created per minute and its series.
RECOMMENDED_INDEXES: dict[str, tuple[str, ...]] = {
    "status_processed_at": ("status", "processed_at"),
    "created_at": ("created_at",),
}
MAX_IDENTIFIER_LENGTH = 63
INDEX_LOCK_POLL_SECONDS = 0.2


@dataclass
class InitReport:
    """What ``init_db`` did: names of what it created, and the schema version reached."""

    created_tables: list[str] = field(default_factory=list)
    created_indexes: list[str] = field(default_factory=list)
    applied_migrations: list[str] = field(default_factory=list)
    schema_version: int = 0


def _index_name(table: str, purpose: str) -> str:
    return f"{table}_{purpose}_idx"[:MAX_IDENTIFIER_LENGTH]


def init_db(db: Database, *, create_indexes: bool = True) -> InitReport:
    """Create what is absent; never change a user table's columns or data (SPEC §1).

    Creates the outbox table and the idempotency ledger only if absent, applies the
    ``outbox_monitor`` schema migrations not yet applied (under an advisory lock, so two
    runs at once are safe), then creates the recommended indexes with
    ``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` outside any transaction and without the
    statement timeout. Running it twice is a no-op.

    Args:
        db: the connector of the target database.
        create_indexes: ``False`` for ``--no-indexes``.

    Returns:
        An ``InitReport``.

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
                conn.execute(
                    compose(
                        "create_outbox_table",
                        table=db.table,
                        claim_index=sql.Identifier(_index_name(table, "claim")),
                        aggregate_index=sql.Identifier(_index_name(table, "aggregate")),
                    )
                )
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
                report.created_indexes = _create_recommended_indexes(db, conn)
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


def _create_recommended_indexes(db: Database, conn) -> list[str]:
    schema, table = db.settings.table_parts
    existing = {
        tuple(row["columns"])
        for row in conn.execute(compose("table_indexes"), {"schema": schema, "name": table})
    }
    created = []
    for purpose, columns in RECOMMENDED_INDEXES.items():
        if any(found[: len(columns)] == columns for found in existing):
            continue
        name = _index_name(table, purpose)
        conn.execute(
            compose(
                "create_recommended_index",
                index=sql.Identifier(name),
                table=db.table,
                columns=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
            )
        )
        created.append(name)
    return created


def missing_recommended_indexes(db: Database) -> list[str]:
    """Recommended indexes (SPEC §1) that the outbox table lacks.

    An index counts when its leading key columns are the recommended ones, whatever its name.

    Returns:
        Human-readable descriptions, e.g. ``["(status, processed_at): latency, ..."]``;
        empty when all are present.
    """
    schema, table = db.settings.table_parts
    rows = db.fetch_all("table_indexes", {"schema": schema, "name": table})
    existing = [tuple(row["columns"]) for row in rows]
    purposes = {
        "status_processed_at": "latency, throughput, failures in window, prune",
        "created_at": "created per minute and its chart",
    }
    return [
        f"({', '.join(columns)}) for {purposes[purpose]}"
        for purpose, columns in RECOMMENDED_INDEXES.items()
        if not any(found[: len(columns)] == columns for found in existing)
    ]


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
        SchemaNotInitialised: the ``outbox_monitor`` schema is absent or older than
            this version of the package.
        PermissionDenied: the table exists but the role may not read it (or its
            schema); the message names the missing grant (``db.mapped_errors``).
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
    with db.connection() as conn:
        version = _schema_version(conn)
    latest = migration_files()[-1][0]
    if version < latest:
        raise SchemaNotInitialised(
            f"outbox-monitor's schema is at version {version}, this release needs {latest}",
            hint="Run `outbox-monitor init-db` (idempotent; it only adds what is missing).",
        )
