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
SWITCH_HEADER = "X-Outbox-Demo-Switch"
"""Sent with every answer of a switch (its path): what tells ``call`` that it reached one."""


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
        OutboxMonitorError: the downstream cannot be reached, it refused the request (the
            switch's ``error`` text), or what answered at ``url`` is not the demo's
            downstream (another of the demo's servers, say: the message says so).
    """
    endpoint = url.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        endpoint, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw, refused, switch = response.read(), False, response.headers.get(SWITCH_HEADER)
    except urllib.error.HTTPError as error:
        raw, refused, switch = error.read(), True, error.headers.get(SWITCH_HEADER)
    except OSError as error:
        raise OutboxMonitorError(
            f"cannot reach the demo's downstream at {endpoint}: {error}",
            hint="Start `outbox-monitor demo` and pass the URL its banner prints "
            f"(`--url`, or {URL_ENV}).",
        ) from None
    answer = _json_object(raw)
    if switch != path or answer is None:
        raise OutboxMonitorError(
            f"{url} answered but is not the demo's control endpoint (it is printed in the demo "
            "banner as `--url http://127.0.0.1:PORT` on its breakers and horizon lines)",
            hint=f"Pass that URL (`--url`, or {URL_ENV}), not the dashboard's, the scheduler's "
            "or the Slack sink's.",
        )
    if refused:
        raise OutboxMonitorError(f"the demo downstream refused: {answer.get('error', answer)}")
    return answer


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """``raw`` as a JSON object, or ``None`` when it is not one (HTML, Prometheus text…)."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None
