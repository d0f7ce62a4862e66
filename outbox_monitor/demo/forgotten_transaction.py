"""A forgotten transaction on demand, for the demo (``outbox-monitor
demo-forgotten-transaction start|end|status``): a session that began a transaction, took a
transaction id and went idle, as a report or a psql session left open does.

While it is open it holds the xmin horizon: autovacuum cannot remove the row versions the
demo's workers leave with every claim and ack, so the outbox's dead tuples climb, the Health
page names the session (its application, its age, ``SELECT pg_terminate_backend(<pid>);``)
and the shipped ``xmin-horizon-held`` rule posts one message; ``end`` (or that command, run by
hand) ends it and the alert resolves. The demo's downstream serves it on ``CONTROL_PATH``
(``switches``); ``request`` is the client.
"""

import contextlib
import select
import threading
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import pq

from outbox_monitor.demo.switches import call

CONTROL_PATH = "/control/forgotten-transaction"
"""``GET``: its state; ``POST {"action": "start"|"end"}``: open or end it; both answer its
state (``ForgottenTransaction.state``), ``end`` with what it ended
(``ForgottenTransaction.end``)."""
APPLICATION_NAME = "nightly-report"
"""The ``application_name`` the Health page and the alert name it by: what a forgotten
report looks like."""
ACTIONS = ("start", "end")


class ForgottenTransaction:
    """At most one open transaction, holding a transaction id, on the demo's database;
    thread-safe.

    Args:
        dsn: the demo's database.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._since: datetime | None = None
        self._ended_outside = False

    def start(self) -> dict[str, Any]:
        """Open it (``BEGIN; SELECT txid_current();``, then idle) unless it is open.

        Returns:
            ``state()`` and ``"already_open"``: ``True`` when one was open already (it is
            the one answered; nothing was opened).

        Raises:
            psycopg.Error: the database refused the connection.
        """
        with self._lock:
            already_open = self._open()
            if not already_open:
                conn = psycopg.connect(self.dsn, application_name=APPLICATION_NAME)
                conn.execute("SELECT txid_current()")  # a transaction id: the horizon is held
                self._conn, self._since, self._ended_outside = conn, datetime.now(UTC), False
        return {**self.state(), "already_open": already_open}

    def end(self) -> dict[str, Any]:
        """Roll it back and close its session (nothing when none is open).

        Returns:
            ``state()`` and ``"ended"``: what this call ended — ``{"pid": backend pid,
            "application": APPLICATION_NAME, "held_seconds": how long it held the horizon
            (seconds since ``start``, the host's clock)}`` — or ``None`` when none was open.
        """
        with self._lock:
            ended = None
            if self._open() and self._conn is not None and self._since is not None:
                ended = {
                    "pid": self._conn.info.backend_pid,
                    "application": APPLICATION_NAME,
                    "held_seconds": (datetime.now(UTC) - self._since).total_seconds(),
                }
            self._close()
        return {**self.state(), "ended": ended}

    def state(self) -> dict[str, Any]:
        """``{"open": bool, "pid": backend pid or None, "application": APPLICATION_NAME,
        "since": ISO-8601 or None, "age_seconds": seconds since then (the host's clock) or
        None, "ended_outside": true once a session it had open was ended by someone else
        (``pg_terminate_backend``)}``."""
        with self._lock:
            is_open = self._open()
            since = self._since if is_open else None
            return {
                "open": is_open,
                "pid": self._conn.info.backend_pid if is_open and self._conn else None,
                "application": APPLICATION_NAME,
                "since": since.isoformat() if since else None,
                "age_seconds": (datetime.now(UTC) - since).total_seconds() if since else None,
                "ended_outside": self._ended_outside,
            }

    def control(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Serve one ``POST`` to ``CONTROL_PATH``: (HTTP status, JSON answer)."""
        action = body.get("action")
        if action not in ACTIONS:
            return 400, {"error": 'action must be "start" or "end"'}
        try:
            return 200, self.start() if action == "start" else self.end()
        except psycopg.Error as error:
            return 503, {"error": f"cannot open the transaction: {error}"}

    def close(self) -> None:
        """End it, if open (the demo stops)."""
        self.end()

    def _open(self) -> bool:
        """Whether the session is still there: a session ended from outside is noticed here,
        and forgotten. Its socket is read for as long as it has something to read: a
        terminated backend sends its FATAL message and then closes, and only the read after
        the message meets the end of the connection."""
        if self._conn is None:
            return False
        try:
            while select.select([self._conn.pgconn.socket], [], [], 0)[0]:
                self._conn.pgconn.consume_input()
        except psycopg.OperationalError:
            self._close()
            self._ended_outside = True
            return False
        if self._conn.closed or self._conn.pgconn.status != pq.ConnStatus.OK:
            self._close()
            self._ended_outside = True
            return False
        return True

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):  # already gone: nothing to roll back
                self._conn.rollback()
            self._conn.close()
        self._conn, self._since = None, None


def request(url: str, action: str, timeout: float = 5.0) -> dict[str, Any]:
    """Ask the demo at ``url`` (its downstream's URL) to ``start`` or ``end`` the forgotten
    transaction, or for its ``status``.

    Returns:
        Its state afterwards (``ForgottenTransaction.state``).

    Raises:
        OutboxMonitorError: the demo cannot be reached, refused, or what answered is not the
            demo's downstream (``switches.call``).
    """
    body = None if action == "status" else {"action": action}
    return call(url, CONTROL_PATH, body, timeout)
