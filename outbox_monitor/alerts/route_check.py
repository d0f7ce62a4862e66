"""Check that a route reaches its channel: post a test message now and record it in the
notifications (``outbox-monitor alerts test``, the Alerts page's button), so the Alerts page
lists it with its outcome.
"""

import logging
import os
from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from outbox_monitor.alerts.alertmanager import AlertmanagerTestTransport, route_urls
from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.message import dashboard_base_url, render_test, test_row
from outbox_monitor.alerts.message_delivery import error_text
from outbox_monitor.alerts.receivers import DEFAULT_TIMEOUT_SECONDS, Receiver, transport_for_route
from outbox_monitor.alerts.route_model import ALERTMANAGER
from outbox_monitor.alerts.slack import TransportConfigError
from outbox_monitor.alerts.slack_outcomes import DeliveryError
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.store.db import Database

# Logged as the sender, as before this module was split from it (log lines unchanged).
log = logging.getLogger("outbox_monitor.alerts.sender")


def send_test(
    db: Database,
    ruleset: Any,
    route_name: str | None = None,
    *,
    requested_by: str,
    transports: Mapping[str, Receiver] | None = None,
    env: Mapping[str, str] | None = None,
    clock: Clock = system_clock,
) -> dict[str, dict[str, Any]]:
    """Post a test message now (``outbox-monitor alerts test``, the Alerts page button) and
    record it in the notification table, so the Alerts page lists it with its outcome.

    The row (kind and rule ``test``, ``requested_by`` in its payload) is written after the
    post as ``sent`` or ``failed`` — never ``pending``, so the sender never posts it again;
    it has no alert instance, transition or episode, so alert state and dedupe are untouched.
    It is written by the SQL function ``outbox_monitor.record_test_notification`` (migration
    005), which makes its dedupe key (``test|<uuid>``, never an alert's) and stamps it with
    the database's ``now()``: no role needs INSERT on the notification table for it.

    Args:
        db: where the row is written (a login with EXECUTE on
            ``outbox_monitor.record_test_notification``: the operator role).
        ruleset: the ``rules.RuleSet``.
        route_name: one route, or ``None`` for every route.
        requested_by: who asked (an e-mail, the CLI actor), stored in the row's payload.
        transports: ``{route: transport}``; default built from ``env`` with the client
            timeout of ``db.settings.slack_timeout``.
        env: the environment (default ``os.environ``).
        clock: for the message's footer (the row's times are the database's).

    Returns:
        ``{route: {"ok": True, "destination", "channel", "ts"}}`` or, per failed route,
        ``{"ok": False, "destination", "error" (redacted), "status"}``; each also has
        ``notification_id`` (the row written) or, when the row could not be written,
        ``record_error`` (why; the message was posted or refused all the same).

    A ``type: alertmanager`` route posts a test alert to each of its Alertmanagers instead
    (``alertmanager.AlertmanagerTestTransport``).

    Raises:
        TransportConfigError: the route is unknown or its Slack variable (an alertmanager
            route's ``alertmanager_urls_env``) is missing.
    """
    environment = os.environ if env is None else env
    names = list(ruleset.routes) if route_name is None else [route_name]
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        route = ruleset.routes.get(name)
        if route is None:
            known = ", ".join(sorted(ruleset.routes)) or "none"
            raise TransportConfigError(f'no route "{name}" in the rules file (routes: {known})')
        transport = (
            transports[name]
            if transports is not None and name in transports
            else test_transport(name, route, environment, timeout=db.settings.slack_timeout)
        )
        row = test_row(name)
        message = render_test(
            name,
            mention=getattr(route, "mention", None),
            dashboard_url=dashboard_base_url(environment),
            now=clock(),
        )
        try:
            delivery = (
                transport.post(message)
                if transport.packs
                else transport.deliver(
                    # its own episode: each test message has a key of its own
                    {**row, "payload": {**row["payload"], "episode": clock().isoformat()}},
                    dashboard_url=dashboard_base_url(environment),
                )
            )
        except DeliveryError as error:
            text = error_text(error, secrets=tuple(getattr(transport, "secrets", ())))
            results[name] = {
                "ok": False,
                "destination": transport.describe(),
                "error": text,
                "status": error.status,
            }
            log.warning("test message on route %s failed: %s", name, text)
        else:
            results[name] = {
                "ok": True,
                "destination": transport.describe(),
                "channel": delivery.channel,
                "ts": delivery.ts,
            }
        results[name].update(
            _record_test(db, name, {**row["payload"], "requested_by": requested_by}, results[name])
        )
    return results


def test_transport(
    name: str, route: Any, env: Mapping[str, str], *, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> Any:
    """What a test message of route ``name`` goes through: its Slack transport
    (``receivers.transport_for_route``) or, for a ``type: alertmanager`` route, its Alertmanagers
    (``alertmanager.AlertmanagerTestTransport``).

    Raises:
        TransportConfigError: as ``transport_for_route``; ``TransportNotConfigured`` when an
            alertmanager route's ``alertmanager_urls_env`` is not set.
    """
    if route.type == ALERTMANAGER:
        return AlertmanagerTestTransport(name, route_urls(name, route, env))
    return transport_for_route(name, route, env, timeout=timeout)


def _record_test(
    db: Database, route: str, payload: dict[str, Any], outcome: Mapping[str, Any]
) -> dict[str, Any]:
    """Write one test message's row through ``outbox_monitor.record_test_notification``
    (it sets kind, dedupe key and times); ``{"notification_id"}`` or ``{"record_error"}``."""
    try:
        row = db.fetch_one(
            "notification_record_test",
            {
                "route": route,
                "payload": Jsonb(payload),
                "status": "sent" if outcome["ok"] else "failed",
                "last_status": 200 if outcome["ok"] else outcome.get("status"),
                "last_error": None if outcome["ok"] else outcome.get("error"),
                "slack_channel": outcome.get("channel"),
                "slack_ts": outcome.get("ts"),
            },
        )
    except OutboxMonitorError as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        log.error(
            "test message on route %s was not recorded in the notifications: %s", route, reason
        )
        return {"record_error": reason}
    assert row is not None  # INSERT … RETURNING
    return {"notification_id": row["id"]}
