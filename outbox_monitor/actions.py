"""Operator actions of SPEC §4 — reap, replay, prune — each previewed, guarded and audited.

Every action is two calls: ``preview_*`` counts the rows the filter matches, samples
them and remembers the largest id seen; the confirmed ``apply`` changes only rows with
``id <=`` that id that still pass the action's guard, in batches of one transaction each,
every batch writing its own audit row, all tied together by one ``run_id``.

The dashboard's previews of a replay or a prune pass ``count_cap``: they count the matched
rows only up to it and, above it, show the planner's estimate, labelled (SPEC §2); their
largest id, and so what ``apply`` changes and audits, stays exact.
"""

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from outbox_monitor import estimates
from outbox_monitor.access import Identity, Role, require
from outbox_monitor.db import Database
from outbox_monitor.errors import ActionInterrupted, ActionRefused, OutboxMonitorError
from outbox_monitor.filters import Where
from outbox_monitor.redaction import redactor_for

SAMPLE_SIZE = 20
DEFAULT_BATCH_SIZE = 1000
DEFAULT_PRUNE_BATCH_SIZE = 5000
MAX_AUDIT_IDS = 1000
MIN_ID = -(2**63)
PAST_TENSE = {"reap": "reaped", "replay": "replayed", "prune": "deleted"}

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""``on_progress(rows_changed_so_far, rows_matched_at_preview)`` after every batch."""


@dataclass(frozen=True)
class Part:
    """One guarded statement of an action: its batch query, filter and id ceiling (exact);
    ``matched`` is an estimate when ``exact`` is false (a dashboard preview above its cap)."""

    batch_query: str
    where: Where
    params: dict[str, Any]
    matched: int
    max_id: int | None
    exact: bool = True

    @property
    def count(self) -> estimates.Count:
        """``matched`` with whether it is exact."""
        return estimates.Count(self.matched, self.exact)


@dataclass(frozen=True)
class Preview:
    """What a confirmed action would change.

    ``matched`` rows matched the filter at preview time (an estimate when ``exact`` is
    false); ``sample`` shows the first ``SAMPLE_SIZE`` of them; ``filter`` (JSON-able) is
    what the audit row records.
    """

    action: str
    matched: int
    sample: list[dict[str, Any]]
    filter: dict[str, Any]
    parts: tuple[Part, ...] = field(repr=False)

    @property
    def exact(self) -> bool:
        """Whether ``matched`` is exact: always, but for a dashboard preview (``count_cap``)
        of more rows than its cap, where it is the planner's estimate (SPEC §2)."""
        return all(part.exact for part in self.parts)

    @property
    def count(self) -> estimates.Count:
        """``matched`` with whether it is exact."""
        return estimates.Count(self.matched, self.exact)


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
    rows that reached the maximum attempts; ``ids`` are the first ``MAX_AUDIT_IDS``.
    """

    action: str
    run_id: str
    matched: int
    changed: int
    skipped: int | None
    dead_lettered: int
    batches: int
    ids: list[int]

    @property
    def applied_nothing(self) -> bool:
        """The preview matched rows but none was changed (``APPLIED_NOTHING`` says why)."""
        return self.changed == 0 and self.matched > 0


@dataclass(frozen=True)
class ReplaySelection:
    """Which failed rows to replay; every given criterion must hold (AND).

    ``ids``: explicit row ids; ``event_type``: exact or LIKE pattern; ``error_group``:
    12-hex group id of SPEC §2; ``since``/``until``: bounds on ``processed_at`` (time of
    failure), ``since`` inclusive, ``until`` exclusive.
    """

    ids: tuple[int, ...] = ()
    event_type: str | None = None
    error_group: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def where(self) -> Where:
        """The selection as SQL conditions with bound parameters."""
        where = Where().event_type(self.event_type)
        if self.ids:
            where.add("id = ANY(%(ids)s)", ids=list(self.ids))
        if self.error_group:
            where.add(
                "outbox_monitor.error_group(event_type, last_error) = %(error_group)s",
                error_group=self.error_group,
            )
        return where.between("processed_at", self.since, self.until)

    def describe(self) -> dict[str, Any]:
        """The selection as JSON-able values (ids as strings: they may exceed 2^53)."""
        return {
            "ids": [str(i) for i in self.ids],
            "event_type": self.event_type,
            "error_group": self.error_group,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
        }


def _part(
    db: Database,
    query: str,
    batch_query: str,
    where: Where,
    params: dict,
    *,
    rows_query: str | None = None,
    count_cap: int | None = None,
    reads_rows: bool = False,
) -> Part:
    """One part of a preview: ``query`` counts its rows and finds their largest id, exactly.

    With ``count_cap``, the rows of ``rows_query`` are first counted up to ``count_cap + 1``
    (``estimates.count_up_to``, from a recommended index): at most the cap, ``query`` runs as
    without it (reading at most that many rows); above it the count is the planner's
    estimate (``estimates.planner_rows``, never below the cap + 1) and the largest id is
    found alone (``max_id``), so that no statement reads every matching row. When the filter
    reads every row anyway (``reads_rows``: an error group normalises each ``last_error``),
    one pass (``preview_capped``) counts and finds the largest id up to the cap."""
    values = {**params, **where.params}
    if count_cap is None or rows_query is None:
        row = db.fetch_one(query, values, and_filters=where.fragment)
        return Part(batch_query, where, params, row["matched"], row["max_id"])
    rows = db.compose(rows_query, and_filters=where.fragment)
    if reads_rows:
        row = db.fetch_one("preview_capped", {**values, "cap": count_cap}, rows=rows)
        if row["matched"] <= count_cap:  # nothing was cut: the count and the id are exact
            return Part(batch_query, where, params, row["matched"], row["max_id"])
    elif estimates.count_up_to(db, rows_query, cap=count_cap, where=where, params=params) <= (
        count_cap
    ):
        return _part(db, query, batch_query, where, params)
    estimate = max(estimates.planner_rows(db, rows, values), count_cap + 1)
    max_id = db.fetch_one("max_id", values, rows=rows)["max_id"]
    return Part(batch_query, where, params, estimate, max_id, exact=False)


def _sample(db: Database, query: str, where: Where, params: dict) -> list[dict[str, Any]]:
    return db.fetch_all(
        query, {**params, **where.params, "limit": SAMPLE_SIZE}, and_filters=where.fragment
    )


def preview_reap(
    db: Database, *, lock_timeout: float | None = None, event_type: str | None = None
) -> Preview:
    """Preview a reap: ``processing`` rows locked longer than ``lock_timeout`` seconds, or
    with ``locked_at`` null (orphans, stuck by definition; SPEC §4 reap).

    Returns:
        A ``Preview`` whose sample has id, event_type, event_key, locked_by, locked_at,
        attempts and ``lock_age_seconds`` (``None`` for an orphan), orphans first, then the
        oldest lock.
    """
    timeout = db.settings.lock_timeout if lock_timeout is None else lock_timeout
    where = Where().event_type(event_type)
    params = {"lock_timeout": timeout, "max_attempts": db.settings.max_attempts}
    part = _part(db, "reap_preview", "reap_batch", where, params)
    return Preview(
        action="reap",
        matched=part.matched,
        sample=_sample(db, "reap_sample", where, params) if part.matched else [],
        filter={
            "event_type": event_type,
            "lock_timeout_seconds": timeout,
            "max_id": _str(part.max_id),
        },
        parts=(part,),
    )


def preview_replay(
    db: Database, selection: ReplaySelection, *, count_cap: int | None = None
) -> Preview:
    """Preview a replay (redrive) of dead-lettered rows matching ``selection``.

    Args:
        count_cap: the dashboard's cap (``estimates.DASHBOARD_COUNT_CAP``): count the
            matched rows only up to it, and estimate above it (``Preview.exact`` false;
            SPEC §2). ``None`` (the CLI, the scheduler): count them all.

    Returns:
        A ``Preview`` whose sample has id, event_type, event_key, attempts, processed_at
        and last_error (200 chars, redacted by ``OUTBOX_MONITOR_REDACT_*`` as on every
        surface: the dashboard, the CLI and ``--json`` show this sample), newest first.

    Raises:
        ActionRefused: the selection is empty (replaying every failed row needs at
            least ``event_type='%'``, said on purpose).
    """
    if selection == ReplaySelection():
        raise ActionRefused(
            "a replay needs a selection: ids, an event type, an error group or a time range",
            hint="To replay every dead letter on purpose, use the event type pattern '%'.",
        )
    where = selection.where()
    part = _part(
        db,
        "replay_preview",
        "replay_batch",
        where,
        {},
        rows_query="dead_letter_rows",
        count_cap=count_cap,
        reads_rows=selection.error_group is not None,
    )
    return Preview(
        action="replay",
        matched=part.matched,
        sample=redactor_for(db.settings).redact_rows(_sample(db, "replay_sample", where, {}))
        if part.matched
        else [],
        filter={**selection.describe(), "max_id": _str(part.max_id)},
        parts=(part,),
    )


def preview_prune(
    db: Database,
    *,
    done_older_than: float | None,
    failed_older_than: float | None,
    event_type: str | None = None,
    count_cap: int | None = None,
) -> Preview:
    """Preview a prune: ``done`` rows processed more than ``done_older_than`` seconds ago
    and ``failed`` rows more than ``failed_older_than`` seconds ago (``None`` skips that
    status). ``pending`` and ``processing`` rows are never matched.

    Args:
        count_cap: as for ``preview_replay``, per status. The largest id stays exact: it
            costs a backward walk of the primary key over the rows newer than the newest
            matching one (0.4–0.9 s for "done older than 7 days" at 10 M rows over 30
            days: 2.3 M newer rows; benchmarks/RESULTS.md).

    Returns:
        A ``Preview`` with one part per status; the sample shows the oldest rows.

    Raises:
        ActionRefused: both ages are ``None``, or an age under one day (a typo such as
            ``30m`` for ``30d`` would delete recent history).
    """
    ages = {"done": done_older_than, "failed": failed_older_than}
    if all(age is None for age in ages.values()):
        raise ActionRefused("a prune needs --done-older-than and/or --failed-older-than")
    for status, age in ages.items():
        if age is not None and age < 86400:
            raise ActionRefused(
                f"refusing to prune {status} rows younger than one day ({age:g} s)",
                hint="Retention is written in days, e.g. 30d for done and 90d for failed.",
            )
    parts, sample = [], []
    for status, age in ages.items():
        if age is None:
            continue
        where = Where().event_type(event_type)
        params = {"status": status, "older_than": age}
        part = _part(
            db,
            "prune_preview",
            "prune_batch",
            where,
            params,
            rows_query="prune_rows",
            count_cap=count_cap,
        )
        parts.append(part)
        if part.matched:
            sample += _sample(db, "prune_sample", where, params)
    return Preview(
        action="prune",
        matched=sum(part.matched for part in parts),
        sample=sample[:SAMPLE_SIZE],
        filter={
            "event_type": event_type,
            "done_older_than_seconds": done_older_than,
            "failed_older_than_seconds": failed_older_than,
            "max_ids": {p.params["status"]: _str(p.max_id) for p in parts},
        },
        parts=tuple(parts),
    )


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
    that terminal status and old enough). Each batch is one transaction with its own
    audit row; a run that changes nothing still writes one audit row. Every run is
    logged with its run id: INFO when done, ERROR when it failed.

    Args:
        actor: who acts (the signed-in identity, or ``access.local_identity`` for the CLI);
            must hold the ``operator`` role; its name goes into the audit rows.
        batch_size: rows per transaction (default 1000; prune 5000).
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
    require(actor, Role.operator, f"{preview.action} rows")
    default = DEFAULT_PRUNE_BATCH_SIZE if preview.action == "prune" else DEFAULT_BATCH_SIZE
    size = batch_size or default
    run_id = str(uuid.uuid4())
    result = ActionResult(preview.action, run_id, preview.matched, 0, 0, 0, 0, [])
    try:
        for part in preview.parts:
            if part.max_id is None:
                continue
            after = MIN_ID
            while True:
                params = {
                    **part.params,
                    **part.where.params,
                    "after_id": after,
                    "max_id": part.max_id,
                    "batch": size,
                }
                with db.transaction() as conn:
                    row = conn.execute(
                        db.compose(part.batch_query, and_filters=part.where.fragment), params
                    ).fetchone()
                    if row["last_picked_id"] is None:
                        break
                    after = row["last_picked_id"]
                    if row["ids"]:
                        _audit(conn, db, run_id, actor, preview, row["ids"])
                result = replace(
                    result,
                    changed=result.changed + len(row["ids"]),
                    dead_lettered=result.dead_lettered + row["dead_lettered"],
                    batches=result.batches + 1,
                    ids=(result.ids + row["ids"])[:MAX_AUDIT_IDS],
                )
                if on_progress:
                    on_progress(result.changed, preview.matched)
        if result.changed == 0:
            with db.transaction() as conn:
                _audit(conn, db, run_id, actor, preview, [])
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


def record_audit(
    conn: Any,
    db: Database,
    *,
    actor: Identity,
    action: str,
    details: dict[str, Any],
    ids: list[int],
    run_id: str | None = None,
) -> int:
    """Write one audit row in the caller's transaction (every audited change: actions,
    silences, payload reveals), through the SQL function ``outbox_monitor.record_audit``,
    the audit log's only writer: it stamps the row with the database's
    ``clock_timestamp()`` (the time of the call), checks the fields and refuses a
    ``run_id`` whose rows have another actor or action; no role may INSERT into the table
    itself (README, Least-privilege database access).

    Args:
        conn: the connection of the transaction that makes the change.
        actor: who; its name is recorded.
        action: ``reap``, ``replay``, ``prune``, ``silence``, ``reveal`` …
        details: the filter or details (JSON-able; datetimes are written in ISO 8601).
        ids: the rows changed; the first ``MAX_AUDIT_IDS`` are kept, all are counted.
        run_id: ties the batches of one action together; default a new one.

    Returns:
        The audit row's id.

    Raises:
        psycopg.errors.InsufficientPrivilege: the login lacks EXECUTE on the function (the
            caller's ``db.transaction()`` maps it to ``PermissionDenied``).
    """
    row = conn.execute(
        db.compose("audit_record"),
        {
            "run_id": run_id or str(uuid.uuid4()),
            "actor": actor.name,
            "action": action,
            "table_name": db.table_name,
            "filter": Jsonb(
                {k: v.isoformat() if isinstance(v, datetime) else v for k, v in details.items()}
            ),
            "affected_count": len(ids),
            "affected_ids": ids[:MAX_AUDIT_IDS],
        },
    ).fetchone()
    return row["id"]


def _audit(
    conn, db: Database, run_id: str, actor: Identity, preview: Preview, ids: list[int]
) -> None:
    record_audit(
        conn,
        db,
        actor=actor,
        action=preview.action,
        details=preview.filter,
        ids=ids,
        run_id=run_id,
    )


def recent_audit(db: Database, *, limit: int = 50) -> list[dict[str, Any]]:
    """The newest audit rows: id, run_id, at, actor, action, table_name, filter,
    affected_count, ids_recorded and first_ids (up to 20)."""
    return db.fetch_all("audit_recent", {"limit": limit})


def previewed(preview: Preview) -> str:
    """The preview's count for a message: ``"1,234"``, or ``"≈ 1,234 (estimate)"``."""
    return f"{preview.matched:,}" if preview.exact else f"≈ {preview.matched:,} (estimate)"


def _str(value: int | None) -> str | None:
    return None if value is None else str(value)
