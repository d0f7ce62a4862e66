"""The demo's switches: things a running demo changes on demand from another terminal — a
downstream outage (``outage.py``), a forgotten transaction (``forgotten_transaction.py``).

Each switch is served by the demo's local downstream (``downstream.Downstream``) on a path of
its own: ``GET`` answers its state, ``POST`` a JSON object with an ``action`` changes it.
``call`` is the client the CLI commands use.
"""

import json
import urllib.error
import urllib.request
from typing import Any, Protocol

from outbox_monitor.errors import OutboxMonitorError

URL_ENV = "OUTBOX_DEMO_DOWNSTREAM_URL"
"""The demo's downstream URL for the ``demo-…`` commands (the demo's banner prints it)."""


class Switch(Protocol):
    """A switch served on one path of the demo's downstream."""

    def state(self) -> dict[str, Any]:
        """What ``GET`` answers (JSON-ready)."""
        ...

    def control(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Serve one ``POST``: (HTTP status, JSON answer)."""
        ...


def call(
    url: str, path: str, body: dict[str, Any] | None = None, timeout: float = 5.0
) -> dict[str, Any]:
    """Read (``body`` ``None``: ``GET``) or change (``POST body``) the switch at ``path`` of
    the demo's downstream at ``url``.

    Returns:
        The switch's JSON answer.

    Raises:
        OutboxMonitorError: the downstream cannot be reached, or it refused the request
            (the switch's ``error`` text).
    """
    endpoint = url.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        endpoint, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as error:
        detail = json.loads(error.read() or b"{}").get("error", error.reason)
        raise OutboxMonitorError(f"the demo downstream refused: {detail}") from None
    except (OSError, ValueError) as error:
        raise OutboxMonitorError(
            f"cannot reach the demo's downstream at {endpoint}: {error}",
            hint="Start `outbox-monitor demo` and pass the URL its banner prints "
            f"(`--url`, or {URL_ENV}).",
        ) from None
    if not isinstance(answer, dict):
        raise OutboxMonitorError(f"the demo downstream answered {answer!r}, not an object")
    return answer
