"""Rows of ``outbox_monitor.controls`` read into settings and written back, in the caller's
transaction: the one place that knows the table's columns (``control_*`` queries)."""

import logging
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb

from outbox_monitor.access import Identity
from outbox_monitor.errors import ActionRefused
from outbox_monitor.flow.model import SETTING_FIELDS, ControlSettings
from outbox_monitor.store.audit import audit_fields
from outbox_monitor.store.audited_writers import writer
from outbox_monitor.store.db import Database

log = logging.getLogger("outbox_monitor.flow")

Layer = Literal["file", "ui"]
"""``file``: written by ``controls apply``; ``ui``: an operator's change (SPEC §5)."""


def settings_of(row: dict[str, Any]) -> ControlSettings:
    """The settings held by a ``control_rows``/``control_states`` row."""
    return ControlSettings.model_validate({name: row[name] for name in SETTING_FIELDS})


def key(db: Database, event_type_filter: str | None) -> dict[str, Any]:
    """The query parameters naming one control of the table (``None``: all of them)."""
    return {"table_regclass": db.table_regclass, "event_type_filter": event_type_filter}


def check_table(conn: Any, db: Database) -> None:
    """Refuse to write a control the claim could not obey (migration 008's
    ``flow_table_ok``): the outbox table must be a permanent table owned by the owner of
    the ``outbox_monitor`` schema.

    Raises:
        ActionRefused: with the fix (run init-db as the table's owner).
    """
    if not conn.execute(db.compose("flow_table_ok"), key(db, None)).fetchone()["ok"]:
        raise ActionRefused(
            f"flow control cannot work on {db.table_name}: it is not owned by the owner of the "
            "outbox_monitor schema, so the claim would ignore its controls",
            hint="Run `outbox-monitor init-db` as the outbox table's owner (or give the table "
            "and the schema one owner); nothing was changed.",
        )


def written(
    event_type_filter: str,
    settings: ControlSettings,
    *,
    layer: Layer,
    expires_at: datetime | None,
) -> dict[str, Any]:
    """One change for ``save``: insert or replace the control row of one layer (its state
    row made sure of: a full bucket when new; cut to a smaller burst; the breaker closed
    when switched off)."""
    row = {**settings.model_dump(mode="json"), "expires_at": _iso(expires_at)}
    return {"event_type_filter": event_type_filter, "layer": layer, "row": row}


def deleted(event_type_filter: str, *, layer: Layer) -> dict[str, Any]:
    """One change for ``save``: delete the control row of one layer (its state row stays,
    unused)."""
    return {"event_type_filter": event_type_filter, "layer": layer, "row": None}


def lock(conn: Any, db: Database) -> None:
    """Take the table's controls lock (a transaction advisory lock; the audited controls
    writer takes it too), so that changes of one table's controls run one at a time."""
    conn.execute(db.compose("controls_lock"), key(db, None))


def save(
    conn: Any,
    db: Database,
    changes: list[dict[str, Any]],
    *,
    actor: Identity,
    action: str,
    details: dict[str, Any],
) -> int:
    """Apply ``changes`` (``written``, ``deleted``) and write their audit row, in the
    caller's transaction, through the outbox's audited controls writer
    (``store.audited_writers``): the operator login has no write grant on the controls.

    Returns:
        The audit row's id.
    """
    fields = audit_fields(actor, details)
    row = conn.execute(
        db.compose("controls_save", writer=writer(db.settings, "controls")),
        {**fields, "action": action, "changes": Jsonb(changes)},
    ).fetchone()
    return row["id"]


def claims_in_flight_note(wait_seconds: float, holders: Sequence[Mapping[str, Any]]) -> str:
    """What a change says when its wait for the outbox's change lock ran out (``barrier``).

    Args:
        wait_seconds: the wait (``control_barrier_timeout``).
        holders: the ``control_lock_holders`` rows (pid, mode, usename, application_name).

    Returns:
        When a session holds the lock exclusively: that it is no claim but a session that
        stops every claim of the outbox, named (pid, login, application) with how to end it.
        Else: claims that started before the change may still hand out rows it forbids,
        naming the sessions holding it when they are known.
    """
    exclusive = [h for h in holders if h["mode"] == "ExclusiveLock"]
    if exclusive:
        return (
            f"The outbox's change lock was held exclusively by {_sessions(exclusive)} for the "
            f"whole {wait_seconds:g}s wait (OUTBOX_MONITOR_CONTROL_BARRIER_TIMEOUT): no claim "
            "holds it so, a session took it, and while it keeps it no claim of this outbox "
            "hands out any row. The change is in force; end that session "
            f"(SELECT pg_terminate_backend({exclusive[0]['pid']})) to let the workers claim "
            "again (docs/security.md)."
        )
    return (
        f"Claims that started before this change were still running after {wait_seconds:g}s "
        "(OUTBOX_MONITOR_CONTROL_BARRIER_TIMEOUT): they may still hand out rows it forbids, "
        "which then show as processing; the change is in force for every later claim."
        + (f" The change lock was held by {_sessions(holders)}." if holders else "")
    )


def _sessions(holders: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(
        f"pid {h['pid']} ({h['usename'] or 'unknown login'}, "
        f"{h['application_name'] or 'no application_name'})"
        for h in holders
    )


def barrier(conn: Any, db: Database) -> str | None:
    """Make the caller's control change a barrier (SPEC §5): take the outbox's change lock
    exclusively until the transaction ends, waiting at most ``control_barrier_timeout``
    seconds for the claims in flight (claims started meanwhile hand out no row). Call it
    first in the change's transaction, before any row lock.

    Returns:
        ``None`` when every claim in flight ended; when the wait ran out, the note the
        caller shows (``claims_in_flight_note`` with the lock's holders, logged as a
        WARNING; the change goes on).

    Raises:
        The connector's errors.
    """
    wait = db.settings.control_barrier_timeout
    ms = str(math.ceil(1000 * (wait + db.settings.statement_timeout)))
    raised = conn.execute(db.compose("control_barrier_statement_timeout"), {"ms": ms})
    previous = raised.fetchone()["previous"]
    reached = conn.execute(
        db.compose("control_barrier"), {**key(db, None), "wait_seconds": wait}
    ).fetchone()["reached"]
    conn.execute(db.compose("statement_timeout_restore"), {"previous": previous})
    if reached:
        return None
    holders = conn.execute(db.compose("control_lock_holders"), key(db, None)).fetchall()
    note = claims_in_flight_note(wait, holders)
    log.warning("control change on %s: %s", db.table_name, note)
    return note


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
