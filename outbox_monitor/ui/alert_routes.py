"""The Alerts page's test message: where each route of alerts.yml posts from this process,
and the outcome of "Send test alert" (issue 3 §4).

``send_test_alert`` is the one write here: it posts through ``route_check.send_test``, which
records the test message's notification row.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from outbox_monitor.access import Identity, Role, require
from outbox_monitor.alerts.route_check import send_test, test_transport
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.slack import TransportConfigError
from outbox_monitor.store.db import Database


@dataclass(frozen=True)
class Destination:
    """Where a route posts (``text``, safe to show), or ``missing``: the configuration error
    naming the variable to set."""

    text: str | None
    missing: TransportConfigError | None = None


def route_destination(
    ruleset: RuleSet, route_name: str, env: Mapping[str, str] | None = None
) -> Destination:
    """Where a route's messages would go from this process, without posting anything."""
    route = ruleset.routes[route_name]
    try:
        transport = test_transport(route_name, route, os.environ if env is None else env)
    except TransportConfigError as error:
        return Destination(None, error)
    return Destination(transport.describe())


@dataclass(frozen=True)
class SendOutcome:
    """The result of the test button: ``level`` ``"success"``, ``"error"`` (Slack refused
    or unreachable) or ``"warning"`` (not configured), the ``message`` and the ``hint``."""

    level: str
    message: str
    hint: str = ""


def send_test_alert(
    db: Database,
    ruleset: RuleSet,
    route_name: str,
    identity: Identity,
    env: Mapping[str, str] | None = None,
) -> SendOutcome:
    """Post ``outbox-monitor alerts test``'s message through one route now, and record it
    in the notification table (``route_check.send_test``) so the Notifications tab lists it.

    Args:
        db: the operator's connector (``PageContext.actions_db``): it writes the row.
        ruleset, route_name: the route to post through.
        identity: who clicked; posting into the alert channel needs the operator role.
        env: the Slack variables (default ``os.environ``).

    Returns:
        A ``SendOutcome``; a missing Slack variable is a ``warning`` whose message and
        hint name the variable to set; a message posted but not recorded is a
        ``warning`` saying why. Never raises for Slack or configuration problems.

    Raises:
        AccessDenied: ``identity`` is not an operator.
    """
    require(identity, Role.operator, "post test alerts")
    try:
        results = send_test(db, ruleset, route_name, requested_by=identity.name, env=env)
    except TransportConfigError as error:
        return SendOutcome("warning", str(error.args[0]), error.hint)
    outcome = results[route_name]
    if "notification_id" in outcome:
        recorded = f" Listed under Notifications as #{outcome['notification_id']}."
    else:
        recorded = (
            " It could not be recorded in the notification table, so the Notifications tab "
            f"does not list it: {outcome['record_error']}"
        )
    if outcome["ok"]:
        where = outcome["destination"]
        if outcome.get("ts"):
            where += f" (channel {outcome['channel']}, ts {outcome['ts']})"
        return SendOutcome(
            "success" if "notification_id" in outcome else "warning",
            f"Test message of route {route_name} posted to {where}.{recorded}",
        )
    status = f" (HTTP {outcome['status']})" if outcome.get("status") else ""
    return SendOutcome(
        "error",
        f"Test message of route {route_name} to {outcome['destination']} failed{status}: "
        f"{outcome['error']}{recorded}",
        "Check the webhook URL or bot token and the channel, then try again.",
    )
