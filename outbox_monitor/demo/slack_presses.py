"""Pressing outbox-monitor's Slack buttons as Slack does (issue 31 item 6), for the demo's Slack
sink (``slack_sink``: ``POST /_sink/press``) and the tests: a ``block_actions`` payload,
form-encoded, signed v0 HMAC-SHA256 over ``v0:timestamp:body`` with the app's signing secret
(slack-sdk's ``SignatureVerifier.generate_signature``), posted to the listener."""

import json
import time
import urllib.error
import urllib.request
from urllib.parse import urlencode

from slack_sdk.signature import SignatureVerifier

PRESS_TIMEOUT_SECONDS = 60.0


def press_body(
    *, team: str, user: str, action: str, notification_id: int, action_ts: str, response_url: str
) -> bytes:
    """The form body Slack posts when ``user`` of ``team`` presses a button of ours.

    Args:
        team, user: the Slack ids of the presser's team and user.
        action: ``acknowledge``, ``silence-1h`` or ``pause-1h`` (``alerts.message``).
        notification_id: the notification the button carries.
        action_ts: the press's time stamp (Slack's ``action_ts``: its replay key).
        response_url: where the listener says what it did.
    """
    payload = {
        "type": "block_actions",
        "team": {"id": team},
        "user": {"id": user, "team_id": team},
        "response_url": response_url,
        "actions": [
            {
                "action_id": f"outbox-monitor:{action}:{notification_id}",
                "value": str(notification_id),
                "action_ts": action_ts,
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def post_signed(
    url: str,
    body: bytes,
    secret: str,
    *,
    age: float = 0,
    headers: dict[str, str] | None = None,
    timeout: float = PRESS_TIMEOUT_SECONDS,
) -> int:
    """POST ``body`` to ``url`` signed with ``secret``, its timestamp ``age`` seconds old
    (negative: from the future), with more ``headers`` (``X-Slack-Retry-Num``).

    Returns:
        The HTTP status answered.

    Raises:
        OSError: the listener cannot be reached (``urllib.error.URLError``), or timed out.
    """
    stamp = str(int(time.time() - age))
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body) or ""
    request = urllib.request.Request(
        url,
        data=body,
        headers={
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature,
            "Content-Type": "application/x-www-form-urlencoded",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        error.close()
        return error.code
