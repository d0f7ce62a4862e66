"""The "alerting is stalled" alert (issue 10 §2): no evaluation for 3 intervals is never silent.

The leader stamps the end of every completed evaluation pass in its lease row
(``leader_leases.evaluated_at``, database clock; ``alerts.leader``). Every scheduler
process — followers and the leader alike — runs a ``StallWatch`` each tick, whatever the
cause of a stall (a lease held by a hung leader or a stranger with the scheduler role,
evaluations that fail or never end, a stopped clock):

- it reads the lease (``read_lease``) and counts alerting as *stalled* when the last
  completed evaluation is older than ``STALL_INTERVALS`` (3) evaluation intervals. After
  this process starts or regains the database, the count starts then plus ``grace`` (the
  scheduler's database backoff), so the database-unreachable alert is not doubled by a
  stalled one while the leader reconnects (the grace covers the leader's own backoff,
  and after an outage a pooled connection's connect timeout too); a takeover does not
  restart the count, so leaders that keep taking the lease over without evaluating are
  alerted too;
- it logs the stall as an ERROR once per episode (and once more when it ends), and
  reports ``outbox_monitor_last_evaluation_age_seconds`` and
  ``outbox_monitor_alerting_stalled`` on ``/metrics`` (``scheduler_status.SchedulerStatus``);
- it queues one notification per route, rule ``alerting-stalled``, kind ``error``, with
  the dedupe key ``alerting-stalled|<table>|<episode>/<route>|error``: the episode is the
  stale ``evaluated_at`` itself, so every process that notices computes the same key and
  ``INSERT … ON CONFLICT DO NOTHING`` keeps exactly one per episode however many notice;
- it delivers the rows of that rule at once, straight to Slack through its own
  transports (``sender.deliver_due(rule=…)``), without waiting for the stalled leader's
  sender; the rows are locked while posted, so one process posts each; 429 and 5xx are
  retried by whichever process ticks next;
- when a newer evaluation completes (within the threshold), it queues the ``resolved``
  notification of each open episode (same dedupe scheme), delivered the same way (a bot
  token updates the alert and replies in its thread).

The episode's start and end are also written as ``alert_transitions`` (``inactive→error``,
``error→inactive``) by the process that queued each message. ``/healthz`` never turns red
for a stall: it reports this process only.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.inhibition import own_labels
from outbox_monitor.alerts.outbox_scope import scope_labels
from outbox_monitor.alerts.own_alerts import (
    insert_all,
    insert_transition,
    notification_params,
    open_alerts,
    resolve_params,
)
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.durations import format_duration
from outbox_monitor.errors import DatabaseUnavailable
from outbox_monitor.store.db import CONNECT_TIMEOUT_SECONDS, Database

log = logging.getLogger(__name__)

RULE_NAME = "alerting-stalled"
"""The rule name of the alert (notifications, transitions)."""
STALL_INTERVALS = 3
"""Alerting is stalled when no evaluation completed for more than this many intervals."""
RECONNECT_SECONDS = CONNECT_TIMEOUT_SECONDS + 1.0
"""Added to the grace after a database outage: a pooled call of the leader may wait this
long for its first connection after the server is back (``db.Database.connection``)."""
NEVER = "never"
"""The episode of a table whose lease has no completed evaluation yet."""


@dataclass(frozen=True)
class LeaseStatus:
    """The evaluator lease of one outbox table as the database sees it now.

    ``holder`` … ``evaluated_at`` are ``None`` when no scheduler ever took the lease.
    ``holder_connected``: the holder's leadership connection is open. Times are aware
    datetimes of the database clock.
    """

    now: datetime
    holder: str | None = None
    holder_pid: int | None = None
    term: int | None = None
    acquired_at: datetime | None = None
    renewed_at: datetime | None = None
    expires_at: datetime | None = None
    evaluated_at: datetime | None = None
    holder_connected: bool = False

    @property
    def exists(self) -> bool:
        """Whether any scheduler ever took the lease of this table."""
        return self.holder is not None

    @property
    def evaluation_age(self) -> float | None:
        """Seconds since the last completed evaluation; ``None`` before the first."""
        if self.evaluated_at is None:
            return None
        return max(0.0, (self.now - self.evaluated_at).total_seconds())

    def stall_age(self, not_before: datetime | None = None) -> float:
        """Seconds counted towards a stall (the one definition; dashboard and schedulers).

        Counted from the later of the last completed evaluation (before the first one: the
        lease's acquisition) and ``not_before`` (a scheduler's own start or reconnection
        plus its grace). A takeover does not restart the count: leaders that keep taking
        the lease over without evaluating (a crash loop, a stranger) stall alerting too.

        Args:
            not_before: an aware datetime of the database clock, or ``None``.

        Returns:
            Seconds, >= 0.
        """
        since = self.evaluated_at or self.acquired_at
        starts = [t for t in (since, not_before) if t is not None]
        return max(0.0, (self.now - max(starts, default=self.now)).total_seconds())

    def explain(self) -> str:
        """Who holds the lease and in what state, for people (one sentence, no period)."""
        if not self.exists:
            return "no scheduler has taken the evaluator lease of this table yet"
        renewed = format_duration((self.now - self.renewed_at).total_seconds())
        if self.expires_at is not None and self.expires_at <= self.now:
            return (
                f"the evaluator lease (last held by {self.holder}, term {self.term}) expired "
                f"{format_duration((self.now - self.expires_at).total_seconds())} ago and no "
                "running scheduler has taken it over"
            )
        if not self.holder_connected:
            return (
                f"the lease holder {self.holder} (term {self.term}) has lost its database "
                "connection; another scheduler takes the lease over at its next tick"
            )
        if self.evaluated_at is not None and self.acquired_at > self.evaluated_at:
            taken = format_duration((self.now - self.acquired_at).total_seconds())
            return (
                f"{self.holder} took the evaluator lease over {taken} ago (term {self.term}) "
                "and has completed no evaluation since: it may still be reconnecting to the "
                "database, or be hung, or its evaluations fail (see its log)"
            )
        return (
            f"{self.holder} holds the evaluator lease (term {self.term}, renewed {renewed} "
            "ago) but completes no evaluation: it may be hung, or its evaluations fail "
            "or never end (see its log)"
        )


def read_lease(db: Database) -> LeaseStatus:
    """The lease of ``db``'s outbox table (``lease_status``; one round trip).

    Raises:
        DatabaseUnavailable and the connector's other errors.
    """
    row = db.fetch_one("lease_status", {"table_name": db.table_name})
    return LeaseStatus(**row)


def stall_threshold(interval: float) -> float:
    """Seconds without a completed evaluation after which alerting is stalled.

    Args:
        interval: the evaluation interval (``defaults.interval`` of alerts.yml), seconds.
    """
    return STALL_INTERVALS * interval


def describe_stall(lease: LeaseStatus, interval: float) -> str | None:
    """The dashboard's banner text when alerting is stalled, else ``None``.

    Stalled: a lease exists and its ``stall_age`` (since the last completed evaluation,
    before the first one since the lease's acquisition) exceeds
    ``stall_threshold(interval)`` seconds.

    Args:
        lease: ``read_lease``.
        interval: the evaluation interval in seconds.

    Returns:
        Plain text (not markdown-escaped) naming the age, the threshold and the lease.
    """
    if not lease.exists:
        return None
    threshold = stall_threshold(interval)
    if lease.stall_age() <= threshold:
        return None
    last = (
        f"the last one ended {format_duration(lease.evaluation_age)} ago"
        if lease.evaluated_at is not None
        else f"none since the lease was taken {format_duration(lease.stall_age())} ago"
    )
    return (
        f"No alert evaluation has completed for more than {STALL_INTERVALS} intervals "
        f"({format_duration(threshold)}): {last}. Alerts are neither evaluated nor sent; "
        f"{lease.explain()}."
    )


class StallWatch:
    """The stall check of one scheduler process (see the module docstring).

    Not thread-safe: one scheduler job calls ``check`` (``max_instances=1``).

    Args:
        db: the connector.
        ruleset: the loaded alerts.yml: its routes receive the alert; ``interval`` sets
            the threshold.
        identity: this process (``host:pid``), named in the alert.
        transports: ``{route: transport}``; ``None``: this process queues the alert but
            another one (with Slack configured) posts it.
        clock: the scheduler's clock (notification and transition times, due-ness).
        grace: seconds added after this process starts or regains the database.
        status: where the figures go for ``/metrics`` (``scheduler_status.SchedulerStatus``);
            ``None``: nowhere.
    """

    def __init__(
        self,
        db: Database,
        ruleset: Any,
        *,
        identity: str,
        transports: Mapping[str, Any] | None = None,
        clock: Clock = system_clock,
        grace: float = 0.0,
        status: Any = None,
    ) -> None:
        self.db = db
        self.ruleset = ruleset
        self.identity = identity
        self.transports = transports
        self.clock = clock
        self.grace = grace
        self.status = status
        self.interval = ruleset.defaults.interval
        self.threshold = stall_threshold(self.interval)
        self._reachable_since: datetime | None = None
        self._after_outage = False
        self._logged: str | None = None
        self._queued: str | None = None

    def check(self, waited: float = 0.0) -> bool:
        """Read the lease, report, queue and deliver the stalled alert or its resolve.

        Args:
            waited: seconds the caller just waited for this database (the watchdog's lease
                renewal). Longer than an interval: the database did not answer meanwhile (a
                server that hangs raises nothing), which counts as ``lost_database``, so a
                database-unreachable alert is not doubled by a stalled one when it answers.

        Returns:
            Whether alerting is stalled as this process sees it.

        Raises:
            DatabaseUnavailable and the connector's errors (the scheduler's job logs
            them and backs off; the count restarts when the database answers again).
        """
        if waited > self.interval:
            self.lost_database()
        try:
            lease = read_lease(self.db)
        except DatabaseUnavailable:
            self.lost_database()
            raise
        if self._reachable_since is None:
            self._reachable_since = lease.now
        # after an outage the leader notices the database within its backoff (the grace),
        # plus one pooled connection attempt that may still wait out the connect timeout
        grace = self.grace + (RECONNECT_SECONDS if self._after_outage else 0.0)
        grace_end = self._reachable_since + timedelta(seconds=grace)
        stalled = lease.stall_age(not_before=grace_end) > self.threshold
        if self.status is not None:
            self.status.watched(lease.evaluation_age, stalled)
        if stalled:
            self._stalled(lease)
        else:
            self._running(lease)
        if self.transports is not None:
            deliver_due(
                self.db, self.ruleset, clock=self.clock, transports=self.transports, rule=RULE_NAME
            )
        return stalled

    def lost_database(self) -> None:
        """Note that this process could not reach the database (whichever call found out):
        the count restarts, with the after-outage grace, when it answers again."""
        self._reachable_since = None
        self._after_outage = True

    # --------------------------------------------------------------- private

    def _stalled(self, lease: LeaseStatus) -> None:
        # UTC whatever the session's TimeZone: every process must compute the same key
        episode = lease.evaluated_at.astimezone(UTC).isoformat() if lease.evaluated_at else NEVER
        age = lease.evaluation_age
        if self._logged != episode:
            self._logged = episode
            log.error(
                "alerting is stalled: no alert evaluation of %s has completed for %s "
                "(more than %d intervals of %s); %s",
                self.db.table_name,
                format_duration(age) if age is not None else "ever",
                STALL_INTERVALS,
                format_duration(self.interval),
                lease.explain(),
            )
        if self._queued == episode:
            return
        with self.db.transaction() as conn:
            rows = [
                self._row(lease, episode, route, "error") for route in self.ruleset.message_routes
            ]
            queued = insert_all(self.db, conn, rows)
            if queued:
                self._transition(conn, "inactive", "error", age, lease.explain())
        self._queued = episode
        if queued:
            log.warning(
                "queued the alerting-stalled alert of %s for route(s) %s (episode %s)",
                self.db.table_name,
                ", ".join(queued),
                episode,
            )

    def _running(self, lease: LeaseStatus) -> None:
        age = lease.evaluation_age
        if self._logged is not None and age is not None and age <= self.threshold:
            log.warning(
                "alerting resumed: an evaluation of %s completed %s ago",
                self.db.table_name,
                format_duration(age),
            )
            self._logged = None
        if age is None or age > self.threshold:
            return
        open_rows = open_alerts(self.db, RULE_NAME, self.db.table_name)
        ended = [row for row in open_rows if self._resumed_since(row["payload"], lease)]
        if not ended:
            return
        with self.db.transaction() as conn:
            resolved = insert_all(self.db, conn, [self._resolve_row(row, lease) for row in ended])
            if resolved:
                detail = (
                    f"evaluations resumed: the last one ended {format_duration(age)} ago "
                    f"(term {lease.term}, {lease.holder})"
                )
                self._transition(conn, "error", "inactive", age, detail)
        self._queued = None
        if resolved:
            log.warning(
                "queued the resolve of the alerting-stalled alert of %s for route(s) %s",
                self.db.table_name,
                ", ".join(resolved),
            )

    @staticmethod
    def _resumed_since(payload: Mapping[str, Any], lease: LeaseStatus) -> bool:
        """Whether an evaluation completed after the episode of ``payload`` began."""
        if lease.evaluated_at is None:
            return False
        episode = payload.get("episode")
        return episode == NEVER or lease.evaluated_at > datetime.fromisoformat(str(episode))

    def _transition(self, conn: Any, from_state: str, to_state: str, age: Any, detail: str) -> None:
        insert_transition(
            self.db,
            conn,
            rule=RULE_NAME,
            instance=self.db.table_name,
            from_state=from_state,
            to_state=to_state,
            value=age,
            at=self.clock(),
            detail=detail,
        )

    def _row(self, lease: LeaseStatus, episode: str, route: str, kind: str) -> dict[str, Any]:
        """The parameters of ``notification_insert`` for the alert (kind ``error``)."""
        table = self.db.table_name
        age = lease.evaluation_age
        since = (
            "its start"
            if lease.evaluated_at is None
            else f"{lease.evaluated_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        )
        payload = {
            "rule": RULE_NAME,
            "instance": table,
            "severity": "critical",
            "summary": (
                f"No alert evaluation of {table} has completed since {since} (more than "
                f"{STALL_INTERVALS} intervals of {format_duration(self.interval)}): no rule "
                f"is evaluated and no other alert is sent. Cause: {lease.explain()}. "
                f"Noticed by {self.identity}; a resolve follows when evaluations resume."
            ),
            "error": "alerting is stalled: no alert evaluation for "
            + (format_duration(age) if age is not None else "ever"),
            "metric": "last_evaluation_age",
            "op": ">",
            "threshold": self.threshold,
            "value": age,
            "unit": "seconds",
            "since": lease.evaluated_at.isoformat() if lease.evaluated_at else None,
            "labels": own_labels(RULE_NAME, scope_labels(None, self.db.alert_outbox)),
            "offenders": [],
            "runbook_url": None,
            "runbook": own_runbooks.steps(RULE_NAME) if kind == "error" else [],
            "dashboard_path": "/alerts",
            "kind": kind,
            "episode": episode,
        }
        return notification_params(
            rule=RULE_NAME,
            instance=table,
            route=route,
            kind=kind,
            episode=episode,
            payload=payload,
            now=self.clock(),
        )

    def _resolve_row(self, row: Mapping[str, Any], lease: LeaseStatus) -> dict[str, Any]:
        """``notification_insert`` parameters of the resolve of one open alert row."""
        return resolve_params(
            row,
            now=self.clock(),
            value=lease.evaluation_age,
            summary=(
                f"Alert evaluation of {self.db.table_name} has resumed ({lease.holder}, "
                f"lease term {lease.term})."
            ),
        )
