"""What a Slack call came to: ``Delivery`` (where a message landed) or one of the outcome
errors, told apart from Slack's HTTP status, API error code or the client's exception.

Every failure is one of ``RateLimited`` (HTTP 429, with Retry-After), ``TransientError``
(5xx, timeouts, connection errors) or ``PermanentError`` (other 4xx, ``invalid_auth``,
``channel_not_found``, …). Secrets (webhook URLs, tokens) never appear in errors or logs:
``redact`` removes them.
"""

import http.client
import json
import logging
import math
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.error import URLError

from slack_sdk.errors import SlackApiError, SlackClientError

from outbox_monitor.errors import OutboxMonitorError

# The Retry-After warnings keep the name they were logged under before this module was
# split from ``slack`` (log filters and tests know them by it).
log = logging.getLogger("outbox_monitor.alerts.slack")

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
WEBHOOK_OK = "ok"
"""The one body of an incoming webhook's answer that means the message was posted."""
PERMANENT_WEBHOOK_ANSWERS = frozenset(
    {
        "invalid_payload",
        "user_not_found",
        "action_prohibited",
        "channel_not_found",
        "channel_is_archived",
        "no_service",
        "no_service_id",
        "no_team",
        "team_disabled",
        "invalid_token",
        "posting_to_general_channel_denied",
        "too_many_attachments",
        "invalid_blocks",
        "invalid_blocks_format",
        "missing_text_or_fallback_or_attachments",
    }
)
"""Incoming-webhook answers that no retry can change (Slack's "Handling errors" list of
incoming webhooks and its 2016-05-17 changelog: a disabled or deleted webhook, an archived
or missing channel, a workspace restriction, a malformed message). Answered with HTTP 200
(some proxies and old webhooks do) or a 4xx, they fail the message at once, so that the
route's next message is not held behind it; any other body is retried like a 5xx."""
_ANSWER_LABEL = re.compile(r"^[a-z_]{1,60}$")

_SECRET_PATTERNS = (
    (re.compile(r"xox[a-z]-[A-Za-z0-9-]+"), "xox*-<redacted>"),
    (re.compile(r"xapp-[A-Za-z0-9-]+"), "xapp-<redacted>"),
    (re.compile(r"(/services/)[^\s\"'<>|]+"), r"\1<redacted>"),
    (re.compile(r"(Bearer\s+)\S+", re.IGNORECASE), r"\1<redacted>"),
)


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


def retry_after(headers: Mapping[str, Any] | None) -> float:
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


def classify_status(
    status: int, code: str, headers: Mapping[str, Any] | None, what: str
) -> DeliveryError:
    """Map Slack's answer (HTTP status, API error code) to an outcome class."""
    if status == 429 or code in RATE_LIMIT_API_ERRORS:
        seconds = retry_after(headers)
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


def classify_webhook_answer(
    status: int, body: str, headers: Mapping[str, Any] | None
) -> DeliveryError | None:
    """What an incoming webhook's answer means: ``None`` when it posted (HTTP 200 and the
    body ``ok``, or the JSON ``{"ok": true}`` a Slack workflow's webhook answers: retrying
    that would post it again), else the outcome error.

    Args:
        status: the HTTP status.
        body: the answer's body (already redacted and cut by the caller).
        headers: the answer's headers (``Retry-After``).

    Returns:
        ``None`` (posted); ``PermanentError`` for a known permanent answer
        (``PERMANENT_WEBHOOK_ANSWERS``) whatever its status, and for other 4xx;
        ``RateLimited`` for a 429; ``TransientError`` for a 5xx and for a 200 whose body is
        neither ``ok`` nor a known answer (a proxy's page, an unknown text).
    """
    code = " ".join(body.split())[:200]
    what = "incoming webhook"
    if status == 200 and (code == WEBHOOK_OK or _json_ok(body)):
        return None
    if code in PERMANENT_WEBHOOK_ANSWERS:
        return PermanentError(
            f"{what}: Slack refused the message: HTTP {status} {code}", status=status, code=code
        )
    if status == 200:
        return TransientError(
            f"{what}: HTTP 200 without the body 'ok' (got {code[:80]!r}): not posted, retrying",
            status=status,
            code=code,
        )
    return classify_status(status, code, headers, what)


def _json_ok(body: str) -> bool:
    """Whether ``body`` is a JSON object whose ``ok`` is ``true``."""
    try:
        answer = json.loads(body)
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("ok") is True


def answer_label(code: str | None) -> str:
    """Slack's answer as a ``/metrics`` label: its error code when it is one
    (lower-case letters and ``_``, at most 60), else ``other`` (a bounded label)."""
    return code if code and _ANSWER_LABEL.match(code) else "other"


def classify_exception(error: BaseException, what: str) -> DeliveryError:
    """Map a transport exception (no HTTP response) to an outcome class."""
    if isinstance(error, SlackApiError):
        response = error.response
        data = response.data if isinstance(response.data, dict) else {}
        code = str(data.get("error") or "")
        return classify_status(int(response.status_code), code, response.headers, what)
    reason = error.reason if isinstance(error, URLError) else error
    if isinstance(reason, TimeoutError | socket.timeout):
        return TransientError(f"{what}: timed out waiting for Slack ({reason or 'timeout'})")
    if isinstance(error, URLError | OSError | http.client.HTTPException):
        return TransientError(f"{what}: cannot reach Slack: {type(reason).__name__}: {reason}")
    if isinstance(error, SlackClientError):
        return PermanentError(f"{what}: {type(error).__name__}: {error}")
    return TransientError(f"{what}: unexpected {type(error).__name__}: {error}")
