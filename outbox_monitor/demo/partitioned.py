"""A SPEC §1 outbox partitioned by range of ``created_at``, as teams at volume run it (often
with pg_partman): for the tests and the benchmarks, not the product (which never creates one)."""

from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise

import psycopg
from psycopg import sql

from outbox_monitor.store.queries import compose
from outbox_monitor.store.schema import create_outbox_table


def partition_name(table: str, lower: datetime) -> str:
    """pg_partman's name for the partition of ``table`` starting at ``lower``:
    ``<table>_p<YYYYMMDD>``."""
    return f"{table}_p{lower:%Y%m%d}"


def create_partitioned_outbox(
    conn: psycopg.Connection,
    schema: str,
    table: str,
    bounds: Sequence[datetime],
    *,
    default: bool = True,
    unique: bool = True,
) -> list[str]:
    """Create the partitioned outbox ``schema.table`` (absent before) with one range partition
    between each two consecutive ``bounds`` and, with ``default``, the default partition
    ``<table>_default``.

    Args:
        conn: an autocommit connection (or one in the caller's transaction).
        bounds: ascending instants; ``n`` bounds make ``n - 1`` partitions.
        default: add the default partition (rows outside every range go there).
        unique: the unique index on ``(event_key, created_at)`` (publish's arbiter); without
            it the table check refuses the table.

    Returns:
        The partitions' names, oldest first, then the default's.
    """
    parent = sql.Identifier(schema, table)
    keys = "PRIMARY KEY (id, created_at)" + (", UNIQUE (event_key, created_at)" if unique else "")
    conn.execute(
        create_outbox_table(
            parent,
            table,
            keys=sql.SQL(keys),
            partitioning=sql.SQL("PARTITION BY RANGE (created_at)"),
        )
    )
    names = []
    for lower, upper in pairwise(bounds):
        name = partition_name(table, lower)
        conn.execute(
            compose(
                "partitioned_outbox_partition",
                table=parent,
                partition=sql.Identifier(schema, name),
                lower=sql.Literal(lower),
                upper=sql.Literal(upper),
            )
        )
        names.append(name)
    if default:
        name = f"{table}_default"
        conn.execute(
            compose(
                "partitioned_outbox_default", table=parent, partition=sql.Identifier(schema, name)
            )
        )
        names.append(name)
    return names
