"""The scheduler's alerts about its own problems that go through the notification outbox
(``alerts.stall``: alerting is stalled; ``alerts.replica_lag``: rules not evaluated from a
lagging read replica): one ``error`` notification per route and episode, its ``resolved``
follow-up, and the episode's two ``alert_transitions`` rows.

The dedupe key is ``<rule>|<instance>|<episode>/<route>|<kind>``: every process that notices
the same episode computes the same key, so ``notification_insert``'s ``ON CONFLICT DO
NOTHING`` keeps one message per route however many notice it; the resolve's key is the
alert's with ``resolved`` for ``error``. (The database-unreachable alert cannot use the
outbox while the database is down: ``alerts.outage`` posts it directly.)
"""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from outbox_monitor.alerts.outbox_scope import scope_payload
from outbox_monitor.store.db import Database


def notification_params(
    *,
    rule: str,
    instance: str,
    route: str,
    kind: str,
    episode: str,
    payload: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """The parameters of ``notification_insert`` for one route's alert (``kind`` ``error``)
    of an episode: pending, not silenced, due at ``now``, no evaluation id."""
    return {
        "dedupe_key": f"{rule}|{instance}|{episode}/{route}|{kind}",
        "rule": rule,
        "instance": instance,
        "kind": kind,
        "route": route,
        "evaluation_id": None,
        "payload": Jsonb(dict(payload)),
        "silenced": False,
        "status": "pending",
        "now": now,
    }


def notification_rows(routes: list[str], **params: Any) -> list[dict[str, Any]]:
    """``notification_params(route=…, **params)`` for each of ``routes``: an own alert's
    message to every route that takes messages (``RuleSet.message_routes``)."""
    return [notification_params(route=route, **params) for route in routes]


def resolve_params(row: Mapping[str, Any], *, now: datetime, **changes: Any) -> dict[str, Any]:
    """The ``notification_insert`` parameters of the resolve of one open alert row (a row of
    ``open_error_notifications``): its payload with ``kind="resolved"``, ``resolved_at``
    (ISO) and ``changes`` (a new ``summary``, ``value``)."""
    payload = dict(row["payload"])
    payload.update(kind="resolved", resolved_at=now.isoformat(), **changes)
    return {
        "dedupe_key": row["dedupe_key"].removesuffix("error") + "resolved",
        "rule": payload.get("rule"),
        "instance": payload.get("instance"),
        "kind": "resolved",
        "route": row["route"],
        "evaluation_id": None,
        "payload": Jsonb(payload),
        "silenced": False,
        "status": "pending",
        "now": now,
    }


def open_alerts(db: Database, rule: str, instance: str) -> list[dict[str, Any]]:
    """The ``error`` notifications of ``rule`` and ``instance`` whose resolve is not queued
    yet (``open_error_notifications``): ``[{id, dedupe_key, route, payload}]`` by id."""
    return db.fetch_all(
        "open_error_notifications",
        {"outbox": db.alert_outbox, "rule": rule, "instance": instance},
    )


def insert_all(db: Database, conn: psycopg.Connection, rows: list[dict[str, Any]]) -> list[str]:
    """Insert ``notification_insert`` rows of ``db``'s outbox (``Database.alert_outbox``; with
    a fleet file their payload names it: ``outbox_scope.scope_payload``) in ``conn``'s
    transaction; returns the routes of the rows inserted (a known dedupe key inserts
    nothing)."""
    query = db.compose("notification_insert")
    outbox = db.alert_outbox
    inserted = []
    for row in rows:
        payload = Jsonb(scope_payload(dict(row["payload"].obj), outbox))
        params = {**row, "outbox": outbox, "payload": payload}
        if conn.execute(query, params).fetchone() is not None:
            inserted.append(row["route"])
    return inserted


def insert_transition(
    db: Database,
    conn: psycopg.Connection,
    *,
    rule: str,
    instance: str,
    from_state: str,
    to_state: str,
    value: float | None,
    at: datetime,
    detail: str,
) -> None:
    """Record one ``alert_transitions`` row of the episode (``inactive→error`` when it
    starts, ``error→inactive`` when it ends) in ``conn``'s transaction."""
    conn.execute(
        db.compose("alert_transition_insert"),
        {
            "outbox": db.alert_outbox,
            "rule": rule,
            "instance": instance,
            "from_state": from_state,
            "to_state": to_state,
            "value": value,
            "at": at,
            "detail": detail,
        },
    )
