"""alerts.yml's ``routes``: where notifications go — a receiver of a ``type``: ``slack`` (a
channel through the bot token, or an incoming webhook named by its environment variable),
``pagerduty`` (Events API v2), ``webhook`` (a signed JSON POST) or ``alertmanager`` (one or
more Prometheus Alertmanagers, ``alerts.alertmanager``) —, validated with the field named; a
route's ``routes`` send the notifications whose labels match elsewhere (Alertmanager's child
routes: the first match wins unless it says ``continue``,
``alerts.outbox_scope.routes_for``); a route's ``group_by`` groups its notifications
(Alertmanager's ``group_by``, ``group_wait``, ``group_interval``: ``alerts.grouping``)."""

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
    LABEL_KEY,
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
ReceiverType = Literal["slack", "pagerduty", "webhook", "alertmanager"]
RECEIVER_TYPES: tuple[str, ...] = get_args(ReceiverType)
"""The receivers a route may be (``type``); ``slack`` when a route names none."""
SLACK_FIELDS = ("channel", "webhook_url_env", "mention")
"""The fields only a ``slack`` route takes."""
ALERTMANAGER = "alertmanager"
GROUPING_FIELDS = ("group_by", "group_wait", "group_interval")
"""A route's grouping (``alerts.grouping``); ``group_wait`` and ``group_interval`` only with
``group_by``."""
NOTIFYING_FIELDS = ("repeat_interval", "send_resolved", *GROUPING_FIELDS)
"""Fields of the receivers this process notifies through the notification outbox, refused on
an ``alertmanager`` route (Alertmanager groups, repeats and resolves by its own
configuration)."""
_AM_URL_FIELDS = ("alertmanager_urls", "alertmanager_urls_env")
DEFAULT_REPEAT_INTERVAL_SECONDS = 4 * 3600.0
DEFAULT_GROUP_WAIT_SECONDS = 30.0
"""A new group's first message waits this long for more instances (Alertmanager's default)."""
DEFAULT_GROUP_INTERVAL_SECONDS = 300.0
"""A group's message is updated at most this often (Alertmanager's default)."""
MAX_GROUP_BY = 20
MAX_MENTION_LENGTH = 200

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CHANNEL = re.compile(r"^#?[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
_HTTP_URL = re.compile(r"^https?://[^\s/?#]+(?:/[^\s?#]*)?$")
"""An Alertmanager's base URL: http(s), a host, an optional path prefix; no query."""


def _of_type(receiver: str) -> dict[str, Any]:
    """The JSON Schema condition "this route's ``type`` is ``receiver``"."""
    return {"required": ["type"], "properties": {"type": {"const": receiver}}}


def _fields(required: list[str], refused: list[str]) -> dict[str, Any]:
    """The JSON Schema of a receiver type's fields: ``required`` given, ``refused`` empty."""
    return {
        "required": required,
        "properties": {field: {"type": "null"} for field in refused},
    }


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
    continue_: StrictBool = Field(False, alias="continue")
    """After this branch matched, keep trying the next branches (Alertmanager's
    ``continue``): the notification goes to every matching branch up to the first without
    ``continue``, one delivery per route."""

    @field_validator("matchers", mode="before")
    @classmethod
    def _check_matchers(cls, value: Any) -> Any:
        return check_label_map("matchers", value, example="{team: payments}")

    @field_validator("route", mode="before")
    @classmethod
    def _check_route(cls, value: Any) -> Any:
        return check_route_name(value)


class Route(BaseModel):
    """One receiver of notifications, of a ``type``: ``slack`` (through exactly one
    transport: a ``channel`` with the bot token, or an incoming webhook,
    ``webhook_url_env``), ``pagerduty`` (``routing_key_env``), ``webhook`` (``url_env``,
    ``secret_env``) or ``alertmanager`` (``alertmanager_urls`` or ``alertmanager_urls_env``)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        # not both transports (``_check_webhook_url_env``); each type's fields (``_only_for``,
        # ``_receiver_env``, ``_check_alertmanager``)
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
                    "if": {"anyOf": [{"required": [f]} for f in GROUPING_FIELDS[1:]]},
                    "then": {"required": ["group_by"]},
                },
                {
                    "if": _of_type("pagerduty"),
                    "then": _fields(
                        ["routing_key_env"], ["secret_env", *SLACK_FIELDS, *_AM_URL_FIELDS]
                    ),
                },
                {
                    "if": _of_type("webhook"),
                    "then": _fields(
                        ["url_env", "secret_env"],
                        ["routing_key_env", *SLACK_FIELDS, *_AM_URL_FIELDS],
                    ),
                },
                {
                    "if": {"anyOf": [{"not": {"required": ["type"]}}, _of_type("slack")]},
                    "then": _fields(
                        [], ["routing_key_env", "url_env", "secret_env", *_AM_URL_FIELDS]
                    ),
                },
                {
                    "if": _of_type(ALERTMANAGER),
                    "then": {
                        **_fields([], ["routing_key_env", "url_env", "secret_env", *SLACK_FIELDS]),
                        "not": {"anyOf": [{"required": [f]} for f in NOTIFYING_FIELDS]},
                        "anyOf": [
                            {"required": [one], "not": {"required": [other]}}
                            for one, other in (_AM_URL_FIELDS, _AM_URL_FIELDS[::-1])
                        ],
                    },
                },
            ],
        },
    )

    type: Annotated[ReceiverType, WithJsonSchema({"enum": list(RECEIVER_TYPES)})] = "slack"
    """The receiver: ``slack`` (the default), ``pagerduty`` (Events API v2), ``webhook`` (a
    JSON body signed with HMAC-SHA256) or ``alertmanager``: every firing instance routed here
    is posted to each Alertmanager (``POST /api/v2/alerts``) every evaluation interval, its
    resolve too, and the ``Watchdog`` alert always; Alertmanager groups, inhibits, repeats
    and notifies."""
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
    routing_key_env: Annotated[
        str | None, or_null({"type": "string", "pattern": _ENV_NAME.pattern})
    ] = Field(None, validate_default=True)
    """``pagerduty`` only, required: the name of the environment variable holding the
    Events API v2 integration's routing key (never the key)."""
    url_env: Annotated[str | None, or_null({"type": "string", "pattern": _ENV_NAME.pattern})] = (
        Field(None, validate_default=True)
    )
    """``webhook``: required, the name of the environment variable holding the URL the
    messages are POSTed to. ``pagerduty``: optional, the name of a variable holding the
    Events API's base URL (default ``https://events.pagerduty.com``; ``/v2/enqueue`` is
    added)."""
    secret_env: Annotated[str | None, or_null({"type": "string", "pattern": _ENV_NAME.pattern})] = (
        Field(None, validate_default=True)
    )
    """``webhook`` only, required: the name of the environment variable holding the
    HMAC-SHA256 secret every request is signed with."""
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
    """``alertmanager``: the base URLs of the Alertmanagers (``http://alertmanager:9093``,
    with a ``--web.route-prefix`` path if any); each HA peer gets every alert. Not with
    ``alertmanager_urls_env``."""
    alertmanager_urls_env: Annotated[
        str | None, or_null({"type": "string", "pattern": _ENV_NAME.pattern})
    ] = None
    """``alertmanager``: the name of an environment variable holding the base URLs,
    separated by commas (for URLs that differ per deployment or carry credentials). Not with
    ``alertmanager_urls``."""
    group_by: Annotated[
        tuple[str, ...] | None,
        or_null(
            {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_GROUP_BY,
                "items": {"type": "string", "pattern": LABEL_KEY.pattern},
            }
        ),
    ] = None
    """Group this route's notifications by these labels (Alertmanager's ``group_by``, e.g.
    ``[rule]`` or ``[rule, event_type]``): the instances whose labels have the same values
    (a label an instance lacks counts as empty) make one message listing them, sent
    ``group_wait`` after the group's first one, updated at most every ``group_interval``
    while instances come and go, sent again after ``repeat_interval`` while they still fire;
    one PagerDuty incident per group. Labels: ``rule``, ``severity``, ``event_type``, the
    rule's ``labels``; with a fleet file ``outbox`` and the outbox's. Without it: one
    message per evaluation (Slack) or per instance (PagerDuty, webhook). Not on an
    ``alertmanager`` route (Alertmanager groups by its own ``group_by``)."""
    group_wait: PositiveDuration = DEFAULT_GROUP_WAIT_SECONDS
    """With ``group_by``: how long a new group's first message waits for more instances
    (default 30s)."""
    group_interval: PositiveDuration = DEFAULT_GROUP_INTERVAL_SECONDS
    """With ``group_by``: the shortest time between two messages of one group about
    instances that came or went (default 5m)."""
    routes: tuple[RouteBranch, ...] = ()
    """Branches by label, tried in order: the first whose ``matchers`` the notification's
    labels satisfy sends it to its ``route`` instead (and the next ones too while the
    matching branches say ``continue``)."""

    @field_validator("type", mode="before")
    @classmethod
    def _check_type(cls, value: Any) -> Any:
        if value not in RECEIVER_TYPES or not isinstance(value, str):
            raise fail(
                "receiver_type", f"expected one of {', '.join(RECEIVER_TYPES)}, got {quoted(value)}"
            )
        return value

    @field_validator("channel", mode="before")
    @classmethod
    def _check_channel(cls, value: Any, info: ValidationInfo) -> Any:
        _only_for("slack", "channel", value, info)
        if value is not None and (not isinstance(value, str) or not _CHANNEL.match(value)):
            raise fail(
                "channel",
                f"expected a Slack channel (#alerts or a channel id), got {quoted(value)}",
            )
        return value

    @field_validator("webhook_url_env", mode="before")
    @classmethod
    def _check_webhook_url_env(cls, value: Any, info: ValidationInfo) -> Any:
        _only_for("slack", "webhook_url_env", value, info)
        if info.data.get("type", "slack") != "slack":
            return None
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
    def _check_mention(cls, value: Any, info: ValidationInfo) -> Any:
        _only_for("slack", "mention", value, info)
        if value is not None and (
            not isinstance(value, str) or "\n" in value or len(value) > MAX_MENTION_LENGTH
        ):
            raise fail(
                "mention",
                f"expected one line of text (at most {MAX_MENTION_LENGTH} characters), "
                f"e.g. <!subteam^S0123> or <!here>; got {quoted(value)}",
            )
        return value

    @field_validator("routing_key_env", mode="before")
    @classmethod
    def _check_routing_key_env(cls, value: Any, info: ValidationInfo) -> Any:
        return _receiver_env(
            "routing_key_env", value, info, required_by="pagerduty", holds="routing key"
        )

    @field_validator("url_env", mode="before")
    @classmethod
    def _check_url_env(cls, value: Any, info: ValidationInfo) -> Any:
        if info.data.get("type") == "pagerduty":
            return _env_name("url_env", value, "the Events API's base URL") if value else None
        if info.data.get("type") == "slack" and value is not None:
            raise fail(
                "receiver_field",
                "only a webhook or pagerduty route takes url_env (this route's type is slack)",
            )
        return _receiver_env("url_env", value, info, required_by="webhook", holds="URL")

    @field_validator("secret_env", mode="before")
    @classmethod
    def _check_secret_env(cls, value: Any, info: ValidationInfo) -> Any:
        return _receiver_env(
            "secret_env", value, info, required_by="webhook", holds="HMAC-SHA256 secret"
        )

    @field_validator("alertmanager_urls", mode="before")
    @classmethod
    def _check_alertmanager_urls(cls, value: Any) -> Any:
        if value is None:
            return None
        return _text_list(
            "alertmanager_urls",
            value,
            _HTTP_URL,
            whole="expected a list of Alertmanager URLs (e.g. [http://alertmanager:9093])",
            each="expected an http:// or https:// URL without a query",
        )

    @field_validator("alertmanager_urls_env", mode="before")
    @classmethod
    def _check_alertmanager_urls_env(cls, value: Any) -> Any:
        return None if value is None else _env_name("alertmanager_urls_env", value, "the URLs")

    @field_validator("group_by", mode="before")
    @classmethod
    def _check_group_by(cls, value: Any) -> Any:
        if value is None:
            return None
        labels = _text_list(
            "group_by",
            value,
            LABEL_KEY,
            whole=f"expected a list of 1 to {MAX_GROUP_BY} label names (e.g. [rule, event_type])",
            each="expected label names (letters, digits and _, not starting with a digit)",
            most=MAX_GROUP_BY,
        )
        if len(set(labels)) != len(labels):
            raise fail("group_by", f"names a label twice: {quoted(value)}")
        return labels

    @model_validator(mode="after")
    def _check_grouping(self) -> "Route":
        """``group_wait`` and ``group_interval`` only with ``group_by`` (they would do
        nothing)."""
        if self.group_by is None and self.type != ALERTMANAGER:
            for name in GROUPING_FIELDS[1:]:
                if name in self.model_fields_set:
                    raise fail(
                        "receiver_field",
                        f"{name} applies only to a route with group_by (the labels whose "
                        "instances make one message); add group_by or remove it",
                    )
        return self

    @model_validator(mode="after")
    def _check_alertmanager(self) -> "Route":
        """An ``alertmanager`` route has its URLs (one way) and neither ``repeat_interval``
        nor ``send_resolved``; another route no Alertmanager field."""
        url_fields = [f for f in _AM_URL_FIELDS if getattr(self, f)]
        if self.type == ALERTMANAGER:
            given = [f for f in NOTIFYING_FIELDS if f in self.model_fields_set]
            if given:
                raise fail(
                    "receiver_field",
                    f"a type: alertmanager route takes no {given[0]} (Alertmanager's own "
                    "configuration groups, repeats, resolves and notifies: set group_by "
                    "there)",
                )
            if len(url_fields) != 1:
                raise fail(
                    "alertmanager_urls",
                    "a type: alertmanager route needs exactly one of alertmanager_urls (a list "
                    "of URLs) or alertmanager_urls_env (a variable holding them)",
                )
        elif url_fields:
            raise fail(
                "receiver_field",
                f"only an alertmanager route takes {url_fields[0]} (this route's type is "
                f"{self.type})",
            )
        return self

    @property
    def transport(self) -> str:
        """``"bot"`` (a Slack channel), ``"webhook"`` (a Slack incoming webhook),
        ``"pagerduty"``, ``"signed-webhook"`` or ``"alertmanager"``."""
        if self.type == "slack":
            return "bot" if self.channel else "webhook"
        return {"webhook": "signed-webhook"}.get(self.type, self.type)


def _text_list(
    field: str,
    value: Any,
    pattern: re.Pattern[str],
    *,
    whole: str,
    each: str,
    most: int | None = None,
) -> tuple[str, ...]:
    """``value`` as a tuple when it is a non-empty list (of at most ``most`` items) of
    texts matching ``pattern``; else the error of ``field``: ``whole`` or ``each`` and what
    it got."""
    if not isinstance(value, list) or not value or (most is not None and len(value) > most):
        raise fail(field, f"{whole}, got {quoted(value)}")
    for item in value:
        if not isinstance(item, str) or not pattern.match(item):
            raise fail(field, f"{each}, got {quoted(item)}")
    return tuple(value)


def _only_for(receiver: str, field: str, value: Any, info: ValidationInfo) -> None:
    """Refuse ``field`` given on a route whose ``type`` is not ``receiver``."""
    kind = info.data.get("type", "slack")
    if value is not None and kind != receiver:
        raise fail(
            "receiver_field",
            f"only a {receiver} route takes {field} (this route's type is {kind})",
        )


def _env_name(field: str, value: Any, holds: str) -> str:
    """``value`` when it is the name of an environment variable; else the error of ``field``."""
    if not isinstance(value, str) or not _ENV_NAME.match(value):
        raise fail(
            "env_name",
            f"expected the name of an environment variable that holds {holds}, got {quoted(value)}",
        )
    return value


def _receiver_env(
    field: str, value: Any, info: ValidationInfo, *, required_by: str, holds: str
) -> str | None:
    """A variable name of one receiver type: required on it, refused on the others."""
    if "type" not in info.data:  # the type itself is wrong: said once, there
        return None
    if info.data["type"] != required_by:
        _only_for(required_by, field, value, info)
        return None
    if value is None:
        raise fail(
            "receiver_field",
            f"a {required_by} route needs {field}: the name of the environment variable "
            f"holding its {holds}",
        )
    return _env_name(field, value, f"the {holds}")
