"""The heartbeat (issue 31 item 7): after each successful evaluation pass the leader pings
``OUTBOX_MONITOR_HEARTBEAT_URL`` (a Healthchecks-style check, Dead Man's Snitch, Uptime
Kuma's push monitor…), which alerts from outside when the pings STOP — the monitor's own
death, a hung leader, a database it cannot evaluate on, noticed without it.

A ping is a GET on a thread of its own, at most one in flight (a ping still waiting when the
next pass ends is not doubled): a slow or dead heartbeat URL never delays or stops an
evaluation. A failed ping is a WARNING (once a minute), a ping that works
again a line too; ``/healthz`` and ``/metrics`` say the last success (``Heartbeat.as_json``). A
failed evaluation sends nothing, so the check's timer runs out.
"""

import logging
import threading
from datetime import UTC, datetime
from typing import Any

import urllib3

from outbox_monitor.alerts.alertmanager import UrlStatus

log = logging.getLogger("outbox_monitor.scheduler")

TIMEOUT_SECONDS = 10.0
"""A ping's total timeout (on its own thread: the evaluation does not wait for it)."""


def shown(url: str) -> str:
    """A ping URL for logs: its scheme and host only (the path of a Healthchecks ping URL is
    the check's secret)."""
    parsed = urllib3.util.parse_url(url)
    return f"{parsed.scheme}://{parsed.host}" + (f":{parsed.port}" if parsed.port else "")


class Heartbeat:
    """Pings one URL after each successful evaluation (``ping``); thread-safe.

    Args:
        url: ``OUTBOX_MONITOR_HEARTBEAT_URL`` (an http(s) URL, validated by the settings).
        timeout: each ping's total timeout, seconds.
    """

    def __init__(self, url: str, *, timeout: float = TIMEOUT_SECONDS) -> None:
        self.url = url
        self._pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=timeout))
        self._lock = threading.Lock()
        self._in_flight = False
        self._status = UrlStatus(shown(url))

    @property
    def last_success_at(self) -> datetime | None:
        """When the URL last answered a ping (UTC), ``None``: never."""
        with self._lock:
            return self._status.last_success_at

    def ping(self) -> threading.Thread | None:
        """Start one ping on a daemon thread, unless one is still in flight.

        Returns:
            The thread (tests join it), or ``None`` when a ping was in flight.
        """
        with self._lock:
            if self._in_flight:
                return None
            self._in_flight = True
        thread = threading.Thread(target=self._ping, name="heartbeat", daemon=True)
        thread.start()
        return thread

    def _ping(self) -> None:
        error: str | None = None
        try:
            response = self._pool.request("GET", self.url)
            if not 200 <= response.status < 300:
                error = f"HTTP {response.status}"
        except urllib3.exceptions.HTTPError as failure:
            reason = getattr(failure, "reason", None) or failure
            error = (str(reason).strip().splitlines() or [type(failure).__name__])[0]
        except Exception as failure:  # never lose the scheduler's thread to a ping
            error = f"{type(failure).__name__}: {failure}"
        finally:
            with self._lock:
                self._in_flight = False
        self._record(error)

    def _record(self, error: str | None) -> None:
        with self._lock:
            said = self._status.record(datetime.now(UTC), error)
            since = self._status.failing_since
        if said == "recovered":
            log.warning("heartbeat %s answers again", shown(self.url))
        elif said == "failed" and since is not None:
            log.warning(
                "heartbeat %s failed: %s (failing since %s; evaluation goes on, the "
                "heartbeat's check will alert when its pings stop)",
                shown(self.url),
                error,
                since.isoformat(timespec="seconds"),
            )

    def as_json(self) -> dict[str, Any]:
        """``/healthz``'s ``heartbeat``: the URL shown, last success, failing since, error,
        failed pings (``alerts.alertmanager.UrlStatus.as_json``)."""
        with self._lock:
            return self._status.as_json()
