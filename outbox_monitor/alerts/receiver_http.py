"""One JSON POST to a receiver that is not Slack (PagerDuty, a signed webhook) over urllib3,
and what its answer means: delivered, or one of ``slack_outcomes``' errors — the sender's
retry rules are the same for every receiver (429: its Retry-After; 5xx, 408, a timeout, a
refused connection: the next pass; any other 4xx: failed for good, the route goes on).
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3

from outbox_monitor.alerts.slack_outcomes import (
    DeliveryError,
    PermanentError,
    RateLimited,
    TransientError,
    redact,
    retry_after,
)

MAX_ANSWER_CHARS = 300
"""The part of a receiver's answer kept in an error (``last_error``, logs)."""


@dataclass(frozen=True)
class Answer:
    """A receiver's answer: HTTP ``status``, its ``body`` (cut to ``MAX_ANSWER_CHARS``)
    and ``headers``."""

    status: int
    body: str
    headers: Mapping[str, str]

    def json(self) -> Any:
        """The body as JSON; ``None`` when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def new_pool(timeout: float) -> urllib3.PoolManager:
    """A connection pool without urllib3's own retries (the sender owns retrying), every
    request bounded by ``timeout`` seconds (connect, and each read)."""
    return urllib3.PoolManager(
        retries=False, timeout=urllib3.Timeout(connect=timeout, read=timeout)
    )


def post_json(
    pool: urllib3.PoolManager,
    url: str,
    body: bytes,
    *,
    what: str,
    headers: Mapping[str, str] | None = None,
    secrets: tuple[str, ...] = (),
) -> Answer:
    """POST ``body`` (JSON bytes) to ``url``.

    Args:
        pool: from ``new_pool``.
        url: the receiver's URL (may hold a secret: never in an error).
        body: the encoded JSON body.
        what: the receiver, for error texts (``PagerDuty route pd``).
        headers: extra headers (the webhook's signature).
        secrets: values removed from any error text.

    Returns:
        The ``Answer`` (any status: ``classify`` says what it means).

    Raises:
        TransientError: no answer — refused, reset, timed out (``timed out`` in its text).
    """
    try:
        response = pool.request(
            "POST",
            url,
            body=body,
            headers={"Content-Type": "application/json", **(headers or {})},
            preload_content=True,
            redirect=False,
        )
    except urllib3.exceptions.NewConnectionError as error:  # a ConnectTimeoutError subclass
        text = redact(f"{what}: cannot reach the receiver: {error}", secrets)
        raise TransientError(text) from None
    except urllib3.exceptions.TimeoutError as error:
        text = redact(f"{what}: timed out waiting for an answer ({error})", secrets)
        raise TransientError(text) from None
    except urllib3.exceptions.HTTPError as error:
        text = redact(
            f"{what}: cannot reach the receiver: {type(error).__name__}: {error}", secrets
        )
        raise TransientError(text) from None
    text = response.data[:MAX_ANSWER_CHARS].decode("utf-8", "replace")
    return Answer(response.status, redact(text, secrets), dict(response.headers))


def classify(answer: Answer, what: str) -> DeliveryError:
    """The error of an answer that is not the receiver's "taken": 429 → ``RateLimited``
    (its Retry-After), 5xx and 408 → ``TransientError``, other statuses →
    ``PermanentError`` (its ``code`` ``bad_request`` for a 400, else ``refused``)."""
    text = " ".join(answer.body.split())[:200]
    if answer.status == 429:
        seconds = retry_after(answer.headers)
        return RateLimited(
            f"{what}: rate limited (HTTP 429), Retry-After {seconds:g} s",
            retry_after_seconds=seconds,
            status=429,
            code="rate_limited",
        )
    if answer.status >= 500 or answer.status == 408:
        return TransientError(
            f"{what}: receiver error HTTP {answer.status} {text}".rstrip(), status=answer.status
        )
    return PermanentError(
        f"{what}: the receiver refused the message (HTTP {answer.status}, never retried): {text}",
        status=answer.status,
        code="bad_request" if answer.status == 400 else "refused",
    )
