"""An Alertmanager that refuses alerts is never silent (issue 31 item 1): after
``FAILED_INTERVALS`` (3) evaluation intervals of failed posts to one URL, the scheduler's own
alert ``alertmanager-unreachable`` (instance ``url=<the URL without credentials>``) opens an
episode: an ``alert_transitions`` row (the Alerts page's banner and Transitions tab) and one
``error`` message per message route (Slack, through the notification outbox: a working
receiver tells of the one that fails); when a post to it works again, the episode's resolve.

The state is the transitions' (``own_alert_open_instances``): a new leader reads which
episodes are open and never opens one twice. Between the log's WARNING (at the first failure)
and this alert, ``/metrics`` and ``/healthz`` say it (``alerts.alertmanager.ReceiverStatus``).
"""

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.alertmanager import ENDS_AFTER_INTERVALS, UrlStatus
from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.own_alerts import (
    insert_all,
    insert_transition,
    notification_rows,
    open_alerts,
    resolve_params,
)
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.durations import format_duration
from outbox_monitor.store.db import Database

log = logging.getLogger(__name__)

RULE_NAME = "alertmanager-unreachable"
FAILED_INTERVALS = 3
"""Evaluation intervals of failed posts before the alert (a restart of Alertmanager, a
blip, stays a WARNING line)."""
INSTANCE_PREFIX = "url="


def open_episodes(db: Database) -> list[dict[str, Any]]:
    """The Alertmanager URLs of ``db``'s outbox in an open ``alertmanager-unreachable``
    episode (the Alerts page's banner).

    Returns:
        ``[{"url", "since" (aware datetime: when the alert opened), "error" (the
        transition's detail: the last error and since when the posts fail)}]`` by URL.
    """
    rows = db.fetch_all("own_alert_open_instances", {"outbox": db.alert_outbox, "rule": RULE_NAME})
    return [
        {
            "url": row["instance"].removeprefix(INSTANCE_PREFIX),
            "since": row["at"],
            "error": row["detail"],
        }
        for row in rows
    ]


class AlertmanagerHealth:
    """Opens and resolves the ``alertmanager-unreachable`` episodes of one outbox.

    Args:
        db: the Database of the writes (``Database.alert_outbox`` keys the rows).
        ruleset: its ``message_routes`` get the messages (none: the transitions only).
        interval: the evaluation interval, seconds.
        fence: ``Leadership.fence``, first in each write transaction.
        clock: the transitions' and messages' instant.
    """

    def __init__(
        self,
        db: Database,
        ruleset: RuleSet,
        *,
        interval: float,
        fence: Callable[[psycopg.Connection], None] | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.db = db
        self.ruleset = ruleset
        self.interval = interval
        self.fence = fence
        self.clock = clock
        self._open: set[str] | None = None

    def check(self, urls: list[UrlStatus]) -> None:
        """Open an episode for each URL failing for ``FAILED_INTERVALS`` intervals, resolve
        the open episode of each URL whose last post worked.

        Raises:
            DatabaseUnavailable, LeadershipLost and the connector's errors: nothing is
            recorded as done, the next pass tries again.
        """
        now = self.clock()
        if self._open is None:
            self._open = {row["url"] for row in open_episodes(self.db)}
        for status in urls:
            failing_since = status.failing_since
            if status.url not in self._open and failing_since is not None:
                if (now - failing_since).total_seconds() >= FAILED_INTERVALS * self.interval:
                    self._alert(status, failing_since, now)
                    self._open.add(status.url)
            elif status.url in self._open and failing_since is None:
                self._resolve(status, now)
                self._open.discard(status.url)

    def _alert(self, status: UrlStatus, since: datetime, now: datetime) -> None:
        instance = INSTANCE_PREFIX + status.url
        episode = since.isoformat()
        summary = (
            f"Alertmanager {status.url} refuses the alerts of {self.db.table_name} since "
            f"{since.isoformat(timespec='seconds')} ({status.failures_total} failed post(s): "
            f"{status.last_error}). Its alerts end there {ENDS_AFTER_INTERVALS} intervals after "
            f"the last post that worked ({format_duration(ENDS_AFTER_INTERVALS * self.interval)}"
            "); the posts are retried every few seconds. A resolve follows when it accepts them."
        )
        payload = {
            "rule": RULE_NAME,
            "instance": instance,
            "severity": "critical",
            "summary": summary,
            "error": status.last_error,
            "metric": "alertmanager_post_failures",
            "op": ">",
            "threshold": 0,
            "value": status.failures_total,
            "unit": "rows",
            "since": since.isoformat(),
            "labels": {"rule": RULE_NAME, "severity": "critical"},
            "offenders": [],
            "runbook_url": None,
            "runbook": own_runbooks.steps(RULE_NAME),
            "dashboard_path": "/alerts",
            "kind": "error",
            "episode": episode,
        }
        rows = notification_rows(
            self.ruleset.message_routes,
            rule=RULE_NAME,
            instance=instance,
            kind="error",
            episode=episode,
            payload=payload,
            now=now,
        )
        with self.db.transaction() as conn:
            self._fenced(conn)
            insert_all(self.db, conn, rows)
            detail = f"{status.last_error} (failing since {since.isoformat(timespec='seconds')})"
            self._transition(conn, instance, "inactive", "error", status, detail)
        log.warning("alertmanager %s: %s alert opened", status.url, RULE_NAME)

    def _resolve(self, status: UrlStatus, now: datetime) -> None:
        instance = INSTANCE_PREFIX + status.url
        summary = f"Alertmanager {status.url} accepts the alerts of {self.db.table_name} again."
        rows = [
            resolve_params(row, now=now, value=status.failures_total, summary=summary)
            for row in open_alerts(self.db, RULE_NAME, instance)
        ]
        with self.db.transaction() as conn:
            self._fenced(conn)
            insert_all(self.db, conn, rows)
            self._transition(conn, instance, "error", "inactive", status, "accepts alerts again")
        log.warning("alertmanager %s: %s alert resolved", status.url, RULE_NAME)

    def _fenced(self, conn: psycopg.Connection) -> None:
        if self.fence is not None:
            self.fence(conn)

    def _transition(
        self,
        conn: psycopg.Connection,
        instance: str,
        from_state: str,
        to_state: str,
        status: UrlStatus,
        detail: str,
    ) -> None:
        insert_transition(
            self.db,
            conn,
            rule=RULE_NAME,
            instance=instance,
            from_state=from_state,
            to_state=to_state,
            value=float(status.failures_total),
            at=self.clock(),
            detail=detail,
        )
