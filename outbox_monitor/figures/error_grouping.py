"""Error groups of SPEC §2: failed rows grouped by event type and normalised ``last_error``,
read from the cache the SQL function ``outbox_monitor.refresh_error_groups`` keeps up to date
(migration 006), or computed from every failed row when this login cannot refresh it; and the
retry error groups: the retrying rows grouped the same way, computed live."""

import logging
from typing import Any

from outbox_monitor.errors import PermissionDenied, ReadOnlyDatabase, SchemaNotInitialised
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

ERROR_GROUPS_BATCH = 10_000
"""Failed rows one ``error_groups_refresh`` call normalises at most (≈ 0.3 s of regexes
for stack traces of ≈ 900 characters; benchmarks/error_groups.py)."""

RETRY_ERROR_GROUPS_LIMIT = 20
"""Retry error groups ``status --json`` lists at most, biggest first (compare their rows with
``retrying`` to tell whether any were left out)."""

# Error groups log as the module they had before they had one of their own: log filters and
# the tests key on the logger name.
log = logging.getLogger("outbox_monitor.metrics")
_warned_exact_error_groups: set[str] = set()  # tables warned about, once per process


def error_groups(
    db: Database, *, event_type: str | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    """Failed rows grouped by event type and normalised ``last_error`` (SPEC §2).

    Each failed row is normalised once: ``outbox_monitor.refresh_error_groups`` (migration
    006) keeps every row's fingerprint and the groups' counts in the ``outbox_monitor``
    schema, and a refresh normalises only the dead letters that are new since the last
    one (a replay, delete or prune recounts from the cache). A login that may not execute
    that function (the grants of an older ``--print-grants``), or whose transactions are
    read-only (``default_transaction_read_only``, a standby), gets the same groups
    computed from every failed row, as before the cache, and a WARNING once per process
    and table.

    Returns:
        Rows ``{group_id (12 hex), event_type, fingerprint, failed, first_seen,
        last_seen, sample_error, groups_total, failed_total}`` (``sample_error``: the
        ``last_error`` of the group's largest id; ``groups_total`` and ``failed_total``:
        every matching group and its failed rows, beyond the ``limit`` listed), biggest
        group first, at most ``limit``.

    Raises:
        QueryTimeout, DatabaseUnavailable: from the connector.
    """
    where = Where().event_type(event_type)
    params = {"limit": limit, "table_regclass": db.table_name, **where.params}
    try:
        refresh_error_groups(db)
    except (PermissionDenied, SchemaNotInitialised, ReadOnlyDatabase) as error:
        if db.table_name not in _warned_exact_error_groups:
            _warned_exact_error_groups.add(db.table_name)
            log.warning(
                "error groups of %s are computed from every failed row (slow with many dead "
                "letters): outbox_monitor.refresh_error_groups failed: %s. Give this login "
                "EXECUTE on it (run the output of `outbox-monitor init-db --print-grants` "
                "again) and a read-write connection to the primary; the function reads only "
                "a table owned by the role that ran `init-db`, so run it as the table's owner.",
                db.table_name,
                str(error).splitlines()[0],
            )
        return db.fetch_all("error_groups_exact", params, and_filters=where.fragment)
    return db.fetch_all("error_groups", params, and_filters=where.fragment)


def refresh_error_groups(db: Database, *, batch: int = ERROR_GROUPS_BATCH) -> int:
    """Bring the cached error groups of the outbox table up to date (SPEC §2 error groups).

    Calls ``outbox_monitor.refresh_error_groups`` until it reports them current; each call
    is one statement under the statement timeout and normalises at most ``batch`` rows,
    so a first fill of many dead letters takes several calls (their progress is kept).

    Returns:
        The number of calls made (1 when at most ``batch`` rows were new).

    Raises:
        PermissionDenied: the login may not execute the function (or SELECT the table).
        SchemaNotInitialised: migration 006 is not applied (run ``init-db``).
        QueryTimeout, DatabaseUnavailable: from the connector.
    """
    calls = 1
    params = {"table_regclass": db.table_name, "batch": batch}
    while not db.fetch_one("error_groups_refresh", params)["done"]:
        calls += 1
    return calls


def retry_error_groups(
    db: Database, *, event_type: str | None = None, limit: int = RETRY_ERROR_GROUPS_LIMIT
) -> list[dict[str, Any]]:
    """The retrying rows (``pending`` with ``attempts > 0``, SPEC §2 retrying) grouped exactly
    like error groups: by event type and ``outbox_monitor.normalize_error(last_error)``, with
    the same group id (``left(md5(event_type || ':' || fingerprint), 12)``), so a retry group
    and the dead letters it turns into share an id. What a failing downstream answers before
    anything is dead-lettered.

    Exact and live: one grouped statement (named query ``retry_error_groups``) normalises
    every retrying row of the filter now, under the statement timeout — the rows retrying are
    bounded by the backlog, and ``status --json`` runs it once. It is not cached: the
    dashboard, which refreshes, is to read them from a cache kept incrementally as error
    groups are (issue 30), not from this function.

    A retry keeps no time of its failure (``fail`` clears ``processed_at`` and sets
    ``available_at`` to the failure plus the backoff; a reap sets it to now), so a group has
    no ``last_seen``: it has the times its rows are due.

    Args:
        event_type: the SPEC §2 event-type filter (exact, or LIKE with ``%``).
        limit: groups at most (default ``RETRY_ERROR_GROUPS_LIMIT``, 20).

    Returns:
        Rows ``{group_id (12 hex), event_type, fingerprint, retrying (rows), due_now (of
        them due now), oldest_created_at, last_due_at (the latest available_at of its rows),
        sample_error (the last_error of the group's largest id, at most 2,000 characters)}``,
        biggest group first, then the latest due; the
        fingerprint and sample redacted by the database's settings
        (``OUTBOX_MONITOR_REDACT_*``).

    Raises:
        QueryTimeout, DatabaseUnavailable: from the connector; SchemaNotInitialised when
        ``outbox_monitor.normalize_error`` is missing (run ``init-db``).
    """
    where = Where().event_type(event_type)
    groups = db.fetch_all(
        "retry_error_groups", {"limit": limit, **where.params}, and_filters=where.fragment
    )
    return redactor_for(db.settings).redact_rows(groups, ("fingerprint", "sample_error"))
