"""Read-side browsing of single events: search with keyset pages, detail, payload, timelines.

Nothing here changes a row. List queries never select ``payload`` (it may be large); the
detail view reads it once, pretty-printed only up to a size limit. Pages are keyset-paginated
by ``id`` descending (``id < before_id``), never by ``OFFSET``, so every page costs the same
on a large table. Ids are Python ints over the whole bigint range (callers that hand them to
JavaScript should turn them into strings: they may exceed 2^53).
"""

from datetime import datetime
from typing import Any

from outbox_monitor.actions import ReplaySelection
from outbox_monitor.db import Database
from outbox_monitor.filters import Where

STATUSES = ("pending", "processing", "done", "failed")
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
DEFAULT_TIMELINE_LIMIT = 500
DEFAULT_FAILED_ROWS_LIMIT = 200


def _check_limit(limit: int, maximum: int = MAX_PAGE_SIZE) -> int:
    if not 1 <= limit <= maximum:
        raise ValueError(f"limit must be between 1 and {maximum}, got {limit}")
    return limit


def database_now(db: Database) -> datetime:
    """The database clock (``now()``), the reference for relative time filters (SPEC §2).

    Raises:
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    return db.fetch_one("db_now")["now"]


def list_events(
    db: Database,
    *,
    event_key: str | None = None,
    aggregate_type: str | None = None,
    aggregate_id: str | None = None,
    event_type: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    before_id: int | None = None,
    limit: int = DEFAULT_PAGE_SIZE,
) -> list[dict[str, Any]]:
    """One page of events matching every given filter, newest id first.

    Args:
        event_key: exact idempotency key (served by its unique index).
        aggregate_type, aggregate_id: exact business entity; either may be given alone.
        event_type: exact value, or a LIKE pattern when it contains ``%`` (SPEC §2).
        status: one of ``STATUSES``.
        since, until: bounds on ``created_at`` (``since`` inclusive, ``until`` exclusive).
        before_id: keyset cursor — only ids strictly below it; ``None`` for the newest
            page. The next (older) page uses the last id of this one.
        limit: rows per page, 1–1000.

    Returns:
        Up to ``limit`` dict rows: id, event_type, aggregate_type, aggregate_id, event_key,
        status, attempts, available_at, locked_at, locked_by, last_error (first 200
        chars), created_at, processed_at — never ``payload``. Fewer than ``limit`` rows
        means there is no older page.

    Raises:
        ValueError: an unknown status or a limit out of range.
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    _check_limit(limit)
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    where = Where().event_type(event_type)
    if event_key:
        where.add("event_key = %(event_key)s", event_key=event_key)
    if aggregate_type:
        where.add("aggregate_type = %(aggregate_type)s", aggregate_type=aggregate_type)
    if aggregate_id:
        where.add("aggregate_id = %(aggregate_id)s", aggregate_id=aggregate_id)
    if status:
        where.add("status = %(status)s", status=status)
    where.between("created_at", since, until)
    if before_id is not None:
        where.add("id < %(before_id)s", before_id=before_id)
    return db.fetch_all("events_page", {**where.params, "limit": limit}, and_filters=where.fragment)


def get_event(
    db: Database, id: int, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> dict[str, Any] | None:
    """One event with everything the detail view shows.

    Args:
        id: the row id (any bigint).
        max_payload_bytes: largest payload (as JSON text, in bytes) returned in full and
            pretty-printed; default 256 KiB.

    Returns:
        ``None`` when no row has this id; otherwise a dict with id, event_type,
        aggregate_type, aggregate_id, event_key, status, attempts, available_at,
        locked_at, locked_by, last_error (whole), created_at, processed_at, plus
        ``payload_bytes`` (size of the JSON text), ``payload_truncated`` (bool),
        ``payload_pretty`` (indented JSON text, ``None`` when truncated) and
        ``payload_head`` (the first ``max_payload_bytes`` characters of the compact
        JSON text when truncated, else ``None``). Use ``event_payload`` for the whole.

    Raises:
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    row = db.fetch_one("event_detail", {"id": id, "max_payload_bytes": max_payload_bytes})
    if row is None:
        return None
    truncated = row["payload_pretty"] is None
    head = None
    if truncated:
        found = db.fetch_one("event_payload_head", {"id": id, "chars": max_payload_bytes})
        head = found["head"] if found else None
    return {**row, "payload_truncated": truncated, "payload_head": head}


def event_payload(db: Database, id: int) -> str | None:
    """The whole payload of one event as compact JSON text (for a download).

    Returns:
        The text, or ``None`` when no row has this id.

    Raises:
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    row = db.fetch_one("event_payload", {"id": id})
    return None if row is None else row["payload"]


def aggregate_timeline(
    db: Database, aggregate_type: str, aggregate_id: str, *, limit: int = DEFAULT_TIMELINE_LIMIT
) -> list[dict[str, Any]]:
    """Every event of one business entity in the order it happened.

    Args:
        aggregate_type, aggregate_id: the entity (exact match; served by the users'
            ``(aggregate_type, aggregate_id, created_at)`` index).
        limit: at most this many rows (1–1000), the oldest first.

    Returns:
        Dict rows id, event_type, event_key, status, attempts, created_at, processed_at,
        last_error (first 200 chars), ordered by ``created_at`` then ``id``.

    Raises:
        ValueError: a limit out of range.
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    _check_limit(limit)
    return db.fetch_all(
        "aggregate_timeline",
        {"aggregate_type": aggregate_type, "aggregate_id": aggregate_id, "limit": limit},
    )


def list_failed(
    db: Database,
    *,
    error_group: str | None = None,
    event_type: str | None = None,
    limit: int = DEFAULT_FAILED_ROWS_LIMIT,
) -> list[dict[str, Any]]:
    """Dead-lettered rows, optionally of one error group (SPEC §2), newest id first.

    The filter is the one a replay of the same selection applies
    (``ReplaySelection(error_group=…, event_type=…)``), so the rows listed are the rows
    such a replay would preview.

    Args:
        error_group: the 12-hex group id of ``metrics.error_groups``.
        event_type: exact value or LIKE pattern (SPEC §2).
        limit: at most this many rows (1–1000).

    Returns:
        Dict rows id, event_type, aggregate_type, aggregate_id, event_key, attempts,
        created_at, processed_at (time of failure), last_error (first 200 chars) and
        group_id — never ``payload``.

    Raises:
        ValueError: a limit out of range.
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    _check_limit(limit)
    where = ReplaySelection(error_group=error_group or None, event_type=event_type).where()
    return db.fetch_all("failed_rows", {**where.params, "limit": limit}, and_filters=where.fragment)
