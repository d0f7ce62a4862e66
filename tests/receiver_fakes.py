"""Local receivers on 127.0.0.1 for the receiver tests: PagerDuty's Events API v2 (the demo's
fake, ``outbox_monitor.demo.fake_receivers``, re-exported) and the signed webhook's documented
contract: ``FakeWebhook`` verifies each request with the Python snippet of docs/receivers.md
("Verifying a request"), executed as the page prints it (nothing mocked: the product talks
HTTP to them).
"""

import json
import re
from pathlib import Path
from typing import Any

from outbox_monitor.demo.fake_receivers import FakePagerDuty, FakeReceiver, Request

__all__ = [
    "ROUTING_KEY",
    "SECRET",
    "FakePagerDuty",
    "FakeReceiver",
    "FakeWebhook",
    "Request",
    "receiver_env",
    "verifier_from_docs",
]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "receivers.md"
ROUTING_KEY = "R0UT1NGKEY0123456789abcdef012345"
"""The routing key of the ``pagerduty`` fixture (tests/conftest.py)."""
SECRET = "whsec-0123456789-SeCrEt"
"""The signing secret of the ``webhook`` fixture (tests/conftest.py)."""


def verifier_from_docs() -> dict[str, Any]:
    """The namespace of docs/receivers.md's verification snippet (``verify``, ``SEEN``), run as
    the page prints it."""
    text = DOCS.read_text()
    block = re.search(r"<!-- verify-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert block, "docs/receivers.md lost its verification snippet"
    namespace: dict[str, Any] = {}
    exec(block.group(1), namespace)  # the docs' own code, in a test
    return namespace


class FakeWebhook(FakeReceiver):
    """A receiver of the signed webhook that verifies each request with the docs' snippet:
    401 for a bad signature or an old timestamp, 200 and dropped for a message id it took
    already; ``taken`` holds the bodies it took, in order."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.verifier = verifier_from_docs()
        self.taken: list[dict[str, Any]] = []
        super().__init__()

    def answer(self, request: Request, headers: Any) -> tuple[int, str, dict[str, str]]:
        try:
            fresh = self.verifier["verify"](self.secret, headers, request.raw)
        except PermissionError as error:
            request.outcome = f"refused: {error}"
            return 401, json.dumps({"ok": False, "error": str(error)}), {}
        if not fresh:
            request.outcome = "repeat dropped"
            return 200, json.dumps({"ok": True}), {}
        request.outcome = "taken"
        self.taken.append(request.body)
        return 200, json.dumps({"ok": True}), {}


def receiver_env(pagerduty: FakePagerDuty, webhook: FakeWebhook, slack_sink: Any) -> dict[str, str]:
    """The variables of the receiver tests' routes: ``pd`` (``PD_ROUTING_KEY``,
    ``PD_EVENTS_URL``), ``hook`` (``HOOK_URL``, ``HOOK_SECRET``) and a Slack incoming
    webhook of the sink (``TEST_SLACK_URL``)."""
    return {
        "PD_ROUTING_KEY": ROUTING_KEY,
        "PD_EVENTS_URL": pagerduty.url,
        "HOOK_URL": f"{webhook.url}/alerts",
        "HOOK_SECRET": SECRET,
        "TEST_SLACK_URL": f"{slack_sink.url}/services/T0/B0/hooksecret0123",
    }
