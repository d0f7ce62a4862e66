"""A downstream outage on demand, for the demo: break and heal the downstream of some event
types while the demo runs (``outbox-monitor demo-downstream break|heal|status``).

One ``DownstreamOutage`` per demo holds the broken event-type filters (SPEC §2: exact, or
LIKE with ``%``). The demo's downstream (``downstream.Downstream``, called by n8n) answers
their requests with HTTP 503, and the simulated workers' handlers raise the same transient
error, so either worker fails those rows through ``outbox_monitor.fail`` (retry with
backoff) and the demo's circuit breakers see the outage. The downstream serves the switch
on ``CONTROL_PATH``; ``request`` is its client (the CLI command).
"""

import threading
from typing import Any

from outbox_monitor.demo.switches import URL_ENV as URL_ENV  # re-exported: the CLI's variable
from outbox_monitor.demo.switches import call
from outbox_monitor.flow.model import matches

CONTROL_PATH = "/control/outage"
"""``GET``: the broken filters; ``POST {"action": "break"|"heal", "event_types": [...]}``:
break them, or heal them (no ``event_types``: heal all); answers the broken filters."""

DEFAULT_BROKEN = ("order.paid",)
"""What ``demo-downstream break`` breaks without ``--event-type``: the ERP that order.paid
calls (a quarter of the demo's traffic; the demo's controls give it a circuit breaker)."""

OUTAGE_ERROR = "HTTP 503 from the demo downstream: service unavailable (demo-downstream break)"
"""The error of every call to a broken downstream (transient: retried with backoff)."""


class DownstreamError(Exception):
    """A transient error of the simulated handlers while their downstream is broken."""


class DownstreamOutage:
    """The event-type filters whose downstream is broken; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._broken: list[str] = []

    def break_(self, filters: list[str] | tuple[str, ...]) -> list[str]:
        """Break the downstream of ``filters`` (added to those already broken)."""
        with self._lock:
            self._broken.extend(f for f in filters if f not in self._broken)
            return list(self._broken)

    def heal(self, filters: list[str] | tuple[str, ...] | None = None) -> list[str]:
        """Heal ``filters`` (``None`` or empty: every one); returns those still broken."""
        with self._lock:
            self._broken = [f for f in self._broken if filters and f not in filters]
            return list(self._broken)

    @property
    def broken_filters(self) -> list[str]:
        """The broken filters, in the order they broke."""
        with self._lock:
            return list(self._broken)

    def broken(self, event_type: str) -> bool:
        """Whether a call for ``event_type`` meets the outage."""
        with self._lock:
            return any(matches(f, event_type) for f in self._broken)

    def state(self) -> dict[str, Any]:
        """Serve one ``GET`` of ``CONTROL_PATH``: ``{"broken": [filters]}``."""
        return {"broken": self.broken_filters}

    def control(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Serve one ``POST`` to ``CONTROL_PATH``: (HTTP status, JSON answer)."""
        action, event_types = body.get("action"), body.get("event_types") or []
        if not isinstance(event_types, list) or not all(
            isinstance(f, str) and f for f in event_types
        ):
            return 400, {"error": "event_types must be a list of event types or patterns"}
        if action == "break":
            return 200, {"broken": self.break_(event_types or list(DEFAULT_BROKEN))}
        if action == "heal":
            return 200, {"broken": self.heal(event_types)}
        return 400, {"error": 'action must be "break" or "heal"'}


def request(
    url: str, action: str, event_types: tuple[str, ...] = (), timeout: float = 5.0
) -> list[str]:
    """Ask the demo's downstream at ``url`` to ``break``, ``heal`` or report (``status``).

    Returns:
        The filters broken afterwards.

    Raises:
        OutboxMonitorError: the downstream cannot be reached or refused the request, or
            what answered is not the demo's downstream (``switches.call``).
    """
    body = None if action == "status" else {"action": action, "event_types": list(event_types)}
    return list(call(url, CONTROL_PATH, body, timeout)["broken"])
