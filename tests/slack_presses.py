"""A client that presses outbox-monitor's Slack buttons as Slack does (issue 31 item 6):
a ``block_actions`` payload, form-encoded, signed v0 HMAC-SHA256 over ``v0:timestamp:body``
with the app's signing secret (slack-sdk's ``SignatureVerifier.generate_signature``).

Import as ``from tests.slack_presses import …`` (nothing here is a fixture).
"""

import json
import time
import urllib.error
import urllib.request
from urllib.parse import urlencode

from slack_sdk.signature import SignatureVerifier

from tests.alerting import LOADED_DEADLINE

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
"""The Slack app's signing secret of the tests (``SLACK_SIGNING_SECRET``)."""
TEAM, USER, EMAIL = "T0ALLOWED", "U0ALICE", "alice@example.com"
"""The allowed team, its user who may press, and the operator that user is mapped to."""


def stuck_lock_rules(
    interval: str, oncall: str = '{channel: "#alerts", repeat_interval: 1h}', more: str = ""
) -> str:
    """alerts.yml text: ``stuck-lock`` (``stuck_locks > 0``) evaluated every ``interval``,
    routed to ``oncall`` (by default ``#alerts`` through the bot token, repeated hourly);
    ``more``: further routes, as YAML lines indented by two spaces."""
    return f"""
version: 1
defaults: {{interval: {interval}, for: 0s, keep_firing_for: 0s}}
routes:
  oncall: {oncall}
{more}
rules:
  - {{name: stuck-lock, metric: stuck_locks, op: ">", threshold: 0, route: oncall}}
"""


def press_body(
    *, team: str, user: str, action: str, notification_id: int, action_ts: str, response_url: str
) -> bytes:
    """The form body Slack posts when ``user`` of ``team`` presses a button of ours."""
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
    url: str, body: bytes, secret: str, *, age: float = 0, headers: dict[str, str] | None = None
) -> int:
    """POST ``body`` to ``url`` signed with ``secret``, its timestamp ``age`` seconds old
    (negative: from the future), with more ``headers`` (``X-Slack-Retry-Num``); returns the
    HTTP status."""
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
        with urllib.request.urlopen(request, timeout=LOADED_DEADLINE) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        error.close()
        return error.code
