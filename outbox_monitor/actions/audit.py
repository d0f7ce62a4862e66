"""The audit log of every audited change (actions, silences, payload reveals): its only writer
(through the SQL function ``outbox_monitor.record_audit``) and its newest rows."""

import uuid
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outbox_monitor.access import Identity
from outbox_monitor.store.db import Database

MAX_AUDIT_IDS = 1000


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
    """Write one audit row in the caller's transaction (every audited change: actions,
    silences, payload reveals), through the SQL function ``outbox_monitor.record_audit``,
    the audit log's only writer: it stamps the row with the database's
    ``clock_timestamp()`` (the time of the call), checks the fields and refuses a
    ``run_id`` whose rows have another actor or action; no role may INSERT into the table
    itself (docs/security.md, Least-privilege database access).

    Args:
        conn: the connection of the transaction that makes the change.
        actor: who; its name is recorded.
        action: ``reap``, ``replay``, ``prune``, ``silence``, ``reveal`` …
        details: the filter or details (JSON-able; datetimes are written in ISO 8601).
        ids: the rows changed; the first ``MAX_AUDIT_IDS`` are kept, all are counted.
        run_id: ties the batches of one action together; default a new one.
        count: how many rows changed when ``ids`` holds only the first of them (a partition
            a prune dropped whole); default ``len(ids)``.

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
            "affected_count": len(ids) if count is None else count,
            "affected_ids": ids[:MAX_AUDIT_IDS],
        },
    ).fetchone()
    return row["id"]


def recent_audit(db: Database, *, limit: int = 50) -> list[dict[str, Any]]:
    """The newest audit rows of ``db``'s outbox table (not another outbox's of the database):
    id, run_id, at, actor, action, table_name, filter, affected_count, ids_recorded and
    first_ids (up to 20)."""
    return db.fetch_all("audit_recent", {"limit": limit, "table_name": db.table_name})
