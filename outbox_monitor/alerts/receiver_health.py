"""A receiver that keeps failing is never silent (issue 31 item 1): each route's delivery
health read from the notification outbox, shown on the Alerts page and ``/metrics``, and the
``receiver-failing`` alert sent through every other receiver that works.

A route is **failing** when its oldest undelivered message was tried ``FAILING_ATTEMPTS``
times without being taken (down, 429, 5xx, hanging, an error body), or when its newest
finished message failed for good (a 400, a revoked webhook). It is well again when a
message of it is delivered. ``watch_receivers`` (the sender job, on the leader, after each
pass) queues one ``error`` notification per other route that is not failing, rule
``receiver-failing``, instance ``route=<name>``, dedupe key
``receiver-failing|route=<name>|<episode>/<route>|error`` (``own_alerts``: the episode is
the id of the row that failed), and its resolve once the route delivers again.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.own_alerts import (
    insert_all,
    insert_transition,
    notification_params,
    open_alerts,
    resolve_params,
)
from outbox_monitor.store.db import Database

RULE_NAME = "receiver-failing"
FAILING_ATTEMPTS = 3
"""Attempts of one message without delivery after which its route counts as failing (three
sender passes: about 6 s at the default interval, or three Retry-Afters)."""
LOOKBACK_SECONDS = 24 * 3600.0
"""How far back a route's newest finished message is looked for."""


@dataclass(frozen=True)
class ReceiverHealth:
    """One route's delivery: ``undelivered`` messages (pending, not silenced), the most
    ``attempts`` of one, since when its oldest tried one waits (``failing_since``), its
    newest finished message's ``last_outcome`` (``sent``, ``failed``, ``None``) and the
    ``last_error`` of the one that counts; ``episode``: the id of the row that failed."""

    route: str
    type: str
    undelivered: int
    attempts: int
    failing_since: datetime | None
    last_outcome: str | None
    last_error: str | None
    episode: int | None

    @property
    def failing(self) -> bool:
        """Whether the route keeps failing (module docstring)."""
        return self.attempts >= FAILING_ATTEMPTS or self.last_outcome == "failed"

    @property
    def instance(self) -> str:
        """The ``receiver-failing`` alert's instance key: ``route=<name>``."""
        return f"route={self.route}"


def read_health(db: Database, ruleset: Any, now: datetime) -> list[ReceiverHealth]:
    """Every route of ``ruleset``, in file order, with its delivery health in ``db``'s
    outbox (``Database.alert_outbox``), as of ``now`` (the sender's clock).

    Raises:
        DatabaseUnavailable and the connector's errors.
    """
    found = {
        row["route"]: row
        for row in db.fetch_all(
            "receiver_health",
            {"outbox": db.alert_outbox, "since": now - timedelta(seconds=LOOKBACK_SECONDS)},
        )
    }
    health = []
    for name, route in ruleset.routes.items():
        row = found.get(name, {})
        failed = row.get("last_outcome") == "failed"
        health.append(
            ReceiverHealth(
                route=name,
                type=route.type,
                undelivered=row.get("undelivered", 0),
                attempts=row.get("attempts", 0),
                failing_since=row.get("failing_since"),
                last_outcome=row.get("last_outcome"),
                last_error=row.get("last_error"),
                episode=row.get("failing_id") or (row.get("last_id") if failed else None),
            )
        )
    return health


def watch_receivers(
    db: Database,
    ruleset: Any,
    *,
    clock: Clock = system_clock,
    fence: Callable[[psycopg.Connection], None] | None = None,
) -> dict[str, list[str]]:
    """Queue the ``receiver-failing`` alert of each route newly failing, through every route
    that is not failing, and the resolve of each alert whose route delivers again.

    Args:
        db: the primary (notifications of ``db.alert_outbox``).
        ruleset: the rules (its ``routes``).
        clock: the sender's clock.
        fence: ``Leadership.fence``, called first in the write transaction.

    Returns:
        ``{"raised": [routes alerted about], "resolved": [routes well again]}``.
    """
    now = clock()
    health = read_health(db, ruleset, now)
    working = [h.route for h in health if not h.failing]
    raised, resolved = [], []
    for receiver in health:
        open_rows = open_alerts(db, RULE_NAME, receiver.instance)
        if receiver.failing and not open_rows and working:
            rows = [_alert(receiver, target, now) for target in working]
            with db.transaction() as conn:
                if fence is not None:
                    fence(conn)
                if insert_all(db, conn, rows):
                    _transition(db, conn, receiver, "inactive", "error", now)
                    raised.append(receiver.route)
        elif not receiver.failing and open_rows:
            summary = f"Receiver {receiver.route} ({receiver.type}) delivers again."
            with db.transaction() as conn:
                if fence is not None:
                    fence(conn)
                rows = [resolve_params(row, now=now, summary=summary) for row in open_rows]
                if insert_all(db, conn, rows):
                    _transition(db, conn, receiver, "error", "inactive", now)
                    resolved.append(receiver.route)
    return {"raised": raised, "resolved": resolved}


def _alert(receiver: ReceiverHealth, target: str, now: datetime) -> dict[str, Any]:
    """``notification_insert`` parameters of the alert about ``receiver`` through ``target``."""
    why = (
        "its last message was refused for good"
        if receiver.last_outcome == "failed" and receiver.attempts < FAILING_ATTEMPTS
        else f"{receiver.undelivered} message(s) undelivered after {receiver.attempts} attempts"
    )
    payload = {
        "rule": RULE_NAME,
        "instance": receiver.instance,
        "severity": "critical",
        "summary": (
            f"Receiver {receiver.route} ({receiver.type}) keeps failing: {why}. "
            f"Last error: {receiver.last_error or 'none recorded'}. Its alerts wait (or were "
            "refused); a resolve follows when it delivers again."
        ),
        "error": receiver.last_error,
        "metric": "receiver_failing",
        "value": receiver.attempts,
        "unit": "attempts",
        "since": (receiver.failing_since or now).isoformat(),
        "labels": {"rule": RULE_NAME, "severity": "critical", "route": receiver.route},
        "offenders": [],
        "runbook_url": None,
        "runbook": own_runbooks.steps(RULE_NAME),
        "dashboard_path": "/alerts",
        "kind": "error",
        "episode": receiver.episode,
    }
    return notification_params(
        rule=RULE_NAME,
        instance=receiver.instance,
        route=target,
        kind="error",
        episode=str(receiver.episode),
        payload=payload,
        now=now,
    )


def _transition(
    db: Database,
    conn: psycopg.Connection,
    receiver: ReceiverHealth,
    from_state: str,
    to_state: str,
    now: datetime,
) -> None:
    insert_transition(
        db,
        conn,
        rule=RULE_NAME,
        instance=receiver.instance,
        from_state=from_state,
        to_state=to_state,
        value=float(receiver.attempts),
        at=now,
        detail=f"receiver {receiver.route} ({receiver.type}): "
        + ("failing" if to_state == "error" else "delivers again"),
    )
