"""alerts.yml's ``routes``: where notifications go (a Slack channel through the bot token, an
incoming webhook named by its environment variable, or — ``type: alertmanager`` — one or
more Prometheus Alertmanagers, ``alerts.alertmanager``), validated with the field named; a
route's ``routes`` send the notifications whose labels match elsewhere (Alertmanager's child
routes, first match wins: ``alerts.outbox_scope.route_for``)."""

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from outbox_monitor.alerts.rule_values import (
    LABEL_MAP_SCHEMA,
    ROUTE_NAME_SCHEMA,
    PositiveDuration,
    check_label_map,
    check_route_name,
    fail,
    or_null,
    quoted,
)

DEFAULT_WEBHOOK_ENV = "SLACK_WEBHOOK_URL"
"""The webhook variable of a route that names neither a channel nor ``webhook_url_env``."""
DEFAULT_REPEAT_INTERVAL_SECONDS = 4 * 3600.0
MAX_MENTION_LENGTH = 200

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HTTP_URL = re.compile(r"^https?://[^\s/?#]+(?:/[^\s?#]*)?$")
"""An Alertmanager's base URL: http(s), a host, an optional path prefix; no query."""
RouteType = Literal["slack", "alertmanager"]
ALERTMANAGER = "alertmanager"
SLACK_ONLY = ("channel", "webhook_url_env", "mention", "repeat_interval", "send_resolved")
"""A Slack route's fields, refused on an ``alertmanager`` route (Alertmanager repeats,
resolves and mentions by its own configuration)."""
_AM_URL_FIELDS = ("alertmanager_urls", "alertmanager_urls_env")
_IS_ALERTMANAGER = {"required": ["type"], "properties": {"type": {"const": ALERTMANAGER}}}
_CHANNEL = re.compile(r"^#?[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


class RouteBranch(BaseModel):
    """One of a route's ``routes``: the notifications whose labels satisfy every one of
    ``matchers`` go to the route named ``route`` instead (the first branch that matches)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    matchers: Annotated[dict[str, str], WithJsonSchema(LABEL_MAP_SCHEMA)]
    """Label: value, every one of which the notification's labels must have (a value with
    ``%`` is a LIKE pattern, as in silences). Labels: the alert's ``rule``, ``severity``,
    ``event_type`` and the rule's ``labels``; with a fleet file ``outbox`` and the outbox's
    labels (``team: payments``)."""
    route: Annotated[str, WithJsonSchema(ROUTE_NAME_SCHEMA)]
    """The route that takes the notification: another route of ``routes``, without
    ``routes`` of its own (one level)."""

    @field_validator("matchers", mode="before")
    @classmethod
    def _check_matchers(cls, value: Any) -> Any:
        return check_label_map("matchers", value, example="{team: payments}")

    @field_validator("route", mode="before")
    @classmethod
    def _check_route(cls, value: Any) -> Any:
        return check_route_name(value)


class Route(BaseModel):
    """One destination of notifications: Slack (``type: slack``, the default) through
    exactly one transport, a ``channel`` (the bot token) or an incoming webhook
    (``webhook_url_env``); or Prometheus Alertmanagers (``type: alertmanager``) at
    ``alertmanager_urls`` or the URLs in ``alertmanager_urls_env``."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        # not both transports (``_check_webhook_url_env``); an alertmanager route's fields
        # (``_check_receiver``)
        json_schema_extra={
            "not": {
                "required": ["channel", "webhook_url_env"],
                "properties": {
                    "channel": {"type": "string"},
                    "webhook_url_env": {"type": "string"},
                },
            },
            "allOf": [
                {
                    "if": _IS_ALERTMANAGER,
                    "then": {
                        "not": {"anyOf": [{"required": [name]} for name in SLACK_ONLY]},
                        "anyOf": [
                            {"required": [one], "not": {"required": [other]}}
                            for one, other in (_AM_URL_FIELDS, _AM_URL_FIELDS[::-1])
                        ],
                    },
                },
                {
                    "if": {"not": _IS_ALERTMANAGER},
                    "then": {"not": {"anyOf": [{"required": [f]} for f in _AM_URL_FIELDS]}},
                },
            ],
        },
    )

    type: RouteType = "slack"
    """``slack``: a Slack message per transition, through the notification outbox.
    ``alertmanager``: every firing instance routed here is posted to each Alertmanager
    (``POST /api/v2/alerts``) every evaluation interval, its resolve too, and the
    ``Watchdog`` alert always; Alertmanager groups, inhibits, repeats and notifies."""
    alertmanager_urls: Annotated[
        tuple[str, ...] | None,
        or_null(
            {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "pattern": _HTTP_URL.pattern},
            }
        ),
    ] = None
    """``type: alertmanager``: the base URLs of the Alertmanagers (``http://alertmanager:9093``,
    with a ``--web.route-prefix`` path if any); each HA peer gets every alert. Not with
    ``alertmanager_urls_env``."""
    alertmanager_urls_env: Annotated[
        str | None, or_null({"type": "string", "pattern": _ENV_NAME.pattern})
    ] = None
    """``type: alertmanager``: the name of an environment variable holding the base URLs,
    separated by commas (for URLs that differ per deployment or carry credentials). Not with
    ``alertmanager_urls``."""
    channel: Annotated[str | None, or_null({"type": "string", "pattern": _CHANNEL.pattern})] = None
    """A Slack channel (``#alerts`` or a channel id), posted to with the bot token
    ``SLACK_BOT_TOKEN``; not with ``webhook_url_env``."""
    webhook_url_env: Annotated[
        str | None, or_null({"type": "string", "pattern": _ENV_NAME.pattern})
    ] = Field(None, validate_default=True)
    """The name of the environment variable holding an incoming-webhook URL (never the URL);
    ``SLACK_WEBHOOK_URL`` when the route names neither this nor ``channel``."""
    mention: Annotated[
        str | None,
        or_null({"type": "string", "maxLength": MAX_MENTION_LENGTH, "pattern": "^[^\\n]*$"}),
    ] = None
    """Text put before the message as written, e.g. ``<!subteam^S0123>`` or ``<!here>``
    (only a route may mention: no value from the outbox can)."""
    repeat_interval: PositiveDuration = DEFAULT_REPEAT_INTERVAL_SECONDS
    """How often a still-firing alert is notified again."""
    send_resolved: StrictBool = True
    """Send a message when the alert resolves (with the bot token it updates the first
    message and replies in its thread)."""
    routes: tuple[RouteBranch, ...] = ()
    """Branches by label, tried in order: the first whose ``matchers`` the notification's
    labels satisfy sends it to its ``route`` instead."""

    @field_validator("channel", mode="before")
    @classmethod
    def _check_channel(cls, value: Any) -> Any:
        if value is not None and (not isinstance(value, str) or not _CHANNEL.match(value)):
            raise fail(
                "channel",
                f"expected a Slack channel (#alerts or a channel id), got {quoted(value)}",
            )
        return value

    @field_validator("type", mode="before")
    @classmethod
    def _check_type(cls, value: Any) -> Any:
        if value not in get_args(RouteType):
            raise fail(
                "type", f"expected one of {', '.join(get_args(RouteType))}, got {quoted(value)}"
            )
        return value

    @field_validator("alertmanager_urls", mode="before")
    @classmethod
    def _check_alertmanager_urls(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list) or not value:
            raise fail(
                "alertmanager_urls",
                f"expected a list of Alertmanager URLs (e.g. [http://alertmanager:9093]), "
                f"got {quoted(value)}",
            )
        for url in value:
            if not isinstance(url, str) or not _HTTP_URL.match(url):
                raise fail(
                    "alertmanager_urls",
                    f"expected an http:// or https:// URL without a query, got {quoted(url)}",
                )
        return tuple(value)

    @field_validator("alertmanager_urls_env", mode="before")
    @classmethod
    def _check_alertmanager_urls_env(cls, value: Any) -> Any:
        if value is not None and (not isinstance(value, str) or not _ENV_NAME.match(value)):
            raise fail(
                "env_name",
                "expected the name of an environment variable that holds the Alertmanager "
                f"URLs (e.g. ALERTMANAGER_URLS), got {quoted(value)}",
            )
        return value

    @field_validator("webhook_url_env", mode="before")
    @classmethod
    def _check_webhook_url_env(cls, value: Any, info: ValidationInfo) -> Any:
        if info.data.get("type") == ALERTMANAGER:
            return value  # refused when given (``_check_receiver``)
        has_channel = info.data.get("channel") is not None
        if value is None:
            return None if has_channel or "channel" not in info.data else DEFAULT_WEBHOOK_ENV
        if not isinstance(value, str) or not _ENV_NAME.match(value):
            raise fail(
                "env_name",
                "expected the name of an environment variable that holds the webhook URL "
                f"(e.g. SLACK_WEBHOOK_URL), got {quoted(value)}",
            )
        if has_channel:
            raise fail(
                "transport",
                "give either channel (bot token transport) or webhook_url_env (incoming "
                "webhook), not both",
            )
        return value

    @field_validator("mention", mode="before")
    @classmethod
    def _check_mention(cls, value: Any) -> Any:
        if value is not None and (
            not isinstance(value, str) or "\n" in value or len(value) > MAX_MENTION_LENGTH
        ):
            raise fail(
                "mention",
                f"expected one line of text (at most {MAX_MENTION_LENGTH} characters), "
                f"e.g. <!subteam^S0123> or <!here>; got {quoted(value)}",
            )
        return value

    @model_validator(mode="after")
    def _check_receiver(self) -> "Route":
        """An ``alertmanager`` route has its URLs (one way) and no Slack field; a Slack
        route no Alertmanager field."""
        url_fields = [f for f in _AM_URL_FIELDS if getattr(self, f)]
        if self.type == ALERTMANAGER:
            given = [f for f in SLACK_ONLY if f in self.model_fields_set]
            if given:
                raise fail(
                    given[0],
                    f"{given[0]} is a Slack route's; a type: alertmanager route takes "
                    "alertmanager_urls or alertmanager_urls_env (Alertmanager's own "
                    "configuration repeats, resolves and notifies)",
                )
            if len(url_fields) != 1:
                raise fail(
                    "alertmanager_urls",
                    "a type: alertmanager route needs exactly one of alertmanager_urls (a list "
                    "of URLs) or alertmanager_urls_env (a variable holding them)",
                )
        elif url_fields:
            raise fail(url_fields[0], f"{url_fields[0]} needs type: alertmanager on the route")
        return self

    @property
    def transport(self) -> str:
        """``"bot"`` (a channel) or ``"webhook"``."""
        return "bot" if self.channel else "webhook"
