"""A client that presses outbox-monitor's Slack buttons as Slack does (issue 31 item 6): the
demo's (``outbox_monitor.demo.slack_presses``: a ``block_actions`` payload, form-encoded,
signed v0 HMAC-SHA256 over ``v0:timestamp:body`` with the app's signing secret), with the
tests' secret, team and people.

Import as ``from tests.slack_presses import …`` (nothing here is a fixture).
"""

from outbox_monitor.demo.slack_presses import post_signed as _post_signed
from outbox_monitor.demo.slack_presses import press_body
from tests.alerting import LOADED_DEADLINE

__all__ = ["EMAIL", "SECRET", "TEAM", "USER", "post_signed", "press_body", "stuck_lock_rules"]

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


def post_signed(
    url: str, body: bytes, secret: str, *, age: float = 0, headers: dict[str, str] | None = None
) -> int:
    """``demo.slack_presses.post_signed`` with the tests' deadline."""
    return _post_signed(url, body, secret, age=age, headers=headers, timeout=LOADED_DEADLINE)
