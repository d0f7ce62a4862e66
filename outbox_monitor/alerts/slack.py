"""Slack transports over slack-sdk (incoming webhook, bot token) and their outcome classes.

The sender owns retrying: slack-sdk is configured for at most one quick retry on a
connection error (``ConnectionErrorRetryHandler(max_retry_count=1)``) and no rate-limit
handler, so there are never two retry layers. Every failure is raised as one of
``RateLimited`` (HTTP 429, with Retry-After), ``TransientError`` (5xx, timeouts, connection
errors) or ``PermanentError`` (other 4xx, ``invalid_auth``, ``channel_not_found``, …).
Secrets (webhook URLs, tokens) never appear in errors or logs: ``redact`` removes them.
"""

import http.client
import logging
import math
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.error import URLError
from urllib.parse import urlsplit

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry import ConnectionErrorRetryHandler, FixedValueRetryIntervalCalculator
from slack_sdk.webhook import WebhookClient

from outbox_monitor.alerts.message import SlackMessage
from outbox_monitor.config import DEFAULT_SLACK_TIMEOUT_SECONDS
from outbox_monitor.errors import ConfigError, OutboxMonitorError

log = logging.getLogger(__name__)

WEBHOOK_URL_ENV = "SLACK_WEBHOOK_URL"
BOT_TOKEN_ENV = "SLACK_BOT_TOKEN"
API_URL_ENV = "SLACK_API_URL"
DEFAULT_TIMEOUT_SECONDS = DEFAULT_SLACK_TIMEOUT_SECONDS
"""``OUTBOX_MONITOR_SLACK_TIMEOUT`` (``Settings.slack_timeout``) when nobody passes it."""
QUICK_RETRY_SECONDS = 0.2
"""Pause before slack-sdk's single retry after a connection error."""
DEFAULT_RETRY_AFTER_SECONDS = 30.0
"""Used when a 429 carries no Retry-After header, or one that is not a finite,
non-negative number of seconds (``inf``, ``nan``, ``-5``, a date, garbage)."""
MAX_RETRY_AFTER_SECONDS = 3600.0
"""The longest a 429 may hold a route back: a larger Retry-After is cut to this (and
logged as a WARNING), so one odd answer cannot silence a route for a year."""

# Slack Web API error codes (HTTP 200, "ok": false) that are worth retrying later.
TRANSIENT_API_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "team_is_busy"}
)
RATE_LIMIT_API_ERRORS = frozenset({"ratelimited", "rate_limited", "message_limit_exceeded"})

_SECRET_PATTERNS = (
    (re.compile(r"xox[a-z]-[A-Za-z0-9-]+"), "xox*-<redacted>"),
    (re.compile(r"xapp-[A-Za-z0-9-]+"), "xapp-<redacted>"),
    (re.compile(r"(/services/)[^\s\"'<>|]+"), r"\1<redacted>"),
    (re.compile(r"(Bearer\s+)\S+", re.IGNORECASE), r"\1<redacted>"),
)

# slack-sdk's own logger would print request URLs (webhook secrets) at DEBUG and every
# connection failure at ERROR; the sender logs each outcome itself, redacted.
_sdk_log = logging.getLogger("outbox_monitor.alerts.slack_sdk")
_sdk_log.setLevel(logging.CRITICAL)
_sdk_log.propagate = False


def redact(text: object, secrets: tuple[str, ...] = ()) -> str:
    """Remove Slack secrets from text meant for logs, errors and the database.

    Args:
        text: any text (an exception message, a response body).
        secrets: known secret values (a webhook URL, a token) removed verbatim first.

    Returns:
        The text with tokens (``xoxb-…``), webhook paths (``/services/…``) and bearer
        values replaced by ``<redacted>``.
    """
    result = str(text)
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        result = result.replace(secret, "<redacted>")
    for pattern, replacement in _SECRET_PATTERNS:
        result = pattern.sub(replacement, result)
    return result


# ---------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Delivery:
    """Where a message landed: ``channel`` and ``ts`` (bot transport), ``None`` for webhooks."""

    channel: str | None
    ts: str | None


class DeliveryError(OutboxMonitorError):
    """A message was not delivered. ``status`` is the HTTP status (``None``: no response);
    ``code`` Slack's error code when it gave one. The message is redacted."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class RateLimited(DeliveryError):
    """HTTP 429 (or ``ratelimited``): try again after ``retry_after_seconds``."""

    def __init__(self, message: str, *, retry_after_seconds: float, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.retry_after_seconds = retry_after_seconds


class TransientError(DeliveryError):
    """5xx, a timeout or a connection error: retry with backoff."""


class PermanentError(DeliveryError):
    """A 4xx other than 429, or an API error such as ``invalid_auth`` / ``channel_not_found``:
    retrying the same request cannot succeed."""


class TransportConfigError(ConfigError):
    """A route's Slack destination cannot be built: a variable is invalid (the process
    refuses to start) or missing (``TransportNotConfigured``)."""


class TransportNotConfigured(TransportConfigError):
    """A route's Slack variable is not set: its notifications wait for a process that has
    it (the scheduler logs this at start and sends the other routes)."""


def _retry_after(headers: Mapping[str, Any] | None) -> float:
    """Seconds to wait after a 429: the ``Retry-After`` header when it is a finite,
    non-negative number, at most ``MAX_RETRY_AFTER_SECONDS`` (a larger value is cut and
    logged as a WARNING); ``DEFAULT_RETRY_AFTER_SECONDS`` when it is missing or anything
    else (also logged as a WARNING). Never raises."""
    for key, value in (headers or {}).items():
        if key.lower() == "retry-after":
            value = value[0] if isinstance(value, list | tuple) else value
            try:
                seconds = float(value)
            except (TypeError, ValueError):
                seconds = math.nan
            if not math.isfinite(seconds) or seconds < 0:
                log.warning(
                    "Slack answered 429 with an unusable Retry-After %r; waiting the default %g s",
                    str(value)[:40],
                    DEFAULT_RETRY_AFTER_SECONDS,
                )
                return DEFAULT_RETRY_AFTER_SECONDS
            if seconds > MAX_RETRY_AFTER_SECONDS:
                log.warning(
                    "Slack answered 429 with Retry-After %g s; waiting at most %g s "
                    "(MAX_RETRY_AFTER_SECONDS)",
                    seconds,
                    MAX_RETRY_AFTER_SECONDS,
                )
                return MAX_RETRY_AFTER_SECONDS
            return seconds
    return DEFAULT_RETRY_AFTER_SECONDS


def _classify_status(
    status: int, code: str, headers: Mapping[str, Any] | None, what: str
) -> DeliveryError:
    if status == 429 or code in RATE_LIMIT_API_ERRORS:
        seconds = _retry_after(headers)
        return RateLimited(
            f"{what}: rate limited by Slack (HTTP {status}), Retry-After {seconds:g} s",
            retry_after_seconds=seconds,
            status=status,
            code=code or "rate_limited",
        )
    if status >= 500 or code in TRANSIENT_API_ERRORS:
        return TransientError(
            f"{what}: Slack error HTTP {status} {code}".rstrip(), status=status, code=code
        )
    return PermanentError(
        f"{what}: Slack refused the message: HTTP {status} {code}".rstrip(),
        status=status,
        code=code,
    )


def _classify_exception(error: BaseException, what: str) -> DeliveryError:
    """Map a transport exception (no HTTP response) to an outcome class."""
    if isinstance(error, SlackApiError):
        response = error.response
        data = response.data if isinstance(response.data, dict) else {}
        code = str(data.get("error") or "")
        return _classify_status(int(response.status_code), code, response.headers, what)
    reason = error.reason if isinstance(error, URLError) else error
    if isinstance(reason, TimeoutError | socket.timeout):
        return TransientError(f"{what}: timed out waiting for Slack ({reason or 'timeout'})")
    if isinstance(error, URLError | OSError | http.client.HTTPException):
        return TransientError(f"{what}: cannot reach Slack: {type(reason).__name__}: {reason}")
    if isinstance(error, SlackClientError):
        return PermanentError(f"{what}: {type(error).__name__}: {error}")
    return TransientError(f"{what}: unexpected {type(error).__name__}: {error}")


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
        """Post ``message``; returns ``Delivery(None, None)``.

        Raises:
            RateLimited, TransientError, PermanentError (redacted messages).
        """
        what = "incoming webhook"
        try:
            response = self._client.send(
                text=message.text, blocks=message.blocks, unfurl_links=False, unfurl_media=False
            )
        except Exception as error:
            raise self._redacted(_classify_exception(error, what)) from None
        if response.status_code != 200:
            code = redact(" ".join(str(response.body or "").split())[:200], self.secrets)
            raise self._redacted(
                _classify_status(response.status_code, code, response.headers, what)
            )
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
            failure = _classify_exception(error, what)
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
        route: a ``rules.Route`` (``channel``, ``webhook_url_env``).
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
