"""Error groups of SPEC §2: failed rows grouped by event type and normalised ``last_error``,
read from the cache the SQL function ``outbox_monitor.refresh_error_groups`` keeps up to date
(migration 006), or computed from every failed row when this login cannot refresh it; and the
retry error groups: the retrying rows grouped the same way, with the fingerprints of the
retrying rows cached and the groups counted by ``outbox_monitor.refresh_retry_error_groups``
(migrations 025, 026)."""

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.errors import (
    PermissionDenied,
    QueryTimeout,
    ReadOnlyDatabase,
    SchemaNotInitialised,
)
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

ERROR_GROUPS_BATCH = 10_000
"""Failed rows one ``error_groups_refresh`` call normalises at most (≈ 0.3 s of regexes
for stack traces of ≈ 900 characters; benchmarks/error_groups.py)."""

RETRY_GROUPS_MAX_AGE_SECONDS = 60.0
"""How old the counted retry error groups may be when a page or a message reads them
(seconds): older, the reader counts them again (one pass over the backlog); younger, it
reads the counts (one row per group). The scheduler's sampler counts them every
``sample_interval`` (15 s by default), so with a scheduler a page only reads them."""

RETRY_ERROR_GROUPS_LIMIT = 20
"""Retry error groups ``status --json`` lists at most, biggest first (compare their rows with
``retrying`` to tell whether any were left out)."""

# Error groups log as the module they had before they had one of their own: log filters and
# the tests key on the logger name.
log = logging.getLogger("outbox_monitor.metrics")
_warned_exact_error_groups: set[str] = set()  # tables warned about, once per process
_warned_live_retry_groups: set[str] = set()  # the same for the retry error groups


@dataclass(frozen=True)
class _RecountFailure:
    """A count of the retry error groups that timed out: when (``time.monotonic()``), its
    error's first line, and the time of the counts read instead."""

    at: float
    message: str
    counted_at: datetime


_recount_failed: dict[tuple[str, str], _RecountFailure] = {}
"""Per database and table, the last count of its retry error groups that timed out in this
process: a page reads the last counts for ``max_age`` seconds after, unless counted since."""


def _still_failing(
    db: Database, params: dict[str, Any], key: tuple[str, str], max_age: float
) -> _RecountFailure | None:
    """The failure a page reads the last counts after (``_recount_failed``): less than
    ``max_age`` seconds old and no count since (the sampler's or ``status``'s); else
    ``None`` (forgotten: the page counts as usual)."""
    failure = _recount_failed.get(key) if max_age > 0 else None
    if failure is None:
        return None
    last = db.fetch_one("retry_error_groups_counted_at", params)
    fresh = last is not None and last["refreshed_at"] > failure.counted_at
    if time.monotonic() - failure.at < max_age and last is not None and not fresh:
        return failure
    _recount_failed.pop(key, None)  # pages of several sessions: another may have popped it
    return None


_UNCACHED = (PermissionDenied, SchemaNotInitialised, ReadOnlyDatabase)
"""What a login that may not bring a cache current gets from its refresh function."""


def _warn_uncached(
    db: Database, warned: set[str], what: str, rows: str, function: str, error: Exception
) -> None:
    """The WARNING, once per process and table (``warned``), that ``what`` are computed from
    every one of ``rows`` because ``function`` failed with ``error``."""
    if db.table_name in warned:
        return
    warned.add(db.table_name)
    log.warning(
        "%s of %s are computed from every %s: outbox_monitor.%s failed: %s. Give this login "
        "EXECUTE on it (run the output of `outbox-monitor init-db --print-grants` again) and "
        "a read-write connection to the primary; the function reads only a table owned by "
        "the role that ran `init-db`, so run it as the table's owner.",
        what,
        db.table_name,
        rows,
        function,
        str(error).splitlines()[0],
    )


_refreshed_at: dict[tuple[str, str], float] = {}
"""Per database and table, when this process last brought its error groups current
(``time.monotonic()``): a reader with a ``max_age`` reads them without a refresh until then."""


def error_groups(
    db: Database, *, event_type: str | None = None, limit: int = 200, max_age: float = 0.0
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

    Each call brings the cache current first (a pass over the failed rows' index entries:
    ≈ 30,000 buffers at 100,000 dead letters), unless ``max_age`` is above 0 and this process
    did so less than ``max_age`` seconds ago: the Overview's headline and firing alerts, which
    read the groups of each troubled type at every refresh, pass 60 s (issue 32 item 3); the
    Dead letters page and actions pass nothing (0: current).

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
    key = (db.settings.dsn or "", db.table_name)
    try:
        last = _refreshed_at.get(key)
        if max_age <= 0 or last is None or time.monotonic() - last >= max_age:
            refresh_error_groups(db)
            _refreshed_at[key] = time.monotonic()
    except _UNCACHED as error:
        _warn_uncached(
            db,
            _warned_exact_error_groups,
            "error groups",
            "failed row (slow with many dead letters)",
            "refresh_error_groups",
            error,
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


RETRY_GROUP_KEYS = (
    "group_id",
    "event_type",
    "fingerprint",
    "retrying",
    "due_now",
    "oldest_created_at",
    "last_due_at",
    "sample_error",
)
"""The keys of a retry error group (``retry_error_groups``; ``status --json``)."""


@dataclass(frozen=True)
class RetryGroups:
    """Retry error groups with the totals of every group matching the filter.

    ``groups``: ``retry_error_groups``'s rows (at most the limit, biggest first);
    ``groups_total`` and ``retrying_total``: every matching group and its rows (the
    ``retrying`` of the filter when they were counted); ``cached``: false when this login
    could not bring the cache current (every row normalised now); ``counted_at``: when an
    earlier call counted the groups read (the database's clock; ``None`` when this call
    counted them or computed them live: as fresh as the read); ``recount_failed``: why
    counting them again failed (the first line of the statement timeout), the last counts
    read instead.
    """

    groups: list[dict[str, Any]]
    groups_total: int
    retrying_total: int
    cached: bool
    counted_at: datetime | None = None
    recount_failed: str | None = None


def retry_groups(
    db: Database,
    *,
    event_type: str | None = None,
    limit: int = RETRY_ERROR_GROUPS_LIMIT,
    max_age: float = RETRY_GROUPS_MAX_AGE_SECONDS,
) -> RetryGroups:
    """The retry error groups of ``retry_error_groups`` with their totals (``RetryGroups``):
    what the Overview lists and says in its header (issue 30 items 1 and 8).

    Counts them again when the last count is ``max_age`` seconds old or older
    (``refresh_retry_error_groups``), then reads the counts (named query
    ``retry_error_groups_cached``: one row per group, and each listed group's sample row by
    id — never the backlog). Counting reads the table's pending rows once, through the
    users' claim index ``(status, available_at, created_at)`` and each one's heap row
    (``attempts`` and ``last_error`` are in no index): bounded by the backlog, never the
    table's history. Only a retrying row whose ``(id, attempts,
    hashtextextended(last_error))`` is not cached is normalised (new, failed again, or its
    ``last_error`` rewritten in place). Readers never wait for each other: while one
    session counts, the others read the last counts. The groups are exact for the instant
    they were counted (``counted_at``); ``max_age=0`` counts them now (``status --json``).
    With ``max_age`` above 0 (a page) a read makes one call when there are counts to read:
    after a storm larger than a batch it normalises one batch (progress kept) and reads the
    last counts, their time in ``counted_at``; the sampler, or the next reads, finish the
    count. When counting them again hits the statement timeout and ``max_age`` is above 0 (a
    page), the last counts are read (``recount_failed`` says why; a WARNING is logged), and
    for ``max_age`` seconds this process reads them without trying again.

    A login that may not execute ``outbox_monitor.refresh_retry_error_groups`` (grants of an
    older ``--print-grants``), or whose transactions are read-only (a standby), gets the same
    groups computed live, every retrying row normalised (named query ``retry_error_groups``),
    and a WARNING once per process and table, as ``error_groups`` does.

    Args:
        event_type: the SPEC §2 event-type filter (exact, or LIKE with ``%``).
        limit: groups at most (default ``RETRY_ERROR_GROUPS_LIMIT``, 20).
        max_age: seconds; counts at least this old are taken again first (default
            ``RETRY_GROUPS_MAX_AGE_SECONDS``; 0: always).

    Returns:
        ``RetryGroups``; each group's texts redacted by the database's settings.

    Raises:
        QueryTimeout: counting them timed out with ``max_age`` 0 or before any count, or
            reading them did; DatabaseUnavailable: from the connector; SchemaNotInitialised
            when ``outbox_monitor.normalize_error`` is missing (run ``init-db``).
    """
    where = Where().event_type(event_type)
    params = {"limit": limit, "table_regclass": db.table_name, **where.params}
    name, cached = "retry_error_groups_cached", True
    key = (db.settings.dsn or "", db.table_name)
    failed = _still_failing(db, params, key, max_age)
    try:
        if failed is not None:  # the last count timed out less than max_age ago: read
            counted_at, failed_text = failed.counted_at, failed.message
        else:
            step = _refresh_retry_error_groups(
                db, max_age=max_age, batch=ERROR_GROUPS_BATCH, once=max_age > 0
            )
            counted_at, failed_text = (None if step["counted"] else step["refreshed_at"]), None
    except _UNCACHED as error:
        _warn_live_retry_groups(db, error)
        name, cached, counted_at, failed_text = "retry_error_groups", False, None, None
    except QueryTimeout as error:
        last = db.fetch_one("retry_error_groups_counted_at", params) if max_age > 0 else None
        if last is None:  # counted now was asked for, or there are no counts to read
            raise
        counted_at, failed_text = last["refreshed_at"], str(error).splitlines()[0]
        _recount_failed[key] = _RecountFailure(time.monotonic(), failed_text, counted_at)
        log.warning(
            "retry error groups of %s: counting them again failed: %s; the counts of %s are "
            "read instead for %.0f s (raise OUTBOX_MONITOR_STATEMENT_TIMEOUT)",
            db.table_name,
            failed_text,
            counted_at.isoformat(),
            max_age,
        )
    rows = db.fetch_all(name, params, and_filters=where.fragment)
    if cached and rows and counted_at is not None:
        counted_at = rows[0]["counted_at"]  # the counts read: another session's, if newer
    groups = [{key: row[key] for key in RETRY_GROUP_KEYS} for row in rows]
    return RetryGroups(
        groups=redactor_for(db.settings).redact_rows(groups, ("fingerprint", "sample_error")),
        groups_total=rows[0]["groups_total"] if rows else 0,
        retrying_total=rows[0]["retrying_total"] if rows else 0,
        cached=cached,
        counted_at=counted_at,
        recount_failed=failed_text,
    )


def count_retry_error_groups(
    db: Database, *, max_age: float = 0.0, batch: int = ERROR_GROUPS_BATCH
) -> datetime | None:
    """Bring the retry error groups' cache and counts current (SPEC §2 retry error groups;
    migrations 025, 026) unless they are younger than ``max_age`` seconds.

    Calls ``outbox_monitor.refresh_retry_error_groups`` until it reports nothing left to
    normalise. Each call is one statement under the statement timeout: it reads the pending
    rows (the users' claim index and their heap rows), forgets the cached rows no longer
    retrying (acked, claimed, dead-lettered, replayed, deleted), normalises at most
    ``batch`` retrying rows whose id, attempts or ``last_error`` are not cached yet, and,
    once none is left, stores the groups' counts with their time. With ``max_age`` above 0
    it returns at once when the counts are younger, or while another session counts them.

    Returns:
        When the counts were taken (the database's ``statement_timestamp()``); ``None`` when
        never (another session is taking the first ones).

    Raises:
        PermissionDenied: the login may not execute the function (or SELECT the table).
        SchemaNotInitialised: migration 026 is not applied (run ``init-db``).
        ReadOnlyDatabase: a read-only transaction (a standby).
        QueryTimeout, DatabaseUnavailable: from the connector.
    """
    return _refresh_retry_error_groups(db, max_age=max_age, batch=batch)["refreshed_at"]


def refresh_retry_error_groups(db: Database, *, batch: int = ERROR_GROUPS_BATCH) -> int:
    """Count the retry error groups now (``count_retry_error_groups`` with ``max_age=0``).

    Returns:
        The rows normalised over all calls (0 when nothing changed since the last refresh).

    Raises:
        As ``count_retry_error_groups``.
    """
    return _refresh_retry_error_groups(db, max_age=0.0, batch=batch)["normalised"]


def _refresh_retry_error_groups(
    db: Database, *, max_age: float, batch: int, once: bool = False
) -> dict[str, Any]:
    """Call ``retry_error_groups_refresh`` until done (with ``once``, only until there are
    counts to read: a page's one step); the last step, its rows summed."""
    params = {"table_regclass": db.table_name, "batch": batch, "max_age_seconds": max_age}
    normalised = 0
    while True:
        step = db.fetch_one("retry_error_groups_refresh", params)
        normalised += step["normalised"]
        if step["done"] or (once and step["refreshed_at"] is not None):
            return {**step, "normalised": normalised}


def _warn_live_retry_groups(db: Database, error: Exception) -> None:
    """``_warn_uncached`` for the retry error groups."""
    _warn_uncached(
        db,
        _warned_live_retry_groups,
        "retry error groups",
        "retrying row (slow in a retry storm)",
        "refresh_retry_error_groups",
        error,
    )


def keep_retry_error_groups_counted(db: Database, *, max_age: float) -> datetime | None:
    """The scheduler's side of ``count_retry_error_groups``: count them when ``max_age``
    seconds old, so a page only reads them; a login that may not (older grants, a standby)
    gets the WARNING once and ``None`` (the pages then compute them live); a count that hits
    the statement timeout, a WARNING at each pass and ``None`` (the pages read the last
    counts with their age, ``retry_groups``).

    Raises:
        DatabaseUnavailable: from the connector.
    """
    try:
        return count_retry_error_groups(db, max_age=max_age)
    except _UNCACHED as error:
        _warn_live_retry_groups(db, error)
    except QueryTimeout as error:
        log.warning(
            "retry error groups of %s not counted: %s (raise OUTBOX_MONITOR_STATEMENT_TIMEOUT)",
            db.table_name,
            str(error).splitlines()[0],
        )
    return None


def retry_error_groups(
    db: Database,
    *,
    event_type: str | None = None,
    limit: int = RETRY_ERROR_GROUPS_LIMIT,
    max_age: float = RETRY_GROUPS_MAX_AGE_SECONDS,
) -> list[dict[str, Any]]:
    """The retrying rows (``pending`` with ``attempts > 0``, SPEC §2 retrying) grouped exactly
    like error groups: by event type and ``outbox_monitor.normalize_error(last_error)``, with
    the same group id (``left(md5(event_type || ':' || fingerprint), 12)``), so a retry group
    and the dead letters it turns into share an id. What a failing downstream answers before
    anything is dead-lettered.

    Exact for the instant they were counted: ``retry_groups``' groups, counted again when
    the last count is ``max_age`` seconds old (only rows new or changed since the last count
    are normalised; ``max_age=0``: counted now, as ``status --json`` does), or computed live
    for a login that may not count them (see ``retry_groups``: what each statement reads).

    A retry keeps no time of its failure (``fail`` clears ``processed_at`` and sets
    ``available_at`` to the failure plus the backoff; a reap sets it to now), so a group has
    no ``last_seen``: it has the times its rows are due.

    Args:
        event_type: the SPEC §2 event-type filter (exact, or LIKE with ``%``).
        limit: groups at most (default ``RETRY_ERROR_GROUPS_LIMIT``, 20).
        max_age: seconds (``retry_groups``).

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
    return retry_groups(db, event_type=event_type, limit=limit, max_age=max_age).groups
