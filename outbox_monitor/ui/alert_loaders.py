"""Cached reads of the alerting tables (rule instances, transitions, notifications,
silences, the evaluator lease) for the Alerts page and the Overview's stall banner, and the
silence writes, which clear the caches they make stale.

Values are the plain rows of ``alerts.state``, ``alerts.silences`` and ``alerts.stall``.
"""

from datetime import datetime
from typing import Any

from outbox_monitor.access import Identity
from outbox_monitor.alerts import alertmanager_health, write_health
from outbox_monitor.alerts import silences as alert_silences
from outbox_monitor.alerts import stall as alert_stall
from outbox_monitor.alerts import state as alert_state
from outbox_monitor.store.db import Database
from outbox_monitor.ui import loaders
from outbox_monitor.ui.cache import cached, db_key


@cached
def _evaluator_lease(key: str, _db: Database) -> alert_stall.LeaseStatus:
    return alert_stall.read_lease(_db)


def evaluator_lease(db: Database) -> alert_stall.LeaseStatus:
    """``alerts.stall.read_lease``: the evaluator lease of the table and the database's now
    (for the "alerting is stalled" banner)."""
    return _evaluator_lease(db_key(db), db)


@cached
def _alertmanager_down(key: str, _db: Database) -> list[dict[str, Any]]:
    return alertmanager_health.open_episodes(_db)


def alertmanager_down(db: Database) -> list[dict[str, Any]]:
    """``alerts.alertmanager_health.open_episodes``: the Alertmanagers that refuse alerts
    (for the Alerts page's banner)."""
    return _alertmanager_down(db_key(db), db)


@cached
def _writes_failing(key: str, _db: Database) -> write_health.WritesFailing:
    return write_health.read_writes_failing(_db)


def writes_failing(db: Database) -> write_health.WritesFailing:
    """``alerts.write_health.read_writes_failing``: schedulers whose writes fail (for the
    "writes fail" banner)."""
    return _writes_failing(db_key(db), db)


@cached
def _alert_instances(key: str, _db: Database) -> list[dict[str, Any]]:
    return alert_state.list_instances(_db)


def alert_instances(db: Database) -> list[dict[str, Any]]:
    """``alerts.state.list_instances``: every rule instance with state, value, since."""
    return _alert_instances(db_key(db), db)


@cached
def _alert_transitions(key: str, _db: Database, limit: int) -> list[dict[str, Any]]:
    return alert_state.list_transitions(_db, limit=limit)


def alert_transitions(db: Database, *, limit: int = 100) -> list[dict[str, Any]]:
    """``alerts.state.list_transitions``: the newest state transitions first."""
    return _alert_transitions(db_key(db), db, limit)


@cached
def _notifications(key: str, _db: Database, limit: int) -> list[dict[str, Any]]:
    return alert_state.list_notifications(_db, limit=limit)


def notifications(db: Database, *, limit: int = 100) -> list[dict[str, Any]]:
    """``alerts.state.list_notifications``: the newest notifications first, with their
    delivery outcome and the plain-text message (``text``)."""
    return _notifications(db_key(db), db, limit)


def clear_notifications() -> None:
    """Forget the cached notification list (a test message was just recorded)."""
    _notifications.clear()


@cached
def _silences(key: str, _db: Database) -> list[dict[str, Any]]:
    return alert_silences.list_silences(_db)


def silences(db: Database) -> list[dict[str, Any]]:
    """``alerts.silences.list_silences``: the outbox's silences, newest first, with ``active``."""
    return _silences(db_key(db), db)


def clear_silences() -> None:
    """Forget the cached silences and audit log (a silence was created or expired)."""
    _silences.clear()
    loaders.clear_audit()  # creating and expiring a silence are audited


def create_silence(
    db: Database, matchers: dict[str, str], until: datetime, comment: str, created_by: Identity
) -> int:
    """``alerts.silences.create_silence`` (starts now, database clock), then clears the
    silence list and the audit log caches.

    Raises:
        AccessDenied: ``created_by`` is not an operator.
        ActionRefused: no matcher, ``until`` not in the future, no comment.
    """
    try:
        return alert_silences.create_silence(db, matchers, until, comment, created_by)
    finally:
        clear_silences()


def expire_silence(db: Database, silence_id: int, *, by: Identity) -> bool:
    """``alerts.silences.expire_silence`` now, then clears the silence and audit caches.

    Returns:
        ``False`` when it had already ended or been expired.
    """
    try:
        return alert_silences.expire_silence(db, silence_id, by)
    finally:
        clear_silences()
