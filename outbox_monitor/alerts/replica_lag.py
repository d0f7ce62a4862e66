"""The "rules not evaluated: replica lags N s" alert (issue 14 item 4): no rule is evaluated
from stale figures, and that is never silent.

When ``OUTBOX_MONITOR_DSN`` is a hot standby, the leader reads its replay lag
(``store.standby.replica_status``) before each evaluation pass and each sample. While the lag is
over ``OUTBOX_MONITOR_MAX_REPLICA_LAG`` (or unknown), the ``ReplicaLagWatch`` says so and
the jobs skip (``jobs``): no rule goes firing or resolved on figures that are minutes old, no
sample records them. Then:

- a reading over the limit is confirmed by a second one ``CONFIRM_SECONDS`` later before an
  episode starts: the lag is "now − the newest replayed commit" while WAL is still being
  replayed, so the first write after an idle period reads as a lag as long as that period
  for the milliseconds before it is replayed;
- the episode is logged once (WARNING) and shown on ``/healthz`` and ``/metrics``
  (``scheduler_status.SchedulerStatus.replica``);
- exactly one ``error`` notification per route is queued on the primary, rule
  ``replica-lag``, through the notification outbox (``alerts.own_alerts``: dedupe key per
  episode; a leader that takes over during an episode finds it open and queues nothing),
  and delivered at once; when the lag is back under the limit, its resolve follows (one per
  route), with the ``inactive→error`` and ``error→inactive`` transitions.

A skipped pass still stamps the lease's last evaluation (``jobs.add_evaluator_job``): the
evaluator is alive and this alert says why it evaluates nothing, so the stall alert
(``alerts.stall``) does not say it a second time.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import Any

import psycopg

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.own_alerts import (
    insert_all,
    insert_transition,
    notification_rows,
    open_alerts,
    resolve_params,
)
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.durations import format_duration
from outbox_monitor.store.db import Database
from outbox_monitor.store.standby import (
    MAX_LAG_SETTING,
    ReplicaStatus,
    lag_text,
    replica_status,
    skip_reason,
)

log = logging.getLogger(__name__)

RULE_NAME = "replica-lag"
"""The rule name of the alert (notifications, transitions)."""
CONFIRM_SECONDS = 1.0
"""A first reading over the limit is read again this much later before it counts."""


class ReplicaLagWatch:
    """The replay-lag check of the leader's jobs (see the module docstring). Thread-safe:
    the evaluator and the sampler call ``check`` from their own threads.

    Args:
        read_db: the Database of the figures (``OUTBOX_MONITOR_DSN``), the one checked.
        primary: the Database of the scheduler's writes, where the alert is queued.
        max_lag: seconds (``settings.max_replica_lag``).
        ruleset: the loaded alerts.yml: its routes receive the alert; ``None``: nothing is
            queued (a sampler-only scheduler still skips stale samples).
        transports: ``{route: transport}``: the alert is delivered at once; ``None``: it
            waits for a process with Slack configured.
        clock: notification and transition times.
        status: ``scheduler_status.SchedulerStatus`` (``/healthz``, ``/metrics``) or ``None``.
        fence: ``Leadership.fence``, called first in each write transaction.
        confirm_seconds: the confirmation delay (``CONFIRM_SECONDS``; tests may pass 0).
        sleep: waits the confirmation delay (``time.sleep``).
    """

    def __init__(
        self,
        read_db: Database,
        primary: Database,
        *,
        max_lag: float,
        ruleset: Any = None,
        transports: Mapping[str, Any] | None = None,
        clock: Clock = system_clock,
        status: Any = None,
        fence: Callable[[psycopg.Connection], None] | None = None,
        confirm_seconds: float = CONFIRM_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.read_db = read_db
        self.primary = primary
        self.max_lag = max_lag
        self.ruleset = ruleset
        self.transports = transports
        self.clock = clock
        self.status = status
        self.fence = fence
        self.confirm_seconds = confirm_seconds
        self.sleep = sleep
        self.instance = read_db.table_name
        self._lock = threading.Lock()
        self._lagging: bool | None = None  # as recorded on the primary; None: not known
        self._term: int | None = None

    def check(self, term: int | None = None) -> ReplicaStatus:
        """Read the lag; report it; queue the alert when an episode starts and its resolve
        when it ends (once: what is known is kept until the lease ``term`` changes).

        Args:
            term: the leader's lease term (``Leadership.term``): under a new term the
                state is read again from the primary (another leader may have alerted).

        Returns:
            The reading that decided (``exceeds(max_lag)``: skip the pass).

        Raises:
            DatabaseUnavailable and the connector's errors (of either database); the
            next check tries again.
        """
        with self._lock:
            if term != self._term:
                self._term, self._lagging = term, None
            reading = replica_status(self.read_db)
            if reading.exceeds(self.max_lag) and not self._lagging and self.confirm_seconds:
                self.sleep(self.confirm_seconds)
                reading = replica_status(self.read_db)
            lagging = reading.exceeds(self.max_lag)
            if self.status is not None:
                self.status.replica(reading, skipping=lagging, max_lag=self.max_lag)
            if lagging != self._lagging:
                self._changed(reading, lagging)
            return reading

    def _changed(self, reading: ReplicaStatus, lagging: bool) -> None:
        """Log the change and record it on the primary (``_lagging`` only once recorded, so
        a failed write is tried again at the next check)."""
        known = self._lagging
        if lagging and known is not True:
            log.warning("%s; samples are not recorded either", skip_reason(reading, self.max_lag))
        elif not lagging and known is True:
            log.warning(
                "the read replica %s caught up (replay lag %s): rules are evaluated again",
                reading.target,
                lag_text(reading),
            )
        if self.ruleset is not None:
            if lagging:
                self._alert(reading)
            else:
                self._resolve(reading)
            if self.transports is not None:
                deliver_due(
                    self.primary,
                    self.ruleset,
                    clock=self.clock,
                    transports=self.transports,
                    rule=RULE_NAME,
                    fence=self.fence,
                )
        self._lagging = lagging

    def _alert(self, reading: ReplicaStatus) -> None:
        if open_alerts(self.primary, RULE_NAME, self.instance):
            return  # this episode was alerted already (by this or an earlier leader)
        now = self.clock()
        episode = now.astimezone(UTC).isoformat()
        reason = skip_reason(reading, self.max_lag)
        payload = {
            "rule": RULE_NAME,
            "instance": self.instance,
            "severity": "critical",
            "summary": (
                f"No alert rule of {self.instance} is evaluated and no sample recorded: the "
                f"figures come from the hot standby {reading.target}, whose replay lags "
                f"{lag_text(reading)} (more than {MAX_LAG_SETTING} "
                f"{format_duration(self.max_lag)}). A resolve follows when it catches up."
            ),
            "error": reason,
            "metric": "replica_lag",
            "op": ">",
            "threshold": self.max_lag,
            "value": reading.lag_seconds,
            "unit": "seconds",
            "since": now.isoformat(),
            "labels": {"rule": RULE_NAME, "severity": "critical"},
            "offenders": [],
            "runbook_url": None,
            "runbook": own_runbooks.steps(RULE_NAME),
            "dashboard_path": "/",
            "kind": "error",
            "episode": episode,
        }
        rows = notification_rows(
            self.ruleset.message_routes,
            rule=RULE_NAME,
            instance=self.instance,
            kind="error",
            episode=episode,
            payload=payload,
            now=now,
        )
        with self.primary.transaction() as conn:
            self._fenced(conn)
            queued = insert_all(self.primary, conn, rows)
            if queued:
                self._transition(conn, "inactive", "error", reading, reason)
        if queued:
            log.warning("queued the replica-lag alert for route(s) %s", ", ".join(queued))

    def _resolve(self, reading: ReplicaStatus) -> None:
        ended = open_alerts(self.primary, RULE_NAME, self.instance)
        if not ended:
            return
        summary = (
            f"Alert rules of {self.instance} are evaluated again: the hot standby "
            f"{reading.target} caught up (replay lag {lag_text(reading)})."
        )
        rows = [
            resolve_params(row, now=self.clock(), value=reading.lag_seconds, summary=summary)
            for row in ended
        ]
        with self.primary.transaction() as conn:
            self._fenced(conn)
            resolved = insert_all(self.primary, conn, rows)
            if resolved:
                detail = f"replica caught up: replay lag {lag_text(reading)}"
                self._transition(conn, "error", "inactive", reading, detail)
        if resolved:
            log.warning("queued the resolve of the replica-lag alert for %s", ", ".join(resolved))

    def _fenced(self, conn: psycopg.Connection) -> None:
        if self.fence is not None:
            self.fence(conn)

    def _transition(
        self, conn: psycopg.Connection, from_state: str, to_state: str, reading: Any, detail: str
    ) -> None:
        insert_transition(
            self.primary,
            conn,
            rule=RULE_NAME,
            instance=self.instance,
            from_state=from_state,
            to_state=to_state,
            value=reading.lag_seconds,
            at=self.clock(),
            detail=detail,
        )
