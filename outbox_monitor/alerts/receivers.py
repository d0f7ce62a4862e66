"""A route's receiver by its ``type`` (alerts.yml ``routes``): ``slack`` (``alerts.slack``),
``pagerduty`` (``alerts.pagerduty``), ``webhook`` (``alerts.signed_webhook``), built from
the environment variables the route names. Another type is one more entry of ``BUILDERS``.

A Slack transport packs one evaluation's rows into one message (``packs``) and threads its
resolves; the other receivers take one row per request (``deliver``). A ``pagerduty`` or
``webhook`` route whose variable is missing or invalid is a configuration error naming the
route and the variable (the scheduler refuses to start: exit 2); a Slack route's missing
variable only holds its rows, as before.
"""

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from outbox_monitor.alerts.pagerduty import DEFAULT_EVENTS_URL, PagerDutyTransport
from outbox_monitor.alerts.route_model import ALERTMANAGER
from outbox_monitor.alerts.signed_webhook import SignedWebhookTransport
from outbox_monitor.alerts.slack import (
    DEFAULT_TIMEOUT_SECONDS,
    QUICK_RETRY_SECONDS,
    Transport,
    TransportConfigError,
    TransportNotConfigured,
    http_url,
)
from outbox_monitor.alerts.slack import transport_for_route as slack_transport
from outbox_monitor.alerts.slack_outcomes import Delivery


class RowTransport(Protocol):
    """What the sender needs of a receiver that takes one notification row per request."""

    kind: str
    packs: bool
    """``False``: one row per request (``deliver``)."""
    supports_threads: bool
    secrets: tuple[str, ...]

    def deliver(self, row: Mapping[str, Any], *, dashboard_url: str) -> Delivery: ...

    def deliver_group(self, message: Any, *, dashboard_url: str) -> Delivery:
        """One message of a group (``alerts.grouping``, a route with ``group_by``)."""
        ...

    def describe(self) -> str: ...


Receiver = Transport | RowTransport
"""Any route's transport: ``packs`` tells them apart."""


def _pagerduty(name: str, route: Any, env: Mapping[str, str], timeout: float, _: float) -> Any:
    key = _value(env, name, route, "routing_key_env")
    base = (
        http_url(route.url_env, _value(env, name, route, "url_env"))
        if route.url_env
        else DEFAULT_EVENTS_URL
    )
    return PagerDutyTransport(name, key, base, timeout=timeout)


def _webhook(name: str, route: Any, env: Mapping[str, str], timeout: float, _: float) -> Any:
    url = http_url(route.url_env, _value(env, name, route, "url_env"))
    return SignedWebhookTransport(
        name, url, _value(env, name, route, "secret_env"), timeout=timeout
    )


def _slack(name: str, route: Any, env: Mapping[str, str], timeout: float, quick: float) -> Any:
    return slack_transport(name, route, env, timeout=timeout, quick_retry_seconds=quick)


def _value(env: Mapping[str, str], name: str, route: Any, field: str) -> str:
    """The value of the variable ``route.<field>`` names, from ``env``; a
    ``TransportConfigError`` naming the route and the variable when it is not set."""
    variable = getattr(route, field)
    value = env.get(variable, "").strip()
    if not value:
        raise TransportConfigError(
            f'alerts.yml route "{name}" ({route.type}): {field} names {variable}, which is not set',
            hint=f"Export {variable} (the secret stays out of alerts.yml).",
        )
    return value


BUILDERS: dict[str, Callable[[str, Any, Mapping[str, str], float, float], Any]] = {
    "slack": _slack,
    "pagerduty": _pagerduty,
    "webhook": _webhook,
}
"""Each receiver ``type``'s builder: (route name, route, environment, timeout, Slack's quick
retry) → its transport."""


def transport_for_route(
    name: str,
    route: Any,
    env: Mapping[str, str],
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    quick_retry_seconds: float = QUICK_RETRY_SECONDS,
) -> Receiver:
    """Build the transport of one route of alerts.yml by its ``type``.

    Args:
        name: the route's name (for messages).
        route: a ``route_model.Route``.
        env: the environment (``os.environ`` or a dict in tests).
        timeout: client timeout in seconds (``Settings.slack_timeout``,
            ``OUTBOX_MONITOR_SLACK_TIMEOUT``), for every receiver.
        quick_retry_seconds: pause before slack-sdk's one retry after a connection error.

    Raises:
        TransportNotConfigured: a Slack route's variable is not set.
        TransportConfigError: a variable is invalid; a ``pagerduty`` or ``webhook`` route's
            variable is not set; naming the route and the variable.
    """
    return BUILDERS[getattr(route, "type", "slack")](name, route, env, timeout, quick_retry_seconds)


def transports_for(
    ruleset: Any,
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    quick_retry_seconds: float = QUICK_RETRY_SECONDS,
) -> dict[str, Receiver]:
    """Build one transport per route of a rule set that takes queued notifications (every
    route but ``type: alertmanager``).

    Args:
        ruleset: a ``rules.RuleSet`` (its ``routes: dict[str, Route]``).
        env: the environment; default ``os.environ``.
        timeout: client timeout in seconds (``Settings.slack_timeout``).
        quick_retry_seconds: pause before slack-sdk's one retry after a connection error.

    Returns:
        ``{route_name: transport}``.

    Raises:
        TransportConfigError: every route that cannot be built, one line each, naming
            the variable; a ``TransportNotConfigured`` when every one of them is only
            missing a Slack variable.
    """
    environment = os.environ if env is None else env
    transports: dict[str, Receiver] = {}
    problems: list[TransportConfigError] = []
    for name, route in ruleset.routes.items():
        if route.type == ALERTMANAGER:
            continue  # posted from the alerts' state by alerts.alertmanager, never queued
        try:
            transports[name] = transport_for_route(
                name, route, environment, timeout=timeout, quick_retry_seconds=quick_retry_seconds
            )
        except TransportConfigError as error:
            problems.append(error)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        only_missing = all(isinstance(p, TransportNotConfigured) for p in problems)
        raise (TransportNotConfigured if only_missing else TransportConfigError)(
            "\n".join(p.args[0] for p in problems),
            hint=" ".join(dict.fromkeys(p.hint for p in problems if p.hint)),
        )
    return transports
