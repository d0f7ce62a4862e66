"""The audit log of every audited change (actions, silences, payload reveals): the fields of an
audit row, the rows of reads and refusals through the outbox's audited writers
(``store.audited_writers``), the owner's own rows, and the newest rows.

Changes (reap, replay, prune) write their audit rows inside the outbox's audited writer that
makes them (``actions.run``); no login but the schema's owner may call the audit log's
internal writer ``outbox_monitor.record_audit``."""

import logging
import uuid
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outbox_monitor.access import Identity, Role, require
from outbox_monitor.errors import AccessDenied, OutboxMonitorError
from outbox_monitor.store.audited_writers import writer
from outbox_monitor.store.db import Database

MAX_AUDIT_IDS = 1000

# Refusals log as the actions do: log filters key on the logger name.
log = logging.getLogger("outbox_monitor.actions")


def audit_fields(
    actor: Identity, details: dict[str, Any], run_id: str | None = None
) -> dict[str, Any]:
    """The parameters every audited writer takes: ``run_id`` (default a new one), ``actor``
    (the person named: a claim) and ``filter`` (``details`` as JSON, datetimes in ISO 8601)."""
    return {
        "run_id": run_id or str(uuid.uuid4()),
        "actor": actor.name,
        "filter": Jsonb(
            {k: v.isoformat() if isinstance(v, datetime) else v for k, v in details.items()}
        ),
    }


def note_read(
    conn: Any,
    db: Database,
    *,
    actor: Identity,
    action: str,
    details: dict[str, Any],
    ids: list[int],
) -> int:
    """Write the audit row of a read (``reveal``, ``payload search``) in the caller's
    transaction, through the outbox's audited ``note`` writer, which accepts reads only and
    stamps the time, the login and the client address.

    Args:
        conn: the connection of the transaction that reads.
        actor: who; its name is recorded.
        action: ``reveal`` or ``payload search``.
        details: the filter (JSON-able; datetimes are written in ISO 8601).
        ids: the rows read; the first ``MAX_AUDIT_IDS`` are kept, all are counted.

    Returns:
        The audit row's id.

    Raises:
        psycopg.errors.InsufficientPrivilege: the login lacks EXECUTE on the writer (the
            caller's ``db.transaction()`` maps it to ``PermissionDenied``).
    """
    statement = db.compose("audit_note", writer=writer(db.settings, "note"))
    row = conn.execute(
        statement, {**audit_fields(actor, details), "action": action, "affected_ids": ids}
    ).fetchone()
    return row["id"]


def record_audit(
    conn: Any,
    db: Database,
    *,
    actor: Identity,
    action: str,
    details: dict[str, Any],
    ids: list[int],
    run_id: str | None = None,
    count: int | None = None,
) -> int:
    """Write one audit row in the caller's transaction through the internal
    ``outbox_monitor.record_audit``, which only the schema's owner may call (a prune run by
    the owner, detaching and dropping whole partitions, ``actions.partition_detach``).

    Args:
        conn: the connection of the transaction that makes the change.
        actor: who; its name is recorded.
        action: ``prune`` …
        details: the filter or details (JSON-able; datetimes are written in ISO 8601).
        ids: the rows changed; the first ``MAX_AUDIT_IDS`` are kept, all are counted.
        run_id: ties the batches of one action together; default a new one.
        count: how many rows changed when ``ids`` holds only the first of them (a partition
            a prune dropped whole); default ``len(ids)``.

    Returns:
        The audit row's id.

    Raises:
        psycopg.errors.InsufficientPrivilege: the login is not the owner (the caller's
            ``db.transaction()`` maps it to ``PermissionDenied``).
    """
    row = conn.execute(
        db.compose("audit_record"),
        {
            **audit_fields(actor, details, run_id),
            "action": action,
            "table_name": db.table_name,
            "affected_count": len(ids) if count is None else count,
            "affected_ids": ids[:MAX_AUDIT_IDS],
        },
    ).fetchone()
    return row["id"]


def recent_audit(db: Database, *, limit: int = 50) -> list[dict[str, Any]]:
    """The newest audit rows of ``db``'s outbox table (not another outbox's of the database):
    id, run_id, at, actor, action, table_name, filter, affected_count, ids_recorded,
    first_ids (up to 20), db_login (the database login that wrote it; ``None`` before
    migration 019) and client_addr (its address; ``None`` over a Unix socket)."""
    return db.fetch_all("audit_recent", {"limit": limit, "table_name": db.table_name})


def require_audited(db: Database, actor: Identity, role: Role, what: str, action: str) -> None:
    """``access.require``, and when it refuses: a WARNING log line (who, the outbox, the
    action) and a rate-limited ``refused`` audit row through the outbox's ``refused`` writer
    (one per person and action a minute, 30 a minute per outbox; the row names the login
    that wrote it: the dashboard's actions login, never the viewer's). A row that cannot be
    written (a login without the operator's grants, the database down) is said on the same
    WARNING line; the refusal stands either way.

    Args:
        db: the Database of actions of the outbox acted on.
        actor: who asks.
        role: the least role the action needs.
        what: the action in words, for ``AccessDenied``.
        action: the audit action refused (``reap``, ``pause`` …).

    Raises:
        AccessDenied: ``actor`` lacks ``role`` (after the log line and the row).
    """
    try:
        require(actor, role, what)
    except AccessDenied:
        try:
            with db.transaction() as conn:
                row = conn.execute(
                    db.compose("audit_refused", writer=writer(db.settings, "refused")),
                    {"actor": actor.name, "refused_action": action},
                ).fetchone()
            recorded = (
                f"audit row {row['id']}" if row["id"] else "audit row folded by the rate limit"
            )
        except OutboxMonitorError as error:
            recorded = f"no audit row: {error.args[0] if error.args else error}"
        log.warning(
            "refused: %s (%s) may not %s on outbox %s (%s)",
            actor.name,
            actor.role.name,
            action,
            db.table_name,
            recorded,
        )
        raise
