"""Read-side browsing of single events: search with keyset pages, detail, payload, timelines.

Nothing here changes a row. List queries never select ``payload`` (it may be large); the
detail view reads it once, pretty-printed only up to a size limit. Pages are keyset-paginated
by ``id`` descending (``id < before_id``), never by ``OFFSET``, so every page costs the same
on a large table. Ids are Python ints over the whole bigint range (callers that hand them to
JavaScript should turn them into strings: they may exceed 2^53).

Payload privacy (docs/security.md): what is shown or exported goes through a
``redaction.Redactor`` (``redact_event``, ``redacted_payload``, ``events_csv``); only
``reveal_payload`` returns a raw payload, to an operator, and writes an audit row for it
(the one write here; outbox rows are never changed).
"""

import csv
import io
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.replay import ReplaySelection
from outbox_monitor.privacy.redaction import Redactor
from outbox_monitor.store.audit import note_read, require_audited
from outbox_monitor.store.db import Database
from outbox_monitor.store.db import database_now as database_now
from outbox_monitor.store.filters import Where

STATUSES = ("pending", "processing", "done", "failed")
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
DEFAULT_TIMELINE_LIMIT = 500
DEFAULT_FAILED_ROWS_LIMIT = 200
MAX_EXPORT_ROWS = 10_000
EXPORT_COLUMNS = (
    "id",
    "event_type",
    "aggregate_type",
    "aggregate_id",
    "event_key",
    "status",
    "attempts",
    "created_at",
    "available_at",
    "locked_at",
    "locked_by",
    "processed_at",
    "last_error",
    "payload",
)
"""Columns of ``events_csv``, in order (the header row)."""
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _check_limit(limit: int, maximum: int = MAX_PAGE_SIZE) -> int:
    if not 1 <= limit <= maximum:
        raise ValueError(f"limit must be between 1 and {maximum}, got {limit}")
    return limit


@dataclass(frozen=True)
class EventFilter:
    """Which events a search matches: every field given must hold (``None``: any).

    Attributes:
        event_key: exact idempotency key (served by its unique index).
        aggregate_type, aggregate_id: exact business entity; either may be given alone.
        event_type: exact value, or a LIKE pattern when it contains ``%`` (SPEC §2).
        status: one of ``STATUSES``.
        since, until: bounds on ``created_at`` (``since`` inclusive, ``until`` exclusive).
        before_id: keyset cursor: only ids strictly below it; ``None`` for the newest page.
            The next (older) page uses the last id of this one.

    Raises:
        ValueError: an unknown status (at construction).
    """

    event_key: str | None = None
    aggregate_type: str | None = None
    aggregate_id: str | None = None
    event_type: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before_id: int | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")

    def where(self) -> Where:
        """The filter as SQL conditions and their bound parameters."""
        where = Where().event_type(self.event_type)
        if self.event_key:
            where.add("event_key = %(event_key)s", event_key=self.event_key)
        if self.aggregate_type:
            where.add("aggregate_type = %(aggregate_type)s", aggregate_type=self.aggregate_type)
        if self.aggregate_id:
            where.add("aggregate_id = %(aggregate_id)s", aggregate_id=self.aggregate_id)
        if self.status:
            where.add("status = %(status)s", status=self.status)
        where.between("created_at", self.since, self.until)
        if self.before_id is not None:
            where.add("id < %(before_id)s", before_id=self.before_id)
        return where


def list_events(
    db: Database, search: EventFilter = EventFilter(), *, limit: int = DEFAULT_PAGE_SIZE
) -> list[dict[str, Any]]:
    """One page of the events ``search`` matches, newest id first.

    Args:
        search: the filters and the keyset cursor (``EventFilter``).
        limit: rows per page, 1–1000.

    Returns:
        Up to ``limit`` dict rows: id, event_type, aggregate_type, aggregate_id, event_key,
        status, attempts, available_at, locked_at, locked_by, last_error (first 2,000
        chars: the tables cut it to ``redaction.ERROR_HEAD_CHARS`` after redaction),
        created_at, processed_at — never ``payload``. Fewer than ``limit`` rows means there
        is no older page.

    Raises:
        ValueError: a limit out of range.
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    _check_limit(limit)
    where = search.where()
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
        last_error (first 2,000 chars), ordered by ``created_at`` then ``id``.

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
        error_group: the 12-hex group id of ``error_grouping.error_groups``.
        event_type: exact value or LIKE pattern (SPEC §2).
        limit: at most this many rows (1–1000).

    Returns:
        Dict rows id, event_type, aggregate_type, aggregate_id, event_key, attempts,
        created_at, processed_at (time of failure), last_error (first 2,000 chars) and
        group_id — never ``payload``.

    Raises:
        ValueError: a limit out of range.
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    _check_limit(limit)
    where = ReplaySelection(error_group=error_group or None, event_type=event_type).where()
    return db.fetch_all("failed_rows", {**where.params, "limit": limit}, and_filters=where.fragment)


# ---------------------------------------------------------------- payload privacy (issue 4)


def redact_event(event: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A copy of a ``get_event`` result as everyone sees it by default (docs/security.md).

    ``payload_pretty`` and ``payload_head`` go through ``Redactor.redact_json_text`` (a
    head cut at 256 KiB is redacted as far as it goes), ``last_error`` through
    ``Redactor.redact_text``; the other fields are kept. The database is not changed.
    """
    return {
        **event,
        "payload_pretty": redactor.redact_json_text(event.get("payload_pretty")),
        "payload_head": redactor.redact_json_text(event.get("payload_head")),
        "last_error": redactor.redact_text(event.get("last_error")),
    }


def redacted_payload(db: Database, id: int, redactor: Redactor) -> str | None:
    """The whole payload of one event as compact JSON text, redacted (the download of
    someone who has not revealed it).

    Returns:
        The text, or ``None`` when no row has this id.

    Raises:
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    return redactor.redact_json_text(event_payload(db, id))


@dataclass(frozen=True)
class RevealedPayload:
    """One event's raw payload and last_error, read by an audited reveal.

    ``payload``: the whole payload as compact JSON text; ``payload_pretty``: indented JSON
    text when it is at most the size limit (else ``None``); ``payload_bytes``: size of the
    JSON text; ``audit_id``: the audit row written in the same transaction; ``actor``: the
    name it records.
    """

    id: int
    payload: str
    payload_pretty: str | None
    payload_bytes: int
    last_error: str | None
    audit_id: int
    actor: str


def reveal_payload(
    db: Database,
    id: int,
    identity: Identity,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> RevealedPayload | None:
    """Read one event's raw (unredacted) payload and last_error, and audit that read.

    The role is checked first; then one transaction reads the row and writes an audit
    row (action ``reveal``, ``affected_ids`` ``[id]``, actor ``identity.name``) through the
    outbox's audited ``note`` writer, so a reveal the audit log cannot record (a login
    without the operator's grants) shows nothing.

    Args:
        db: the Database of actions (``OUTBOX_MONITOR_ACTIONS_DSN``): it writes the audit
            log.
        id: the event's id (any bigint).
        identity: who asks; must hold the ``operator`` role.
        max_payload_bytes: largest payload also returned indented; default 256 KiB.

    Returns:
        The raw payload, or ``None`` when no row has this id (nothing is audited then).

    Raises:
        AccessDenied: ``identity`` is not an operator; nothing is read or audited.
        PermissionDenied: the actions role may not read the outbox or write the audit log.
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    require_audited(db, identity, Role.operator, "reveal raw payloads", "reveal")
    with db.transaction() as conn:
        row = conn.execute(
            db.compose("event_reveal"), {"id": id, "max_payload_bytes": max_payload_bytes}
        ).fetchone()
        if row is None:
            return None
        audit_id = note_read(
            conn, db, actor=identity, action="reveal", details={"id": str(id)}, ids=[id]
        )
    return RevealedPayload(
        id=row["id"],
        payload=row["payload"],
        payload_pretty=row["payload_pretty"],
        payload_bytes=row["payload_bytes"],
        last_error=row["last_error"],
        audit_id=audit_id,
        actor=identity.name,
    )


def _csv_cell(value: Any) -> Any:
    """A CSV cell: instants as ISO 8601, ``None`` as empty, and text that a spreadsheet
    would run as a formula (starting with ``=`` ``+`` ``-`` ``@``, tab, CR, or a form of
    them that NFKC folds to one: full-width ``＝ ＋ － ＠``, small ``﹦ ﹢ ﹣ ﹫``) prefixed
    with ``'``."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str) and unicodedata.normalize("NFKC", value[:1]).startswith(
        _FORMULA_STARTS
    ):
        return "'" + value
    return value


def events_csv(
    db: Database,
    redactor: Redactor,
    search: EventFilter = EventFilter(),
    *,
    limit: int = DEFAULT_PAGE_SIZE,
) -> str:
    """The events of a ``list_events`` search as CSV text, payload included, redacted.

    Args:
        redactor: applied to every row: ``payload`` (compact JSON text) through
            ``redact_json_text``, ``last_error`` (whole) through ``redact_text``. Raw
            payloads are never exported.
        search: the events to export, as ``list_events`` takes them.
        limit: rows, 1–10,000 (the Events page exports the page it shows).

    Returns:
        CSV (RFC 4180, CRLF line ends) with the header ``EXPORT_COLUMNS`` then one line
        per event, newest id first; instants in ISO 8601, empty cells for NULL; text
        cells that a spreadsheet would run as a formula start with ``'``.

    Raises:
        ValueError: a limit out of range.
        DatabaseUnavailable, QueryTimeout: from the connector.
    """
    _check_limit(limit, MAX_EXPORT_ROWS)
    where = search.where()
    rows = db.fetch_all(
        "events_export", {**where.params, "limit": limit}, and_filters=where.fragment
    )
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(EXPORT_COLUMNS)
    for row in rows:
        shown = {
            **row,
            "id": str(row["id"]),
            "last_error": redactor.redact_text(row["last_error"]),
            "payload": redactor.redact_json_text(row["payload"]),
        }
        # JSON text cannot hold a formula ("-5" is a number): the payload is kept as it is
        writer.writerow(
            [shown[n] if n == "payload" else _csv_cell(shown[n]) for n in EXPORT_COLUMNS]
        )
    return out.getvalue()
