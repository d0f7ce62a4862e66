"""Prune by partition (SPEC §4 on an outbox partitioned by range of ``created_at``): which
partitions a prune detaches whole and drops instead of deleting their rows one by one.

A partition is detached when every row it holds is ``done`` processed longer ago than the
prune's ``done`` age or ``failed`` longer ago than its ``failed`` age (and matches its event-type
filter), it holds at least one row (pg_partman's empty future partitions stay), it is not the
default partition, and its range ended at least the shorter age ago (a row is processed after it
is created, so a newer partition cannot qualify: only the older ones are counted). A partition
partly past retention is pruned row by row, as an ordinary table.

``actions.partition_detach`` detaches, re-checks, audits and drops them; what a prune says of
them is ``actions.partition_lines``.
"""

from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from outbox_monitor.store.audit import MAX_AUDIT_IDS
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where
from outbox_monitor.store.partitioning import table_shape


@dataclass(frozen=True)
class Partition:
    """A partition a prune detaches whole (its preview): ``schema``, ``name``, its ``rows`` and
    of them the ``done`` and ``failed`` ones past retention (all of them when
    ``prunable``), its largest id at preview time, and whether an earlier prune's detach of
    it is pending (the outbox's queries no longer read its rows: it is finished, then dropped
    when ``prunable``, else attached back)."""

    schema: str
    name: str
    rows: int
    done: int
    failed: int
    max_id: int | None
    detach_pending: bool = False

    @property
    def qualified(self) -> str:
        """``schema.name``."""
        return f"{self.schema}.{self.name}"

    @property
    def identifier(self) -> sql.Identifier:
        """The partition as a ``psycopg.sql.Identifier``."""
        return sql.Identifier(self.schema, self.name)

    @property
    def prunable(self) -> bool:
        """Every row is past retention (and there is one)."""
        return self.rows > 0 and self.rows == self.done + self.failed

    def as_detail(self) -> dict[str, Any]:
        """JSON-able, as a preview's ``details["partitions"]`` holds it (the id as text)."""
        detail = asdict(self)
        detail["max_id"] = None if self.max_id is None else str(self.max_id)
        return detail

    @classmethod
    def from_detail(cls, detail: dict[str, Any]) -> "Partition":
        """The inverse of ``as_detail``."""
        max_id = detail["max_id"]
        return cls(**{**detail, "max_id": None if max_id is None else int(max_id)})


def prune_ages(done_older_than: float | None, failed_older_than: float | None) -> dict[str, Any]:
    """A prune's ages in seconds, as ``prune_partition_rows`` takes them."""
    return {"done_older_than": done_older_than, "failed_older_than": failed_older_than}


def count_rows(
    conn, db: Database, partition: sql.Identifier, *, ages: dict, where: Where, listed: dict | None
) -> dict:
    """``prune_partition_rows`` of one partition: rows, done, failed, max_id, first_ids. Read
    through the outbox within the range of ``listed`` (its ``prune_partitions`` row: the
    outbox's privileges suffice, and partition pruning reads that partition only); with
    ``listed`` ``None``, from the partition itself (detached, or detach-pending: the outbox's
    queries no longer read it)."""
    in_range = Where()
    if listed is not None:
        in_range.between("created_at", listed["lower"], listed["upper"])
    return conn.execute(
        db.compose(
            "prune_partition_rows",
            source=partition if listed is None else db.table,
            in_range=in_range.fragment,
            and_filters=where.fragment,
        ),
        {**ages, **where.params, **in_range.params, "limit": MAX_AUDIT_IDS},
    ).fetchone()


@dataclass(frozen=True)
class Candidates:
    """What ``detachable_partitions`` found: the ``partitions`` to detach, oldest first, and
    the candidates ``uncounted`` within the statement timeout (name → why: left to the
    batches)."""

    partitions: list[Partition] = field(default_factory=list)
    uncounted: dict[str, str] = field(default_factory=dict)


def detachable_partitions(
    db: Database,
    *,
    done_older_than: float | None,
    failed_older_than: float | None,
    where: Where,
) -> Candidates:
    """The partitions a prune of these ages would detach whole (see the module's docstring),
    and the partitions an earlier prune left detach-pending, with their rows counted exactly
    (statement timeout; only the partitions whose range ended at least the shorter age ago
    are counted, through the outbox: the read login's privileges suffice). A detach-pending
    partition is read directly: one the login may not read is left out. A partition whose
    count exceeds the statement timeout (≈ 0.25 s per 250,000 rows on a busy 2-core machine:
    benchmarks/RESULTS.md) is left to the batches and named in ``uncounted``.

    Args:
        done_older_than, failed_older_than: the prune's ages in seconds (``None``: that
            status is not pruned); at least one is set.
        where: the prune's event-type filter.

    Returns:
        ``Candidates``; empty for an ordinary table.

    Raises:
        The errors of ``Database.connection``.
    """
    shape = table_shape(db)
    found = Candidates()
    if shape is None or not shape.partitioned:
        return found
    ages = prune_ages(done_older_than, failed_older_than)
    shortest = min(age for age in ages.values() if age is not None)
    with db.connection() as conn:
        listed = conn.execute(
            db.compose("prune_partitions"),
            {"table_regclass": db.table_regclass, "older_than": shortest},
        ).fetchall()
        for row in listed:
            identifier = sql.Identifier(row["schema"], row["name"])
            try:
                with conn.transaction():
                    counts = count_rows(
                        conn,
                        db,
                        identifier,
                        ages=ages,
                        where=where,
                        listed=None if row["detach_pending"] else row,
                    )
            except psycopg.errors.InsufficientPrivilege:
                continue  # a detach-pending partition: a prune with the owner's login finishes it
            except psycopg.errors.QueryCanceled:
                found.uncounted[f"{row['schema']}.{row['name']}"] = (
                    f"not counted within the statement timeout ({db.settings.statement_timeout:g}"
                    " s): its rows are deleted row by row (a longer "
                    "OUTBOX_MONITOR_STATEMENT_TIMEOUT lets a prune detach it)"
                )
                continue
            partition = Partition(
                row["schema"],
                row["name"],
                counts["rows"],
                counts["done"],
                counts["failed"],
                counts["max_id"],
                row["detach_pending"],
            )
            if partition.prunable or partition.detach_pending:
                found.partitions.append(partition)
    return found
