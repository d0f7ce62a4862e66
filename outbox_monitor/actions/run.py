"""Carrying out a previewed action: guarded batches of one transaction each, an audit row per
batch, progress, and the result — or, when a batch fails, the interruption that says what
stayed committed (SPEC §4)."""

import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import psycopg

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions import partition_detach
from outbox_monitor.actions.audit import MAX_AUDIT_IDS, audit_fields, require_audited
from outbox_monitor.actions.partitions import Partition
from outbox_monitor.actions.preview import Part, Preview, previewed
from outbox_monitor.errors import ActionInterrupted, OutboxMonitorError
from outbox_monitor.store.audited_writers import writer
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

DEFAULT_BATCH_SIZE = 1000
DEFAULT_PRUNE_BATCH_SIZE = 5000
MIN_ID = -(2**63)
PAST_TENSE = {"reap": "reaped", "replay": "replayed", "prune": "deleted"}

# Runs log as the module they had before the actions became a package: log filters and the
# tests key on the logger name.
log = logging.getLogger("outbox_monitor.actions")

Progress = Callable[[int, int], None]
"""``on_progress(rows_changed_so_far, rows_matched_at_preview)`` after every batch."""

APPLIED_NOTHING = (
    "nothing was applied: every previewed row was no longer eligible (a worker, another "
    "operator or a trigger changed or kept it since the preview); preview again"
)
"""What a confirmed action that changed no row says (CLI, page, log): never a quiet 0."""


@dataclass(frozen=True)
class ActionResult:
    """The outcome of a confirmed action.

    ``changed`` rows were changed (or deleted); ``skipped`` = matched at preview but no
    longer eligible (acked, re-claimed, already replayed), ``None`` when the preview's count
    was an estimate (``matched`` is then that estimate); ``dead_lettered`` counts reaped
    rows that reached the maximum attempts; ``ids`` are the first ``MAX_AUDIT_IDS``. A prune
    of a partitioned outbox names the partitions it ``detached`` (and dropped: their rows are
    in ``changed``, each one counts as a batch) and those of its preview it ``kept``, with why
    (their rows were pruned row by row, or, detach pending, will be by the next prune).
    """

    action: str
    run_id: str
    matched: int
    changed: int
    skipped: int | None
    dead_lettered: int
    batches: int
    ids: list[int]
    detached: tuple[str, ...] = ()
    kept: dict[str, str] = field(default_factory=dict)

    @property
    def applied_nothing(self) -> bool:
        """The preview matched rows but none was changed (``APPLIED_NOTHING`` says why)."""
        return self.changed == 0 and self.matched > 0


def apply(
    db: Database,
    preview: Preview,
    *,
    actor: Identity,
    batch_size: int | None = None,
    on_progress: Progress | None = None,
) -> ActionResult:
    """Carry out a previewed action (SPEC §4).

    Changes only rows that match the preview's filter, have ``id <=`` the largest id
    seen at preview time, and still pass the guard inside the statement itself (reap:
    still ``processing`` with an expired lock; replay: still ``failed``; prune: still
    that terminal status and old enough). Batches walk ids in order, except a drip replay's
    (``replay_drip_batch``), which walks ``(created_at, id)`` by keyset and numbers its
    rows across batches from the first batch's start (SPEC §5). Each batch is one
    transaction with its own audit row; a run that changes nothing still writes one audit
    row. Every run is logged with its run id: INFO when done, ERROR when it failed. A prune
    first detaches and drops the partitions its preview listed (``actions.partition_detach``,
    each re-checked and audited; one it cannot is left to the batches).

    Args:
        actor: who acts (the signed-in identity, or ``access.local_identity`` for the CLI);
            must hold the ``operator`` role; its name goes into the audit rows.
        batch_size: rows per transaction (default 1000; prune 5000); a replay's batches hold
            at most ``MAX_AUDIT_IDS`` rows, so that its audit rows record every id.
        on_progress: called after each batch with (changed so far, matched).

    Returns:
        An ``ActionResult``.

    Raises:
        AccessDenied: ``actor`` is not an operator; nothing is changed or audited.
        DatabaseUnavailable, QueryTimeout, PermissionDenied: the first batch failed;
            nothing was changed or audited.
        ActionInterrupted: any other database error (one that is not the package's
            own, e.g. a trigger that raises), or any error after a batch committed: the
            failing batch rolls back alone, earlier batches stay committed and audited;
            the message is the run's summary (committed batches and rows, run id, the
            cause) and the hint says what to do.
    """
    require_audited(db, actor, Role.operator, f"{preview.action} rows", preview.action)
    default = DEFAULT_PRUNE_BATCH_SIZE if preview.action == "prune" else DEFAULT_BATCH_SIZE
    size = batch_size or default
    if preview.action == "replay":  # every replayed id audited: replay outcomes are exact
        size = min(size, MAX_AUDIT_IDS)
    run_id = str(uuid.uuid4())
    result = ActionResult(preview.action, run_id, preview.matched, 0, 0, 0, 0, [])
    t0 = None  # a drip replay's start: its first batch's now(), kept for the whole run
    try:
        for step in _detach_partitions(db, preview, actor=actor, run_id=run_id):
            if step.kept is None:
                result = replace(
                    result,
                    changed=result.changed + step.rows,
                    batches=result.batches + 1,
                    ids=(result.ids + list(step.ids))[:MAX_AUDIT_IDS],
                    detached=(*result.detached, step.partition),
                )
            else:
                result = replace(result, kept={**result.kept, step.partition: step.kept})
            if on_progress:
                on_progress(result.changed, preview.matched)
        fields = audit_fields(actor, preview.filter, run_id)
        statement_writer = writer(db.settings, preview.action)
        for part in preview.parts:
            if part.max_id is None:
                continue
            after: dict = {"after_id": MIN_ID, "after_created_at": None}
            while True:
                row = _batch(
                    db,
                    part,
                    statement_writer,
                    {
                        **fields,
                        **after,
                        "t0": t0,
                        "before": result.changed,
                        "max_id": part.max_id,
                        "batch": size,
                        "audit_empty": False,
                    },
                )
                if row["last_picked_id"] is None:
                    break
                after = {
                    "after_id": row["last_picked_id"],
                    "after_created_at": row.get("last_picked_created_at"),
                }
                t0 = row.get("t0", t0)
                result = replace(
                    result,
                    changed=result.changed + len(row["ids"]),
                    dead_lettered=result.dead_lettered + row["dead_lettered"],
                    batches=result.batches + 1,
                    ids=(result.ids + row["ids"])[:MAX_AUDIT_IDS],
                )
                if on_progress:
                    on_progress(result.changed, preview.matched)
        if result.changed == 0:  # one audit row still says the run happened
            part = preview.parts[0]
            _batch(
                db,
                part,
                statement_writer,
                {
                    **fields,
                    "after_id": MIN_ID,
                    "after_created_at": None,
                    "t0": t0,
                    "before": 0,
                    "max_id": MIN_ID,
                    "batch": 1,
                    "audit_empty": True,
                },
            )
    except OutboxMonitorError as error:
        if result.batches == 0:  # nothing happened: the error says it all (e.g. a grant)
            log.error("%s run %s changed nothing: %s", preview.action, run_id, error.args[0])
            raise
        raise _interrupted(result, preview, error) from error
    except psycopg.Error as error:
        raise _interrupted(result, preview, error) from error
    skipped = max(preview.matched - result.changed, 0) if preview.exact else None
    result = replace(result, skipped=skipped)
    log.log(
        logging.WARNING if result.applied_nothing else logging.INFO,
        "%s run %s by %s: %d row(s) changed of %s previewed, in %d batch(es)%s",
        preview.action,
        run_id,
        actor.name,
        result.changed,
        previewed(preview),
        result.batches,
        f"; {APPLIED_NOTHING}" if result.applied_nothing else "",
    )
    return result


def _detach_partitions(
    db: Database, preview: Preview, *, actor: Identity, run_id: str
) -> Iterator[partition_detach.Step]:
    """The partitions a prune's preview listed, detached one by one (none for another action
    or an ordinary table)."""
    listed = preview.details.get("partitions") if preview.action == "prune" else None
    if not listed:
        return iter(())
    return partition_detach.detach(
        db,
        [Partition.from_detail(detail) for detail in listed],
        done_older_than=preview.filter["done_older_than_seconds"],
        failed_older_than=preview.filter["failed_older_than_seconds"],
        where=Where().event_type(preview.filter["event_type"]),
        actor=actor,
        run_id=run_id,
        audit_details=preview.filter,
    )


def _interrupted(
    result: ActionResult, preview: Preview, error: OutboxMonitorError | psycopg.Error
) -> ActionInterrupted:
    if isinstance(error, OutboxMonitorError):
        cause, cause_hint = (str(error.args[0]) if error.args else type(error).__name__), error.hint
    else:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        cause = error.diag.message_primary or lines[0]
        cause += f" (SQLSTATE {error.sqlstate})" if error.sqlstate else ""
        cause_hint = ""
    verb = PAST_TENSE.get(preview.action, "changed")
    batches = f"{result.batches:,} committed batch{'es' if result.batches != 1 else ''}"
    message = (
        f"{preview.action} stopped after {batches} ({result.changed:,} of "
        f"{previewed(preview)} previewed rows {verb}), run {result.run_id}: {cause}"
    )
    kept = (
        f"What was committed ({batches}, {result.changed:,} rows) stays applied and audited "
        f"under run {result.run_id}"
        if result.batches
        else "Nothing was changed"
    )
    hint = (
        f"{cause_hint + ' ' if cause_hint else ''}{kept}; the failed batch was rolled back. "
        "Fix the cause, then preview again and confirm: only rows that still qualify change."
    )
    log.error("%s", message)
    return ActionInterrupted(
        message,
        hint,
        action=preview.action,
        run_id=result.run_id,
        batches=result.batches,
        changed=result.changed,
        cause=cause,
    )


def _batch(db: Database, part: Part, statement_writer, params: dict) -> dict:
    """One batch of ``part`` in a transaction of its own: the rows picked by the preview's
    filter, changed by the outbox's audited writer of the action (the guard inside its
    statement, its audit row in the same transaction)."""
    with db.transaction() as conn:
        statement = db.compose(
            part.batch_query, and_filters=part.where.fragment, writer=statement_writer
        )
        return conn.execute(statement, {**part.params, **part.where.params, **params}).fetchone()
