"""A partitioned outbox (SPEC §1): its shape from the catalog and the check that it is supported."""

from dataclasses import dataclass

from outbox_monitor.errors import PartitioningUnsupported
from outbox_monitor.store.db import Database

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
            "does), or point OUTBOX_MONITOR_TABLE at an ordinary table (see docs/index.md, "
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
            "two rows, so the idempotency ledger is the guard "
            "(docs/index.md, 'A partitioned outbox').",
        )
