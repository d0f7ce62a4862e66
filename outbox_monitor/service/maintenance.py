"""The scheduler's maintenance passes: reap stuck locks and prune the outbox past its
retention (SPEC §4, both optional), and delete the product's own rows past their stated
retention (``prune_own_tables``: the audit log, alert transitions, delivered notifications,
breaker transitions; docs/deploy.md, "Retention of outbox-monitor's own tables")."""

import logging

from outbox_monitor.access import SCHEDULER, Identity
from outbox_monitor.actions.prune import preview_prune
from outbox_monitor.actions.reap import budget_lines, budget_text, preview_auto_reap
from outbox_monitor.actions.run import ActionResult, apply
from outbox_monitor.store.db import Database

# Logged as the scheduler process they run in, as the other jobs are.
log = logging.getLogger("outbox_monitor.scheduler")

RETENTION_BATCH_ROWS = 5000
"""Rows deleted per statement (and transaction) by ``prune_own_tables``: each batch is a
few milliseconds through the table's time index, well under the statement timeout."""
MAX_RETENTION_BATCHES = 200
"""Batches per table per run (1,000,000 rows); the rest waits for the next run."""
OWN_RETENTION: tuple[tuple[str, str, str], ...] = (
    ("audit_log", "retention_audit_log", "audit_retention"),
    ("alert_transitions", "retention_alert_transitions", "alert_history_retention"),
    ("notifications", "retention_notifications", "alert_history_retention"),
    ("breaker_transitions", "retention_breaker_transitions", "breaker_log_retention"),
)
"""Each own table the retention job prunes: its name, its ``queries.sql`` block, and the
setting holding its retention in seconds. The samples (headline, per event type, claim plans
and statements) and ``workers_seen`` keep ``sample_retention``, pruned by the passes that
write them (``sampler``, ``health.claim_plan``, ``worker_sightings``)."""


def reap_stuck_locks(db: Database, *, actor: Identity = SCHEDULER) -> ActionResult | None:
    """The reaper job: one run of the automatic reaper (SPEC §4 reap), audited as ``actor``.

    Preview then apply, as an operator would, but bounded by the budget
    (``reap.preview_auto_reap``: at most ``auto_reap_max_rows`` and ``auto_reap_max_share``
    of the stuck rows, the oldest locks first, with the settings' lock timeout); the rest is
    left to the next run. One INFO line says how many of how many were reaped, how many are
    left, the budget, and what the sampler saw of the rows' holders (evidence only: a holder
    seen lately is reaped all the same). Nothing is applied (and no audit row written) when
    no lock is stuck.

    Returns:
        The ``ActionResult``, or ``None`` when nothing was stuck.

    Raises:
        DatabaseUnavailable and the connector's errors (``guarded`` logs them).
    """
    preview = preview_auto_reap(db)
    if not preview.matched:
        return None
    result = apply(db, preview, actor=actor)
    budget = preview.details["budget"]
    log.info(
        "reaper: reaped %d of %d stuck lock(s) of %s, %d left for the next run (%s)%s; "
        "%d dead-lettered at max attempts, run %s; %s",
        result.changed,
        budget["stuck"],
        db.table_name,
        budget["left"],
        budget_text(budget),
        f"; {result.skipped} taken no longer stuck" if result.skipped else "",
        result.dead_lettered,
        result.run_id,
        "; ".join(budget_lines(preview)[1:]),  # the holders, after what the budget took
    )
    return result


def prune_retention(db: Database, *, actor: Identity = SCHEDULER) -> ActionResult | None:
    """The pruner job: delete ``done`` rows older than ``auto_prune_done`` and ``failed``
    rows older than ``auto_prune_failed`` (SPEC §4 prune, in batches), audited as ``actor``.

    Returns:
        The ``ActionResult``, or ``None`` when neither age is set or nothing is old enough
        (no audit row then).

    Raises:
        DatabaseUnavailable and the connector's errors (``guarded`` logs them).
    """
    settings = db.settings
    if settings.auto_prune_done is None and settings.auto_prune_failed is None:
        return None
    preview = preview_prune(
        db,
        done_older_than=settings.auto_prune_done,
        failed_older_than=settings.auto_prune_failed,
    )
    if not preview.matched:
        return None
    result = apply(db, preview, actor=actor)
    log.info(
        "pruner: deleted %d row(s) of %s in %d batch(es), run %s",
        result.changed,
        db.table_name,
        result.batches,
        result.run_id,
    )
    return result


def prune_own_tables(db: Database) -> dict[str, int]:
    """The retention job: delete the product's own rows past their retention
    (``OWN_RETENTION``), oldest first, in batches of ``RETENTION_BATCH_ROWS``, each batch one
    statement in its own transaction under the statement timeout, at most
    ``MAX_RETENTION_BATCHES`` per table. The audit log and the breaker transitions of
    ``db``'s outbox table only (the audit log through ``outbox_monitor.prune_audit_log``,
    migration 016: no role may DELETE from it); the alert history of every rule.

    Returns:
        Rows deleted per table name, e.g. ``{"audit_log": 3, "alert_transitions": 0, …}``.

    Raises:
        QueryTimeout, DatabaseUnavailable and the connector's errors (``guarded`` logs them,
        ``/healthz`` shows them); the batches done before stay deleted.
    """
    params = {
        "table_name": db.table_name,
        "table_regclass": db.table_regclass,
        "batch": RETENTION_BATCH_ROWS,
    }
    deleted: dict[str, int] = {}
    for table, block, setting in OWN_RETENTION:
        deleted[table] = 0
        for _ in range(MAX_RETENTION_BATCHES):
            retention = getattr(db.settings, setting)
            with db.transaction() as conn:
                count = conn.execute(db.compose(block), {**params, "retention": retention})
                count = count.fetchone()["deleted"]
            deleted[table] += count
            if count < RETENTION_BATCH_ROWS:
                break
    if any(deleted.values()):
        log.info(
            "retention: deleted %s past their retention",
            ", ".join(f"{n} row(s) of {table}" for table, n in deleted.items() if n),
        )
    return deleted
