"""The ``webhook`` receiver: each notification as one JSON POST, signed with HMAC-SHA256.

The body is ``body(row)`` (documented in docs/alerts.md, "Webhook receiver"). Three headers
go with it: ``X-Outbox-Monitor-Timestamp`` (Unix seconds of this attempt),
``X-Outbox-Monitor-Message-Id`` (the message's ``message_key``: the same for every attempt
and re-send of one message, a resolve and the next episode have their own) and
``X-Outbox-Monitor-Signature`` (``v1=`` and the hex HMAC-SHA256, under the route's secret,
of ``<timestamp>.<message id>.<body>``). A receiver refuses a timestamp more than 5 minutes
off and a message id it has seen, so a captured request cannot be replayed and a re-send
after a leader's crash is dropped.

A 2xx is delivered, unless its body is JSON with ``"ok": false`` (the receiver says it did
not take it: retried); 429, 408, 5xx and no answer are retried; any other 4xx fails for good.
"""

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from outbox_monitor.alerts.message import dashboard_link
from outbox_monitor.alerts.message_key import row_alert_key, row_message_key
from outbox_monitor.alerts.receiver_http import classify, new_pool, post_json
from outbox_monitor.alerts.slack_outcomes import Delivery, TransientError

BODY_VERSION = 1
TIMESTAMP_HEADER = "X-Outbox-Monitor-Timestamp"
MESSAGE_ID_HEADER = "X-Outbox-Monitor-Message-Id"
SIGNATURE_HEADER = "X-Outbox-Monitor-Signature"
SIGNATURE_VERSION = "v1"
PAYLOAD_FIELDS = (
    "severity",
    "summary",
    "metric",
    "op",
    "threshold",
    "value",
    "unit",
    "since",
    "resolved_at",
    "labels",
    "episode",
    "runbook_url",
    "runbook",
    "error",
)
"""The payload's fields copied into the body as they are (absent ones are ``null``)."""


def body(row: Mapping[str, Any], *, route: str, dashboard_url: str) -> dict[str, Any]:
    """The JSON body of one notification row (docs/alerts.md, "Webhook receiver").

    Returns:
        ``version`` (1), ``message_id`` (``row_message_key``), ``alert_key``
        (``row_alert_key``: one episode), ``kind`` (``firing``, ``repeat``, ``error``,
        ``resolved``, ``test``), ``status`` (``resolved`` for a resolve, ``test`` for a
        test, else ``firing``), ``route``, ``outbox``, ``rule``, ``instance``,
        ``dashboard_url`` and ``PAYLOAD_FIELDS``.
    """
    payload = row.get("payload") or {}
    kind = row["kind"]
    status = kind if kind in ("resolved", "test") else "firing"
    return {
        "version": BODY_VERSION,
        "message_id": row_message_key(row),
        "alert_key": row_alert_key(row),
        "kind": kind,
        "status": status,
        "route": route,
        "outbox": payload.get("outbox") or row.get("outbox") or "",
        "rule": row["rule"],
        "instance": row.get("instance") or "",
        "dashboard_url": dashboard_link(dashboard_url, payload.get("dashboard_path") or "/"),
        **{field: payload.get(field) for field in PAYLOAD_FIELDS},
    }


def group_body(message: Any, *, route: str, dashboard_url: str) -> dict[str, Any]:
    """The JSON body of a group's message (``grouping.GroupMessage``; docs/receivers.md).

    Returns:
        ``version``, ``message_id`` (``<group key>:<kind>``), ``alert_key`` (the group
        episode's key), ``kind`` (``firing``, ``update``, ``repeat``, ``resolved``),
        ``status`` (``resolved`` when every instance resolved, else ``firing``), ``route``,
        ``outbox``, ``rule`` and ``instance`` ``null``, ``dashboard_url`` (the Alerts page)
        and ``group``: ``labels``, ``episode``, ``firing``, ``resolved`` (counts) and
        ``instances`` (each: ``rule``, ``instance``, ``status``, ``changed``, ``summary``,
        ``severity``, ``value``, ``unit``, ``since``, ``resolved_at``, ``labels``,
        ``episode``, ``dashboard_url``).
    """
    listed = message.instances()
    for item in listed:
        item["dashboard_url"] = dashboard_link(dashboard_url, item.pop("dashboard_path") or "/")
    firing = sum(1 for item in listed if item["status"] != "resolved")
    return {
        "version": BODY_VERSION,
        "message_id": message.message_key,
        "alert_key": message.alert_key,
        "kind": message.kind.split("-")[0],
        "status": message.status,
        "route": route,
        "outbox": message.outbox,
        "rule": None,
        "instance": None,
        "dashboard_url": dashboard_link(dashboard_url, "/alerts"),
        "group": {
            "labels": message.labels,
            "episode": message.episode,
            "firing": firing,
            "resolved": len(listed) - firing,
            "instances": listed,
        },
    }


def signature(secret: str, timestamp: str, message_id: str, raw_body: bytes) -> str:
    """``v1=`` and the hex HMAC-SHA256 under ``secret`` of ``<timestamp>.<message id>.<body>``
    (UTF-8; the body as sent, byte for byte)."""
    signed = f"{timestamp}.{message_id}.".encode() + raw_body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


class SignedWebhookTransport:
    """POSTs one notification row, signed (``signature``).

    Args:
        route: the route's name (in the body and errors).
        url: the receiver's URL (may carry a token: never logged).
        secret: the HMAC secret.
        timeout: seconds for the connection and for each read.
        clock: Unix seconds now (the timestamp header); ``time.time``.
    """

    kind = "signed-webhook"
    packs = False
    supports_threads = False

    def __init__(
        self,
        route: str,
        url: str,
        secret: str,
        *,
        timeout: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._route = route
        self._what = f"webhook route {route}"
        self._url = url
        self._secret = secret
        self._clock = clock
        self._pool = new_pool(timeout)
        self.secrets = tuple(s for s in (url, secret) if len(s) >= 8)

    def describe(self) -> str:
        """``signed webhook of route <name>`` (the URL may hold a token: not shown)."""
        return f"signed webhook of route {self._route}"

    def deliver(self, row: Mapping[str, Any], *, dashboard_url: str) -> Delivery:
        """POST the row's body, signed with a fresh timestamp.

        Raises:
            PermanentError: a 4xx other than 408 and 429 (never retried).
            RateLimited: 429. TransientError: 5xx, 408, timeouts, no answer, or a 2xx
            whose body is JSON with ``"ok": false``.
        """
        return self._post(body(row, route=self._route, dashboard_url=dashboard_url))

    def deliver_group(self, message: Any, *, dashboard_url: str) -> Delivery:
        """POST a group's message (``group_body``), signed; raises as ``deliver``."""
        return self._post(group_body(message, route=self._route, dashboard_url=dashboard_url))

    def _post(self, document: dict[str, Any]) -> Delivery:
        raw = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
        timestamp = str(int(self._clock()))
        message_id = document["message_id"]
        answer = post_json(
            self._pool,
            self._url,
            raw,
            what=self._what,
            secrets=self.secrets,
            headers={
                TIMESTAMP_HEADER: timestamp,
                MESSAGE_ID_HEADER: message_id,
                SIGNATURE_HEADER: signature(self._secret, timestamp, message_id, raw),
            },
        )
        if not 200 <= answer.status < 300:
            raise classify(answer, self._what)
        reply = answer.json()
        if isinstance(reply, dict) and reply.get("ok") is False:
            raise TransientError(
                f'{self._what}: HTTP {answer.status} with "ok": false ({answer.body[:120]!r}): '
                "not taken, retrying",
                status=answer.status,
            )
        return Delivery(None, None)
