"""Prune by partition, applied: each partition a prune's preview listed
(``actions.partitions``) detached, checked again, audited and dropped, one at a time.

Detaching one partition:

1. its rows are counted again (statement timeout): still all deleted, none newer than the
   preview's largest id — else it is left to the row-by-row batches;
2. ``ALTER TABLE … DETACH PARTITION … CONCURRENTLY`` (no lock the workers wait behind; its
   ``lock_timeout`` is ``DETACH_CONCURRENTLY_LOCK_TIMEOUT_SECONDS``) — but Postgres refuses
   CONCURRENTLY while the outbox has a default partition: then a plain ``DETACH PARTITION``,
   whose ACCESS EXCLUSIVE lock on the outbox lasts the catalog change, waiting at most
   ``DETACH_LOCK_TIMEOUT_SECONDS`` (the workers queue behind it meanwhile), ``DETACH_ATTEMPTS``
   times; a lock timeout leaves it attached, pruned row by row. A concurrent detach cut short
   after its first transaction leaves the partition "detach pending" (the outbox's queries no
   longer read it): it is finalised at once if it can be, else by the next prune;
3. in one transaction: the detached table locked, its rows counted a last time (no statement
   through the outbox reaches it any more, so this count is final), an audit row (the
   partition, its row count and first ``MAX_AUDIT_IDS`` ids) and ``DROP TABLE``. Dropped, not
   kept: a prune deletes, and the audit row records what went. When the last count finds a row
   the prune must keep (a replay between the first count and the detach), the partition is
   attached back with its range, and its rows are pruned row by row.

One prune at a time detaches partitions of an outbox (a session advisory lock); DETACH and DROP
need the owner of the outbox and of the partition: with another login the partitions are pruned
row by row, and the result says why.
"""

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from outbox_monitor.access import Identity
from outbox_monitor.actions.partitions import Partition, count_rows, prune_ages
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.store.audit import record_audit
from outbox_monitor.store.db import Database, lock_timeout
from outbox_monitor.store.filters import Where
from outbox_monitor.store.partitioning import table_shape

DETACH_LOCK_TIMEOUT_SECONDS = 1.0
"""How long a plain ``DETACH PARTITION`` (and the lock of the detached table) waits for its lock:
with a default partition Postgres refuses CONCURRENTLY, and the workers' statements queue behind
the ACCESS EXCLUSIVE lock it waits for, so at most this long, ``DETACH_ATTEMPTS`` times."""
DETACH_CONCURRENTLY_LOCK_TIMEOUT_SECONDS = 10.0
"""How long ``DETACH PARTITION … CONCURRENTLY`` and ``FINALIZE`` wait, for their locks and for
the transactions older than them: no statement of the workers waits behind them."""
DETACH_ATTEMPTS = 3
RETRY_PAUSE_SECONDS = 0.5

Audit = Callable[[psycopg.Connection, dict[str, Any]], int]
"""Writes a dropped partition's audit row in the transaction of its drop, from its last count."""

# Runs log as the actions do (run.py).
log = logging.getLogger("outbox_monitor.actions")


@dataclass(frozen=True)
class Step:
    """One partition's outcome in a prune run: ``rows`` deleted with it (``ids``: the first
    ``MAX_AUDIT_IDS``) when ``kept`` is ``None``; else why it was not dropped (its rows are
    then pruned row by row, or, detach pending, by the next prune)."""

    partition: str
    rows: int = 0
    ids: tuple[int, ...] = ()
    kept: str | None = None


def detach(
    db: Database,
    partitions: list[Partition],
    *,
    done_older_than: float | None,
    failed_older_than: float | None,
    where: Where,
    actor: Identity,
    run_id: str,
    audit_details: dict[str, Any],
) -> Iterator[Step]:
    """Detach and drop the previewed ``partitions`` one by one (see the module's docstring),
    yielding each one's ``Step`` as it is done; the caller then prunes the rest row by row.

    Args:
        db: the actions connector (its login must own the outbox and the partitions).
        partitions: from the preview (``detachable_partitions``).
        done_older_than, failed_older_than, where: the preview's ages and filter.
        actor, run_id: the run's, for the audit rows.
        audit_details: the preview's filter; each audit row adds ``partition`` and
            ``detached``.

    Raises:
        OutboxMonitorError: a partition detached whose last count or drop failed and that
            could not be attached back (the message says how to attach it); the connector's
            errors. A step yielded before stays done and audited.
    """
    if not partitions:
        return
    ages = prune_ages(done_older_than, failed_older_than)
    shape = table_shape(db)
    concurrently = shape is not None and not shape.has_default
    regclass = {"table_regclass": db.table_regclass}
    with db.direct_connection(statement_timeout=None) as ddl:
        if not ddl.execute(db.compose("try_lock_partition_pruner"), regclass).fetchone()["locked"]:
            reason = "another prune is detaching partitions of this outbox"
            yield from (Step(p.qualified, kept=reason) for p in partitions)
            return
        try:
            current = {
                (row["schema"], row["name"]): row
                for row in db.fetch_all("prune_partitions", {**regclass, "older_than": 0})
            }
            for partition in partitions:
                step = _detach_one(
                    db,
                    ddl,
                    partition,
                    current.get((partition.schema, partition.name)),
                    concurrently=concurrently,
                    ages=ages,
                    where=where,
                    audit=lambda conn, counts, p=partition: record_audit(
                        conn,
                        db,
                        actor=actor,
                        action="prune",
                        details={**audit_details, "partition": p.qualified, "detached": True},
                        ids=counts["first_ids"],
                        count=counts["rows"],
                        run_id=run_id,
                    ),
                )
                if step.kept is None:
                    log.info(
                        "prune run %s: partition %s detached and dropped (%d rows)",
                        run_id,
                        step.partition,
                        step.rows,
                    )
                else:
                    log.warning(
                        "prune run %s: partition %s not detached: %s",
                        run_id,
                        step.partition,
                        step.kept,
                    )
                yield step
        finally:
            if not ddl.closed:
                ddl.execute(db.compose("unlock_partition_pruner"), regclass)


def _detach_one(
    db: Database,
    ddl: psycopg.Connection,
    partition: Partition,
    listed: dict[str, Any] | None,
    *,
    concurrently: bool,
    ages: dict[str, Any],
    where: Where,
    audit: Audit,
) -> Step:
    name = partition.qualified
    if listed is None:
        return Step(name, kept="no longer a partition of the outbox")
    if not listed["owned"]:
        return Step(
            name,
            kept="the actions login does not own it and the outbox (DETACH and DROP need the "
            "owner): its rows are deleted row by row",
        )
    if listed["detach_pending"]:
        kept = _finalize(db, ddl, partition)
    else:
        with db.connection() as conn:
            counts = count_rows(
                conn, db, partition.identifier, ages=ages, where=where, listed=listed
            )
        if not _unchanged(partition, counts):
            return Step(name, kept="rows changed since the preview: they are deleted row by row")
        kept = _detach_partition(db, ddl, partition, concurrently=concurrently)
    if kept is not None:
        return Step(name, kept=kept)
    return _drop_or_attach_back(db, ddl, partition, listed, ages=ages, where=where, audit=audit)


def _unchanged(partition: Partition, counts: dict[str, Any]) -> bool:
    """Every row still past retention, and none newer than the preview's (SPEC §4: what the
    preview saw); a partition found detach-pending has no id ceiling (its rows no longer
    change)."""
    prunable = counts["rows"] > 0 and counts["rows"] == counts["done"] + counts["failed"]
    newer = (
        not partition.detach_pending
        and counts["max_id"] is not None
        and (partition.max_id is None or counts["max_id"] > partition.max_id)
    )
    return prunable and not newer


def _detach_partition(
    db: Database, ddl: psycopg.Connection, partition: Partition, *, concurrently: bool
) -> str | None:
    """Detach one partition; ``None`` when done, else why not (it stays attached, or, cut
    short and not finalised, detach-pending)."""
    seconds = (
        DETACH_CONCURRENTLY_LOCK_TIMEOUT_SECONDS if concurrently else DETACH_LOCK_TIMEOUT_SECONDS
    )
    statement = db.compose(
        "detach_partition",
        partition=partition.identifier,
        concurrently=sql.SQL("CONCURRENTLY" if concurrently else ""),
    )

    def pending() -> bool:
        return concurrently and _pending(db, ddl, partition)

    if _run_ddl(ddl, statement, seconds, stop=pending):
        return None
    if pending():  # cut short after its first transaction
        return _finalize(db, ddl, partition)
    return (
        f"lock timeout ({seconds:g} s, {DETACH_ATTEMPTS} attempts): long transactions hold the "
        "outbox; its rows are deleted row by row"
    )


def _run_ddl(
    ddl: psycopg.Connection,
    statement: sql.Composed,
    seconds: float,
    *,
    stop: Callable[[], bool] = lambda: False,
) -> bool:
    """Run one DDL statement under a lock timeout of ``seconds``, at most ``DETACH_ATTEMPTS``
    times, ``RETRY_PAUSE_SECONDS`` apart, until it runs or ``stop()`` says so after a lock
    timeout; ``True`` when it ran."""
    for attempt in range(DETACH_ATTEMPTS):
        if attempt:
            time.sleep(RETRY_PAUSE_SECONDS)
        try:
            with lock_timeout(ddl, seconds):
                ddl.execute(statement)
            return True
        except psycopg.errors.LockNotAvailable:
            if stop():
                return False
    return False


def _pending(db: Database, ddl: psycopg.Connection, partition: Partition) -> bool:
    row = ddl.execute(
        db.compose("detach_pending"),
        {
            "table_regclass": db.table_regclass,
            "partition": partition.identifier.as_string(ddl),
        },
    ).fetchone()
    return bool(row["pending"])


def _finalize(db: Database, ddl: psycopg.Connection, partition: Partition) -> str | None:
    """Finish a detach cut short after its first transaction; ``None`` when done, else why
    it stays pending."""
    try:
        with lock_timeout(ddl, DETACH_CONCURRENTLY_LOCK_TIMEOUT_SECONDS):
            ddl.execute(db.compose("finalize_detach", partition=partition.identifier))
    except psycopg.errors.LockNotAvailable:
        return (
            "detach pending: a transaction older than the detach still runs; its rows are no "
            "longer read through the outbox, and the next prune finishes it (or ALTER TABLE "
            "… DETACH PARTITION … FINALIZE)"
        )
    return None


class _Changed(Exception):
    """The last count of a detached partition found a row the prune must keep."""


def _drop_or_attach_back(
    db: Database,
    ddl: psycopg.Connection,
    partition: Partition,
    listed: dict[str, Any],
    *,
    ages: dict[str, Any],
    where: Where,
    audit: Audit,
) -> Step:
    """The detached partition's last count, audit row and drop in one transaction; when the
    count finds a row the prune keeps (or the lock or drop fails), attached back instead."""
    try:
        with db.transaction() as conn, lock_timeout(conn, DETACH_LOCK_TIMEOUT_SECONDS, local=True):
            conn.execute(db.compose("lock_detached_partition", partition=partition.identifier))
            counts = count_rows(conn, db, partition.identifier, ages=ages, where=where, listed=None)
            if not _unchanged(partition, counts):
                raise _Changed
            audit(conn, counts)
            conn.execute(db.compose("drop_detached_partition", partition=partition.identifier))
        return Step(partition.qualified, counts["rows"], tuple(counts["first_ids"]))
    except _Changed:
        kept = "rows changed while it was detached (a replay?): attached back"
    except (psycopg.errors.LockNotAvailable, OutboxMonitorError) as error:
        kept = f"its last check failed after the detach ({error}): attached back"
    _attach_back(db, ddl, partition, listed)
    return Step(partition.qualified, kept=f"{kept}; its rows are deleted row by row")


def _attach_back(
    db: Database, ddl: psycopg.Connection, partition: Partition, listed: dict[str, Any]
) -> None:
    """Attach a detached partition back with the range it had.

    Raises:
        OutboxMonitorError: it could not be (lock timeouts); the hint is the statement.
    """
    bounds = {
        side: sql.Literal(listed[side]) if listed[side] is not None else sql.SQL(word)
        for side, word in (("lower", "MINVALUE"), ("upper", "MAXVALUE"))
    }
    statement = db.compose("attach_partition", partition=partition.identifier, **bounds)
    if _run_ddl(ddl, statement, DETACH_CONCURRENTLY_LOCK_TIMEOUT_SECONDS):
        return
    raise OutboxMonitorError(
        f"partition {partition.qualified} was detached from {db.table_name} and could not be "
        "attached back (lock timeouts): its rows are not read through the outbox",
        hint=f"Attach it back: {statement.as_string(ddl)}",
    )
