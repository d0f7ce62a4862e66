"""Slack transports over slack-sdk (incoming webhook, bot token), built per route of
alerts.yml from the environment.

The sender owns retrying: slack-sdk is configured for at most one quick retry on a
connection error (``ConnectionErrorRetryHandler(max_retry_count=1)``) and no rate-limit
handler, so there are never two retry layers. Every failure is raised as one of the outcome
errors of ``slack_outcomes``, its message redacted.
"""

import logging
import os
import re
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from slack_sdk import WebClient
from slack_sdk.http_retry import ConnectionErrorRetryHandler, FixedValueRetryIntervalCalculator
from slack_sdk.webhook import WebhookClient

from outbox_monitor.alerts.message import SlackMessage
from outbox_monitor.alerts.route_model import ALERTMANAGER
from outbox_monitor.alerts.slack_outcomes import (
    Delivery,
    DeliveryError,
    PermanentError,
    classify_exception,
    classify_webhook_answer,
    redact,
)
from outbox_monitor.config.settings import DEFAULT_SLACK_TIMEOUT_SECONDS
from outbox_monitor.errors import ConfigError

WEBHOOK_URL_ENV = "SLACK_WEBHOOK_URL"
BOT_TOKEN_ENV = "SLACK_BOT_TOKEN"
API_URL_ENV = "SLACK_API_URL"
DEFAULT_TIMEOUT_SECONDS = DEFAULT_SLACK_TIMEOUT_SECONDS
"""``OUTBOX_MONITOR_SLACK_TIMEOUT`` (``Settings.slack_timeout``) when nobody passes it."""
QUICK_RETRY_SECONDS = 0.2
"""Pause before slack-sdk's single retry after a connection error."""

# slack-sdk's own logger would print request URLs (webhook secrets) at DEBUG and every
# connection failure at ERROR; the sender logs each outcome itself, redacted.
_sdk_log = logging.getLogger("outbox_monitor.alerts.slack_sdk")
_sdk_log.setLevel(logging.CRITICAL)
_sdk_log.propagate = False


class TransportConfigError(ConfigError):
    """A route's Slack destination cannot be built: a variable is invalid (the process
    refuses to start) or missing (``TransportNotConfigured``)."""


class TransportNotConfigured(TransportConfigError):
    """A route's Slack variable is not set: its notifications wait for a process that has
    it (the scheduler logs this at start and sends the other routes)."""


# ---------------------------------------------------------------------------- transports


class Transport(Protocol):
    """What the sender needs of a Slack destination."""

    kind: str
    """``"webhook"`` or ``"bot"``."""
    supports_threads: bool
    """Whether ``update`` and ``reply`` work (bot transport only)."""
    secrets: tuple[str, ...]
    """Its secret values (webhook URL and path, token), for ``redact``."""

    def post(self, message: SlackMessage) -> Delivery: ...

    def update(self, channel: str, ts: str, message: SlackMessage) -> Delivery: ...

    def reply(self, channel: str, thread_ts: str, message: SlackMessage) -> Delivery: ...

    def describe(self) -> str: ...


def _retry_handlers(quick_retry_seconds: float) -> list[ConnectionErrorRetryHandler]:
    return [
        ConnectionErrorRetryHandler(
            max_retry_count=1,
            interval_calculator=FixedValueRetryIntervalCalculator(quick_retry_seconds),
        )
    ]


class WebhookTransport:
    """Posts through an incoming webhook (``slack_sdk.webhook.WebhookClient``).

    Args:
        url: the webhook URL (a secret: never logged).
        timeout: client timeout in seconds (connect + each read), default 10.
        quick_retry_seconds: pause before slack-sdk's one retry after a connection error.

    Incoming webhooks cannot update or thread: ``supports_threads`` is ``False``.
    """

    kind = "webhook"
    supports_threads = False

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        quick_retry_seconds: float = QUICK_RETRY_SECONDS,
    ) -> None:
        if not re.match(r"^https?://", url or ""):
            raise TransportConfigError(
                f"the Slack webhook URL must start with https:// (got {redact(url)[:40]!r})",
                hint="Copy the incoming-webhook URL from the Slack app's configuration.",
            )
        self._url = url
        path = urlsplit(url).path
        last = path.rstrip("/").rsplit("/", 1)[-1]
        self.secrets = tuple(s for s in (url, path, last) if len(s) >= 8)
        self._client = WebhookClient(
            url,
            timeout=timeout,  # type: ignore[arg-type]
            retry_handlers=_retry_handlers(quick_retry_seconds),
            logger=_sdk_log,
        )

    def describe(self) -> str:
        """``"incoming webhook <scheme://host>/services/<redacted>"`` — safe to show."""
        parts = urlsplit(self._url)
        return f"incoming webhook {parts.scheme}://{parts.netloc}/<redacted>"

    def post(self, message: SlackMessage) -> Delivery:
        """Post ``message``; returns ``Delivery(None, None)``. Only HTTP 200 with the body
        ``ok`` is a delivery (``classify_webhook_answer``).

        Raises:
            RateLimited, TransientError, PermanentError (redacted messages).
        """
        what = "incoming webhook"
        try:
            response = self._client.send(
                text=message.text,
                blocks=message.blocks,
                unfurl_links=False,
                unfurl_media=False,
                metadata=message.metadata,
            )
        except Exception as error:
            raise self._redacted(classify_exception(error, what)) from None
        body = redact(" ".join(str(response.body or "").split())[:200], self.secrets)
        failure = classify_webhook_answer(response.status_code, body, response.headers)
        if failure is not None:
            raise self._redacted(failure)
        return Delivery(None, None)

    def update(self, channel: str, ts: str, message: SlackMessage) -> Delivery:
        """Not possible with an incoming webhook (raises ``PermanentError``)."""
        raise PermanentError("incoming webhooks cannot update a message (use a bot token)")

    def reply(self, channel: str, thread_ts: str, message: SlackMessage) -> Delivery:
        """Not possible with an incoming webhook (raises ``PermanentError``)."""
        raise PermanentError("incoming webhooks cannot reply in a thread (use a bot token)")

    def _redacted(self, error: DeliveryError) -> DeliveryError:
        error.args = (redact(error.args[0], self.secrets),)
        return error


class BotTransport:
    """Posts, updates and replies with a bot token (``slack_sdk.WebClient``).

    Args:
        token: the bot token ``xoxb-…`` (a secret: never logged).
        channel: the channel name (``#alerts``) or id to post to.
        base_url: the Web API base (``SLACK_API_URL``; the local sink's ``api_url``),
            default ``https://slack.com/api/``.
        timeout: client timeout in seconds, default 10.
        quick_retry_seconds: pause before slack-sdk's one retry after a connection error.
    """

    kind = "bot"
    supports_threads = True

    def __init__(
        self,
        token: str,
        channel: str,
        base_url: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        quick_retry_seconds: float = QUICK_RETRY_SECONDS,
    ) -> None:
        self._token = token
        self.secrets = (token,)
        self.channel = channel
        self.base_url = base_url or WebClient.BASE_URL
        self._client = WebClient(
            token=token,
            base_url=self.base_url,
            timeout=timeout,  # type: ignore[arg-type]
            retry_handlers=_retry_handlers(quick_retry_seconds),
            logger=_sdk_log,
        )

    def describe(self) -> str:
        """``"bot token → #alerts via https://slack.com/api/"`` — safe to show."""
        return f"bot token → {self.channel} via {redact(self.base_url)}"

    def _call(self, what: str, method: str, **kwargs: Any) -> Delivery:
        try:
            response = getattr(self._client, method)(**kwargs)
        except Exception as error:
            failure = classify_exception(error, what)
            failure.args = (redact(failure.args[0], self.secrets),)
            raise failure from None
        return Delivery(response.get("channel"), response.get("ts"))

    def post(self, message: SlackMessage) -> Delivery:
        """``chat.postMessage`` to the route's channel; returns its channel id and ts.

        Raises:
            RateLimited, TransientError, PermanentError (redacted messages).
        """
        return self._call(
            f"chat.postMessage to {self.channel}",
            "chat_postMessage",
            channel=self.channel,
            **message.as_payload(),
        )

    def update(self, channel: str, ts: str, message: SlackMessage) -> Delivery:
        """``chat.update`` of the message ``ts`` in ``channel`` (ids as returned by ``post``)."""
        return self._call(
            f"chat.update in {channel}",
            "chat_update",
            channel=channel,
            ts=ts,
            text=message.text,
            blocks=message.blocks,
        )

    def reply(self, channel: str, thread_ts: str, message: SlackMessage) -> Delivery:
        """``chat.postMessage`` in the thread of ``thread_ts``; returns the reply's ts."""
        return self._call(
            f"thread reply in {channel}",
            "chat_postMessage",
            channel=channel,
            thread_ts=thread_ts,
            **message.as_payload(),
        )


def _http_url(variable: str, value: str) -> str:
    """``value`` when it is an http(s) URL with a host; else ``TransportConfigError``
    naming ``variable`` (the value is redacted: it may hold a webhook secret), also when
    ``urlsplit`` cannot split it (``http://[::1/x``: an unclosed IPv6 bracket)."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (reading it checks the port: http://host:99999/ raises)
    except ValueError as error:
        raise TransportConfigError(
            f"{variable}: not a valid URL ({error}), got {redact(value)[:40]!r}",
            hint=f"Set {variable} to the URL Slack gave (or unset it).",
        ) from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise TransportConfigError(
            f"{variable}: expected an http(s):// URL, got {redact(value)[:40]!r}",
            hint=f"Set {variable} to the URL Slack gave (or unset it).",
        )
    return value


def transport_for_route(
    name: str,
    route: Any,
    env: Mapping[str, str],
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    quick_retry_seconds: float = QUICK_RETRY_SECONDS,
) -> Transport:
    """Build the transport of one route of alerts.yml.

    Resolution: ``webhook_url_env`` → that variable's webhook URL; else ``channel`` →
    ``SLACK_BOT_TOKEN`` (+ ``SLACK_API_URL`` as base URL when set); else
    ``SLACK_WEBHOOK_URL``.

    Args:
        name: the route's name (for messages).
        route: a ``route_model.Route`` (``channel``, ``webhook_url_env``).
        env: the environment (``os.environ`` or a dict in tests).
        timeout: client timeout in seconds (``Settings.slack_timeout``,
            ``OUTBOX_MONITOR_SLACK_TIMEOUT``).
        quick_retry_seconds: pause before slack-sdk's one retry after a connection error.

    Raises:
        TransportNotConfigured: the route's variable is not set, naming the route and it.
        TransportConfigError: a variable is set to something that is not an http(s) URL
            (``SLACK_WEBHOOK_URL``, a ``webhook_url_env``, ``SLACK_API_URL``), naming it.
    """
    webhook_env = getattr(route, "webhook_url_env", None)
    channel = getattr(route, "channel", None)
    if webhook_env:
        url = env.get(webhook_env, "").strip()
        if not url:
            raise TransportNotConfigured(
                f'alerts.yml route "{name}": webhook_url_env names {webhook_env}, which is not set',
                hint=f"Export {webhook_env}=<incoming-webhook URL> (the secret stays out of "
                "alerts.yml).",
            )
        return WebhookTransport(
            _http_url(webhook_env, url), timeout=timeout, quick_retry_seconds=quick_retry_seconds
        )
    if channel:
        token = env.get(BOT_TOKEN_ENV, "").strip()
        if not token:
            raise TransportNotConfigured(
                f'alerts.yml route "{name}": channel {channel} needs {BOT_TOKEN_ENV}, which '
                "is not set",
                hint=f"Export {BOT_TOKEN_ENV}=xoxb-… of a Slack app invited to {channel}.",
            )
        base_url = env.get(API_URL_ENV, "").strip() or None
        return BotTransport(
            token,
            channel,
            base_url and _http_url(API_URL_ENV, base_url),
            timeout=timeout,
            quick_retry_seconds=quick_retry_seconds,
        )
    url = env.get(WEBHOOK_URL_ENV, "").strip()
    if not url:
        raise TransportNotConfigured(
            f'alerts.yml route "{name}" has neither channel nor webhook_url_env, and '
            f"{WEBHOOK_URL_ENV} is not set",
            hint=f"Export {WEBHOOK_URL_ENV}, or give the route a channel and export "
            f"{BOT_TOKEN_ENV}.",
        )
    return WebhookTransport(
        _http_url(WEBHOOK_URL_ENV, url), timeout=timeout, quick_retry_seconds=quick_retry_seconds
    )


def transports_for(
    ruleset: Any,
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    quick_retry_seconds: float = QUICK_RETRY_SECONDS,
) -> dict[str, Transport]:
    """Build one transport per route of a rule set.

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
            missing a variable.
    """
    environment = os.environ if env is None else env
    transports: dict[str, Transport] = {}
    problems: list[TransportConfigError] = []
    for name, route in ruleset.routes.items():
        if route.type == ALERTMANAGER:
            continue  # posted by alerts.alertmanager, never through Slack
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
