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

__all__ = ["FakePagerDuty", "FakeReceiver", "FakeWebhook", "Request", "verifier_from_docs"]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "receivers.md"


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
