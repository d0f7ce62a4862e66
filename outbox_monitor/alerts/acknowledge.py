"""Acknowledge one firing episode, silence its instance or pause its event type for a while:
the actions of the Slack buttons (issue 31 item 6; ``alerts.slack_actions``), each audited,
run with the operator's login.

An acknowledged episode (a row of ``outbox_monitor.alert_acks``, migration 028, keyed on
the id of the transition that started it) queues no more repeats (``evaluate``); its
error and its resolve go as before, and the next episode pages again. Acknowledging is an
operator's action, through the outbox's audited ``acknowledge`` writer
(``store.audited_writers``), which writes the audit row with the Slack ids.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts.outbox_scope import unscoped_instance
from outbox_monitor.alerts.silences import create_silence
from outbox_monitor.errors import ActionRefused
from outbox_monitor.flow.controls import pause
from outbox_monitor.store.audit import audit_fields, require_audited
from outbox_monitor.store.audited_writers import writer
from outbox_monitor.store.db import Database

PAGING_STATES = ("firing", "error")
"""The states of an instance whose episode may be acknowledged or silenced from its message."""


@dataclass(frozen=True)
class Press:
    """Who pressed which button: the person (mapped from Slack), the Slack ids and the
    notification the button belongs to (``notifications.id``)."""

    actor: Identity
    team_id: str
    user_id: str
    notification_id: int

    def details(self) -> dict[str, Any]:
        """The Slack ids for the audit row's filter."""
        return {
            "slack_team_id": self.team_id,
            "slack_user_id": self.user_id,
            "notification": self.notification_id,
        }


@dataclass(frozen=True)
class Acknowledged:
    """The outcome of ``acknowledge``: the episode, who acknowledged it and when (the first
    person, when it was acknowledged before: ``already``), the notification row the button
    belongs to as stored (``outbox``, ``dedupe_key``, ``rule``, ``instance``, ``route``,
    ``slack_channel``, ``slack_ts``, ``payload``, ``labels``) and ``what``: its rule and
    instance as the rules know them."""

    episode: int
    acked_by: str
    acked_at: datetime
    already: bool
    notification: dict[str, Any]
    what: str


def episode_acknowledged(db: Database, conn: psycopg.Connection, episode: int | None) -> bool:
    """Whether the firing episode ``episode`` (``alert_instances.episode_id``) was
    acknowledged, read in the caller's transaction; ``None`` (no episode id): ``False``."""
    if episode is None:
        return False
    return conn.execute(db.compose("episode_acknowledged"), {"episode": episode}).fetchone()[
        "acked"
    ]


def list_acknowledgements(db: Database) -> list[dict[str, Any]]:
    """The acknowledged current episodes of ``db``'s outbox (firing or in error), newest
    first: rule, instance (unscoped: as the rules know it), episode_id, acked_by, acked_at,
    slack_team_id, slack_user_id.

    Raises:
        DatabaseUnavailable and the connector's errors.
    """
    rows = db.fetch_all("acknowledgements_of_outbox", {"outbox": db.alert_outbox})
    return [
        {**row, "instance": unscoped_instance(db.alert_outbox, row["instance"])} for row in rows
    ]


def pressed_episode(db: Database, press: Press) -> dict[str, Any]:
    """The notification a button names, when its episode is still the instance's current
    one and it pages (firing or in error).

    Returns:
        The row of ``slack_press_notification`` (rule, instance as stored, kind, route,
        payload, slack_channel, slack_ts, state, current_episode, labels) with ``episode``.

    Raises:
        ActionRefused: no such notification of this outbox; it carries no episode (sent
            before migration 021); the episode ended (resolved, or a later one began).
    """
    row = db.fetch_one(
        "slack_press_notification", {"id": press.notification_id, "outbox": db.alert_outbox}
    )
    if row is None:
        raise ActionRefused(f"notification {press.notification_id} is not one of this outbox's")
    episode = (row["payload"] or {}).get("episode")
    if episode is None:
        raise ActionRefused("this message predates episode ids: acknowledge it on the dashboard")
    if row["current_episode"] != episode or row["state"] not in PAGING_STATES:
        what = " ".join(filter(None, (row["rule"], row["instance"])))
        raise ActionRefused(f"{what}: this episode has ended already")
    return {**row, "episode": int(episode)}


def acknowledge(db: Database, press: Press) -> Acknowledged:
    """Acknowledge the episode of the notification ``press`` names: no more repeats of it.

    Args:
        db: the Database of actions (``purpose="actions"``: the operator's login).
        press: who (an operator at least) and which notification.

    Returns:
        ``Acknowledged``; ``already`` when someone had acknowledged it (nothing written).

    Raises:
        AccessDenied: the person is not an operator (logged, and a ``refused`` audit row).
        ActionRefused: as ``pressed_episode``.
        PermissionDenied: the login may not call the audited writer (not the operator's).
        DatabaseUnavailable and the connector's errors.
    """
    require_audited(db, press.actor, Role.operator, "acknowledge alerts", "acknowledge")
    row = pressed_episode(db, press)
    details = {
        "rule": row["rule"],
        "instance": row["instance"],
        "episode": row["episode"],
        **press.details(),
    }
    with db.transaction() as conn:
        acked = conn.execute(
            db.compose("acknowledge_episode", writer=writer(db.settings, "acknowledge")),
            {
                "actor": press.actor.name,
                "episode": row["episode"],
                "rule": row["rule"],
                "instance": row["instance"],
                "team": press.team_id,
                "user": press.user_id,
                "filter": audit_fields(press.actor, details)["filter"],
            },
        ).fetchone()
    return Acknowledged(
        episode=row["episode"],
        acked_by=acked["acked_by"],
        acked_at=acked["acked_at"],
        already=not acked["inserted"],
        notification=row,
        what=" ".join(
            filter(None, (row["rule"], unscoped_instance(db.alert_outbox, row["instance"])))
        ),
    )


def silence_instance(db: Database, press: Press, hours: float) -> tuple[int, datetime]:
    """Silence the instance of the notification ``press`` names for ``hours``: a silence of
    its labels (``alerts.silences``), audited with the Slack ids.

    Returns:
        The silence's id and its end (the database's now + ``hours``).

    Raises:
        AccessDenied, ActionRefused (as ``pressed_episode`` and ``create_silence``),
        PermissionDenied, DatabaseUnavailable.
    """
    row = pressed_episode(db, press)
    now = db.fetch_one("db_now")["now"]
    until = now + timedelta(hours=hours)
    labels = {str(k): str(v) for k, v in (row["labels"] or {}).items()}
    silence = create_silence(
        db,
        labels,
        until,
        f"Silence {hours:g} h pressed in Slack by {press.actor.name}",
        press.actor,
        now=now,
        audit_details=press.details(),
    )
    return silence, until


def pause_type(db: Database, press: Press, hours: float) -> tuple[str, datetime]:
    """Pause handing out the rows of the event type of the notification ``press`` names
    (its ``event_type`` label; flow control, SPEC §5) for ``hours``; audited as a ``pause``
    whose reason names the person and the Slack ids.

    Returns:
        The event type (or filter) paused and the pause's end.

    Raises:
        ActionRefused: the alert is not of one event type (no ``event_type`` label); as
            ``pressed_episode`` and ``flow.controls.change``.
        AccessDenied, PermissionDenied, DatabaseUnavailable.
    """
    row = pressed_episode(db, press)
    event_type = (row["labels"] or {}).get("event_type")
    if not event_type:
        raise ActionRefused(f"{row['rule']} is not an alert of one event type: nothing to pause")
    until = db.fetch_one("db_now")["now"] + timedelta(hours=hours)
    reason = f"paused from Slack by {press.actor.name} ({press.team_id}/{press.user_id})"
    pause(db, str(event_type), actor=press.actor, until=until, reason=reason)
    return str(event_type), until
