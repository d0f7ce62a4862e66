"""Read side of the alert state (Alerts page, CLI): instances, transitions, notifications.

Nothing here writes; the evaluator (``evaluate.py``) and the sender own the tables. Each
reads the rows of ``db``'s outbox (``Database.alert_outbox``; issue 16) with their instance
keys as the rules know them (``outbox_scope.unscoped_instance``).
"""

from typing import Any

from outbox_monitor.alerts.message import dashboard_base_url, render_notifications
from outbox_monitor.alerts.outbox_scope import unscoped_instance
from outbox_monitor.store.db import Database

DEFAULT_LIMIT = 100


def transition_kind(from_state: str, to_state: str) -> str:
    """What a transition means for people: ``"resolved"`` (firing or error → inactive),
    ``"firing"``, ``"pending"``, ``"error"``, or ``"cleared"`` (pending → inactive)."""
    if to_state == "inactive":
        return "resolved" if from_state in ("firing", "error") else "cleared"
    return to_state


def list_instances(db: Database) -> list[dict[str, Any]]:
    """Every rule instance the evaluator has state for, by rule then instance.

    Returns:
        Rows with rule, instance (``""`` or ``"event_type=<type>"``), labels (dict), state
        (inactive | pending | firing | error), value, threshold (the rule's unit:
        seconds, rows, rows/min), pending_since, firing_since, cleared_since,
        last_evaluated_at, last_notified_at, firing_seq, error (text or ``None``) and
        changed_at (time of the instance's last transition, ``None`` if none).

    Raises:
        DatabaseUnavailable, SchemaNotInitialised and the connector's errors.
    """
    return _unscoped(db, db.fetch_all("alert_instances_list", {"outbox": db.alert_outbox}))


def list_transitions(db: Database, limit: int = DEFAULT_LIMIT) -> list[dict[str, Any]]:
    """The newest state transitions first.

    Returns:
        Rows with id, rule, instance, from_state, to_state, kind (``transition_kind``),
        value, at, detail.
    """
    rows = _unscoped(
        db, db.fetch_all("alert_transitions_recent", {"outbox": db.alert_outbox, "limit": limit})
    )
    return [{**row, "kind": transition_kind(row["from_state"], row["to_state"])} for row in rows]


def list_notifications(db: Database, limit: int = DEFAULT_LIMIT) -> list[dict[str, Any]]:
    """The newest notifications first, with their delivery outcome and text.

    Returns:
        Rows with id, dedupe_key, rule, instance, kind (firing | resolved | repeat |
        error | test), route, evaluation_id, payload (dict), silenced, status (pending |
        sent | suppressed | failed), attempts, available_at, last_error, last_status,
        created_at, sent_at, slack_channel, slack_ts, and ``text``: the plain-text
        rendering of the row alone (what Slack shows as the notification's fallback),
        or ``None`` when it cannot be rendered.
    """
    rows = _unscoped(
        db, db.fetch_all("notifications_recent", {"outbox": db.alert_outbox, "limit": limit})
    )
    return [{**row, "text": _render_text(row)} for row in rows]


def _unscoped(db: Database, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    key = db.alert_outbox
    return [{**row, "instance": unscoped_instance(key, row["instance"])} for row in rows]


def _render_text(row: dict[str, Any]) -> str | None:
    try:
        return render_notifications(
            [row], dashboard_url=dashboard_base_url(), route=row.get("route")
        ).text
    except Exception:  # rendering is a convenience of the page; the row is shown anyway
        return None
