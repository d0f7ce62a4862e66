"""The ``pagerduty`` receiver: PagerDuty Events API v2 (``POST {base}/v2/enqueue``).

One event per notification: a firing, repeat or evaluation error is a ``trigger``, a
resolve a ``resolve`` (and a press of Slack's Acknowledge an ``acknowledge``), all of one
episode under the same ``dedup_key`` — the episode's
``message_key.alert_key`` (68 characters, whatever the instance holds): PagerDuty merges a
repeated trigger (a leader's crash re-sends it) into the open incident, a resolve closes it,
and the next episode opens a new one. HTTP 202 is delivered; 400 (an invalid event) fails
for good, never retried; 429, 5xx and timeouts are retried by the sender.
"""

import json
from collections.abc import Mapping
from typing import Any

from outbox_monitor.alerts.message import dashboard_link
from outbox_monitor.alerts.message_key import row_alert_key, row_message_key
from outbox_monitor.alerts.receiver_http import Answer, classify, new_pool, post_json
from outbox_monitor.alerts.slack_outcomes import Delivery, TransientError

DEFAULT_EVENTS_URL = "https://events.pagerduty.com"
"""The Events API's base URL when the route names no ``url_env``."""
ENQUEUE_PATH = "/v2/enqueue"
MAX_SUMMARY_CHARS = 1024
"""PagerDuty's limit of ``payload.summary``."""
MAX_FIELD_CHARS = 255
"""The longest ``component``, ``group`` or ``class`` sent (an event type can be 100 kB)."""
MAX_DETAIL_CHARS = 2000
"""The longest instance key in ``custom_details``."""
SEVERITIES = {"critical": "critical", "warning": "warning", "info": "info"}
"""Our severities → PagerDuty's; an evaluation error (kind ``error``) is ``error``."""


def event(row: Mapping[str, Any], routing_key: str, dashboard_url: str) -> dict[str, Any]:
    """The Events API v2 body of one notification row.

    Args:
        row: a notification row (``rule``, ``instance``, ``kind``, ``payload``,
            ``dedupe_key``, ``outbox``).
        routing_key: the integration's routing key.
        dashboard_url: the dashboard's base URL (links).

    Returns:
        ``{"routing_key", "event_action", "dedup_key", ...}``: a ``resolve`` carries only
        those three; a ``trigger`` its ``payload`` (summary, source, severity, component,
        group, class, custom_details), ``links``, ``client`` and ``client_url``.
    """
    body: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "resolve" if row["kind"] == "resolved" else "trigger",
        "dedup_key": row_alert_key(row),
    }
    if body["event_action"] == "resolve":
        return body
    payload = row.get("payload") or {}
    labels = payload.get("labels") or {}
    outbox = payload.get("outbox") or row.get("outbox") or ""
    link = dashboard_link(dashboard_url, payload.get("dashboard_path") or "/")
    body["payload"] = {
        "summary": str(payload.get("summary") or row["rule"])[:MAX_SUMMARY_CHARS],
        "source": outbox or "outbox-monitor",
        "severity": "error"
        if row["kind"] == "error"
        else SEVERITIES.get(str(payload.get("severity")), "warning"),
        "component": str(labels.get("event_type") or "outbox")[:MAX_FIELD_CHARS],
        "group": (outbox or "default")[:MAX_FIELD_CHARS],
        "class": str(payload.get("metric") or row["rule"])[:MAX_FIELD_CHARS],
        "custom_details": {
            "rule": row["rule"],
            "instance": str(row.get("instance") or "")[:MAX_DETAIL_CHARS],
            "kind": row["kind"],
            "value": payload.get("value"),
            "op": payload.get("op"),
            "threshold": payload.get("threshold"),
            "unit": payload.get("unit"),
            "since": payload.get("since"),
            "runbook": payload.get("runbook") or [],
            "error": payload.get("error"),
            "message_key": row_message_key(row),
        },
    }
    body["links"] = [{"href": link, "text": "Dashboard"}]
    if payload.get("runbook_url"):
        body["links"].append({"href": payload["runbook_url"], "text": "Runbook"})
    body["client"] = "outbox-monitor"
    body["client_url"] = link
    return body


MAX_GROUP_INSTANCES = 50
"""Instances listed in a group's ``custom_details`` (the others are counted)."""


def group_event(message: Any, routing_key: str, dashboard_url: str) -> dict[str, Any]:
    """The Events API v2 body of a group's message (``grouping.GroupMessage``): one
    incident per group episode, ``dedup_key`` = the group's key; a ``trigger`` while an
    instance fires (its first message, updates, repeats: PagerDuty merges them), a
    ``resolve`` when every one resolved.

    Returns:
        As ``event``; a trigger's ``custom_details`` hold ``group`` (its labels), ``kind``,
        ``message_key``, ``firing`` and ``resolved`` (counts) and ``instances`` (the first
        ``MAX_GROUP_INSTANCES``: rule, instance, status, summary, value, since).
    """
    body: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "resolve" if message.status == "resolved" else "trigger",
        "dedup_key": message.alert_key,
    }
    if body["event_action"] == "resolve":
        return body
    listed = message.instances()
    firing = [i for i in listed if i["status"] != "resolved"]
    named = ", ".join(f"{k}={v}" for k, v in message.labels.items())
    rules = ", ".join(dict.fromkeys(i["rule"] for i in firing))
    severities = [SEVERITIES.get(str(i["severity"]), "warning") for i in firing]
    order = ("critical", "error", "warning", "info")
    link = dashboard_link(dashboard_url, "/alerts")
    body["payload"] = {
        "summary": f"[FIRING:{len(firing)}] {named}: {rules}"[:MAX_SUMMARY_CHARS],
        "source": message.outbox or "outbox-monitor",
        "severity": min(severities, key=order.index) if severities else "warning",
        "component": str(message.labels.get("event_type") or "outbox")[:MAX_FIELD_CHARS],
        "group": (message.outbox or "default")[:MAX_FIELD_CHARS],
        "class": "alert-group",
        "custom_details": {
            "group": message.labels,
            "kind": message.kind,
            "message_key": message.message_key,
            "firing": len(firing),
            "resolved": len(listed) - len(firing),
            "instances": [
                {
                    key: str(item[key])[:MAX_DETAIL_CHARS] if key == "instance" else item[key]
                    for key in ("rule", "instance", "status", "summary", "value", "since")
                }
                for item in listed[:MAX_GROUP_INSTANCES]
            ],
        },
    }
    body["links"] = [{"href": link, "text": "Alerts"}]
    body["client"] = "outbox-monitor"
    body["client_url"] = link
    return body


class PagerDutyTransport:
    """Sends one notification row as one Events API v2 event.

    Args:
        route: the route's name (in errors).
        routing_key: the integration's routing key (a secret: never logged).
        base_url: the Events API's base URL (``DEFAULT_EVENTS_URL``).
        timeout: seconds for the connection and for each read.
    """

    kind = "pagerduty"
    packs = False
    supports_threads = False

    def __init__(
        self, route: str, routing_key: str, base_url: str = DEFAULT_EVENTS_URL, *, timeout: float
    ) -> None:
        self._what = f"PagerDuty route {route}"
        self._key = routing_key
        self._url = base_url.rstrip("/") + ENQUEUE_PATH
        self._pool = new_pool(timeout)
        self.secrets = (routing_key,) if len(routing_key) >= 8 else ()

    def describe(self) -> str:
        """Where it sends: ``PagerDuty Events v2 at <url>``."""
        return f"PagerDuty Events v2 at {self._url}"

    def deliver(self, row: Mapping[str, Any], *, dashboard_url: str) -> Delivery:
        """Send the row's event; a ``test`` row (``alerts test``, its own episode) triggers
        and at once resolves an event of its own key.

        Raises:
            PermanentError: 400 (PagerDuty's ``errors`` in its text) or another 4xx.
            RateLimited: 429. TransientError: 5xx, timeouts, no answer, or a 2xx other
            than PagerDuty's 202 (a proxy's 200 page).
        """
        if row["kind"] == "test":
            key = row_alert_key(row)
            for action in ("trigger", "resolve"):
                test = {"routing_key": self._key, "event_action": action, "dedup_key": key}
                if action == "trigger":
                    test["payload"] = {
                        "summary": row["payload"]["summary"],
                        "source": "outbox-monitor",
                        "severity": "info",
                    }
                self._send(test)
            return Delivery(None, None)
        self._send(event(row, self._key, dashboard_url))
        return Delivery(None, None)

    def deliver_group(self, message: Any, *, dashboard_url: str) -> Delivery:
        """Send a group's message (``group_event``); raises as ``deliver``."""
        self._send(group_event(message, self._key, dashboard_url))
        return Delivery(None, None)

    def acknowledge(self, row: Mapping[str, Any], *, dedup_key: str | None = None) -> None:
        """Send an ``acknowledge`` of the row's episode: the same ``dedup_key`` as its
        trigger (``row_alert_key``), so PagerDuty acknowledges the open incident (a press of
        Slack's Acknowledge button, ``alerts.slack_actions``).

        Args:
            row: a notification row of the episode (any route's: the key is the episode's):
                ``rule``, ``instance`` as stored, ``outbox``, ``payload`` (its ``episode``).
            dedup_key: the incident's key instead of the episode's (a grouped route: the
                group's, ``grouping.open_group_key``).

        Raises:
            As ``deliver``.
        """
        self._send(
            {
                "routing_key": self._key,
                "event_action": "acknowledge",
                "dedup_key": dedup_key or row_alert_key(row),
            }
        )

    def _send(self, body: dict[str, Any]) -> Answer:
        answer = post_json(
            self._pool,
            self._url,
            json.dumps(body, ensure_ascii=False).encode(),
            what=self._what,
            secrets=self.secrets,
        )
        if answer.status == 202:
            return answer
        if 200 <= answer.status < 300:
            raise TransientError(
                f"{self._what}: HTTP {answer.status}, not PagerDuty's 202 (got "
                f"{answer.body[:80]!r}): not taken, retrying",
                status=answer.status,
            )
        raise classify(answer, self._what)
