"""Carrying out a previewed action: guarded batches of one transaction each, an audit row per
batch, progress, and the result — or, when a batch fails, the interruption that says what
stayed committed (SPEC §4)."""

import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import psycopg
from psycopg import sql

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions import partition_detach
from outbox_monitor.actions.partitions import Partition
from outbox_monitor.actions.preview import Part, Preview, previewed
from outbox_monitor.errors import ActionInterrupted, OutboxMonitorError
from outbox_monitor.store.audit import MAX_AUDIT_IDS, audit_fields, require_audited
from outbox_monitor.store.audited_writers import writer
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

DEFAULT_BATCH_SIZE = 1000
DEFAULT_PRUNE_BATCH_SIZE = 5000
MIN_ID = -(2**63)
ROW_REFUSALS = ("22", "23", "54", "P0")
"""SQLSTATE classes of an error one row can cause — data exception, integrity constraint,
program limit (an index entry too large), a trigger's RAISE: the run goes on past the row
(``ActionResult.refused``); any other error interrupts the run."""
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
    rows that reached the maximum attempts; ``ids`` are the first ``MAX_AUDIT_IDS``;
    ``refused`` names each row the table refused to change (id → the database's error: a
    users' trigger or constraint), left as it was and audited, the rest of its batch applied.
    A prune
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
    refused: dict[int, str] = field(default_factory=dict)

    @property
    def applied_nothing(self) -> bool:
        """The preview matched rows but none was changed, and none was refused
        (``APPLIED_NOTHING`` says why)."""
        return self.changed == 0 and self.matched > 0 and not self.refused


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
    row. A batch that fails on one row (``ROW_REFUSALS``: a users' trigger or constraint
    refusing the change) is applied without it: the row is found by halving the batch's id
    range in rolled-back tries, the rows before it are applied, and it is left as it was,
    logged (WARNING), audited (an audit row of no row whose filter names it and the error)
    and reported in ``ActionResult.refused``; the run goes on after it (a drip replay's
    keyset walk is interrupted instead). Every run is logged with its run id: INFO when done,
    ERROR when it failed. A prune
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
            refusal: tuple[int, str] | None = None  # a refused row located: id, error
            while True:
                params = {
                    **fields,
                    **after,
                    "t0": t0,
                    "before": result.changed,
                    "max_id": part.max_id if refusal is None else refusal[0] - 1,
                    "batch": size,
                    "audit_empty": False,
                }
                try:
                    row = _batch(db, part, statement_writer, params)
                except psycopg.Error as error:
                    if refusal or part.batch_query == "replay_drip_batch" or not _refusal(error):
                        raise
                    refusal = _locate_refusal(db, part, statement_writer, params, error)
                    continue
                if row["last_picked_id"] is None:
                    if refusal is None:
                        break
                    result = _refuse(db, part, statement_writer, run_id, actor, preview, result,
                                     *refusal)  # fmt: skip
                    after, refusal = {"after_id": refusal[0], "after_created_at": None}, None
                    continue
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
    left = result.changed + len(result.refused)
    skipped = max(preview.matched - left, 0) if preview.exact else None
    result = replace(result, skipped=skipped)
    log.log(
        logging.WARNING if result.applied_nothing or result.refused else logging.INFO,
        "%s run %s by %s: %d row(s) changed of %s previewed, in %d batch(es)%s%s",
        preview.action,
        run_id,
        actor.name,
        result.changed,
        previewed(preview),
        result.batches,
        f"; {len(result.refused)} row(s) refused by the table, left as they were: "
        + ", ".join(map(str, result.refused))
        if result.refused
        else "",
        f"; {APPLIED_NOTHING}" if result.applied_nothing else "",
    )
    return result


def _refusal(error: psycopg.Error) -> bool:
    """Whether one row can have caused ``error`` (``ROW_REFUSALS``)."""
    return (error.sqlstate or "")[:2] in ROW_REFUSALS


def _locate_refusal(
    db: Database, part: Part, statement_writer: sql.Composable, params: dict, error: psycopg.Error
) -> tuple[int, str]:
    """The id of the first row of a failed batch that the table refuses, with the error:
    the batch is tried again in rolled-back transactions with its id ceiling halved between
    the last id done (``after_id``) and the one that failed (each try that fails holds the
    row; ≈ 64 tries at most). Ids walk in order, so every row under that id is one the batch
    would apply.

    Raises:
        error: the batch alone does not fail (the audit or a follow-up did): not a row's.
    """
    done, failing = params["after_id"], params["max_id"]
    if not _fails(db, part, statement_writer, params):
        raise error
    while failing - done > 1:
        middle = (done + failing) // 2
        if _fails(db, part, statement_writer, {**params, "max_id": middle}):
            failing = middle
        else:
            done = middle
    return failing, _cause(error)


def _fails(db: Database, part: Part, statement_writer: sql.Composable, params: dict) -> bool:
    """Whether the batch fails on a row (``_refusal``), tried and rolled back."""
    try:
        _batch(db, part, statement_writer, params, rollback=True)
    except psycopg.Error as error:
        if _refusal(error):
            return True
        raise
    return False


def _refuse(
    db: Database,
    part: Part,
    statement_writer: sql.Composable,
    run_id: str,
    actor: Identity,
    preview: Preview,
    result: ActionResult,
    row_id: int,
    cause: str,
) -> ActionResult:
    """Report and audit one row the table refused to change: a WARNING, an audit row of no
    row changed whose filter names it and why (through the action's audited writer, given
    no row), and ``result.refused``."""
    log.warning(
        "%s run %s: row %d was left as it was, the table refused the change: %s",
        preview.action,
        run_id,
        row_id,
        cause,
    )
    details = {**preview.filter, "refused_id": str(row_id), "refused_because": cause}
    _batch(
        db,
        part,
        statement_writer,
        {
            **audit_fields(actor, details, run_id),
            "after_id": MIN_ID,
            "after_created_at": None,
            "t0": None,
            "before": result.changed,
            "max_id": MIN_ID,
            "batch": 1,
            "audit_empty": True,
        },
    )
    return replace(result, refused={**result.refused, row_id: cause})


def _cause(error: psycopg.Error) -> str:
    """The database's message of ``error`` with its SQLSTATE."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    cause = error.diag.message_primary or lines[0]
    return cause + (f" (SQLSTATE {error.sqlstate})" if error.sqlstate else "")


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
        cause, cause_hint = _cause(error), ""
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


def _batch(
    db: Database, part: Part, statement_writer, params: dict, *, rollback: bool = False
) -> dict:
    """One batch of ``part`` in a transaction of its own: the rows picked by the preview's
    filter, changed by the outbox's audited writer of the action (the guard inside its
    statement, its audit row in the same transaction); ``rollback``: tried, then rolled back
    (``_fails``)."""
    statement = db.compose(
        part.batch_query, and_filters=part.where.fragment, writer=statement_writer
    )
    values = {**part.params, **part.where.params, **params}
    if rollback:
        with db.connection() as conn, conn.transaction(force_rollback=True):
            return conn.execute(statement, values).fetchone()
    with db.transaction() as conn:
        return conn.execute(statement, values).fetchone()
