"""alerts.yml's ``routes``: where notifications go (a Slack channel through the bot token, or
an incoming webhook named by its environment variable), validated with the field named; a
route's ``routes`` send the notifications whose labels match elsewhere (Alertmanager's child
routes, first match wins: ``alerts.outbox_scope.route_for``)."""

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from outbox_monitor.alerts.rule_values import (
    PositiveDuration,
    check_label_map,
    check_route_name,
    fail,
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
    ``matchers`` (label: value; a value with ``%`` is a LIKE pattern, as in silences) go to
    the route named ``route`` instead. Labels: the instance's (``rule``, ``severity``,
    ``event_type``, the rule's ``labels``) and, with a fleet file, ``outbox`` and the
    outbox's labels (``team: payments``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    matchers: dict[str, str]
    route: str

    @field_validator("matchers", mode="before")
    @classmethod
    def _check_matchers(cls, value: Any) -> Any:
        return check_label_map("matchers", value, example="{team: payments}")

    @field_validator("route", mode="before")
    @classmethod
    def _check_route(cls, value: Any) -> Any:
        return check_route_name(value)


class Route(BaseModel):
    """One destination of notifications (``routes.<name>``).

    Exactly one transport: ``channel`` (bot token ``SLACK_BOT_TOKEN``, ``#name`` or a
    channel id) or ``webhook_url_env`` (name of the environment variable holding an
    incoming-webhook URL; ``SLACK_WEBHOOK_URL`` when the route names neither).
    ``mention`` (e.g. ``<!subteam^S0123>``) is sent as written, only from here.
    ``repeat_interval`` (seconds, 4 h by default) re-notifies a still-firing alert;
    ``send_resolved`` sends a message when it resolves. ``routes``: ``RouteBranch``es,
    tried in order; the first whose matchers the labels satisfy takes the notification
    (one level: a branch's route has no ``routes`` of its own).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: str | None = None
    webhook_url_env: str | None = Field(None, validate_default=True)
    mention: str | None = None
    repeat_interval: PositiveDuration = DEFAULT_REPEAT_INTERVAL_SECONDS
    send_resolved: StrictBool = True
    routes: tuple[RouteBranch, ...] = ()

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
