"""alerts.yml's ``routes``: where notifications go (a Slack channel through the bot token, or
an incoming webhook named by its environment variable), validated with the field named; a
route's ``routes`` send the notifications whose labels match elsewhere (Alertmanager's child
routes, first match wins: ``alerts.outbox_scope.route_for``)."""

import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
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
    """One destination of notifications, through exactly one transport: a ``channel`` (the
    bot token) or an incoming webhook (``webhook_url_env``)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        # not both transports (``_check_webhook_url_env``)
        json_schema_extra={
            "not": {
                "required": ["channel", "webhook_url_env"],
                "properties": {
                    "channel": {"type": "string"},
                    "webhook_url_env": {"type": "string"},
                },
            }
        },
    )

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

    @field_validator("webhook_url_env", mode="before")
    @classmethod
    def _check_webhook_url_env(cls, value: Any, info: ValidationInfo) -> Any:
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

    @property
    def transport(self) -> str:
        """``"bot"`` (a channel) or ``"webhook"``."""
        return "bot" if self.channel else "webhook"
