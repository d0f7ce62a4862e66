"""What the scheduler process reports about itself (thread-safe): the jobs' database contact,
the last evaluation, the stall watch, the read replica's lag, the last retention run and the
sender's notification counts, for ``/metrics`` (``export.collector.OutboxCollector``) and
``/healthz`` (``export.server``)."""

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from outbox_monitor.errors import DatabaseUnavailable
from outbox_monitor.store.standby import skip_reason

NOTIFICATION_OUTCOMES = ("sent", "failed", "suppressed", "rate_limited", "retrying")
"""Outcomes of ``sender.deliver_due`` counted by ``outbox_monitor_notifications_total``."""


class SchedulerStatus:
    """What the scheduler's jobs report, for ``/metrics`` and ``/healthz`` (thread-safe).

    ``build_scheduler`` attaches the scheduler, its evaluator lease and its interval; the
    jobs call ``database_ok`` / ``database_failed`` after each attempt, ``evaluated``
    after a pass and ``delivered`` with the sender's counts.

    Args:
        clock: monotonic seconds (tests may pass their own).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.scheduler: Any = None
        self.leadership: Any = None
        self.interval = 0.0
        self._lock = threading.Lock()
        self._last_ok: float | None = None
        self._last_error: str | None = None
        self._last_failed: float | None = None
        self._unreachable = False
        self._evaluation_seconds: float | None = None
        self._evaluation_age: tuple[float, float] | None = None
        self._stalled = False
        self._replica: tuple[Any, bool, float] | None = None
        self._retention: dict[str, Any] | None = None
        self._notifications: Counter[str] = Counter(
            {outcome: 0 for outcome in NOTIFICATION_OUTCOMES}
        )
        self._refused: Counter[tuple[str, str]] = Counter()
        self.writes: Any = None
        """The process's ``alerts.write_health.WriteHealth`` (``None``: not watched)."""
        self.alertmanager: Any = None
        """The ``alerts.alertmanager.ReceiverStatus`` of its Alertmanager URLs (``None``:
        no ``type: alertmanager`` route)."""
        self.heartbeat: Any = None
        """Its ``service.heartbeat.Heartbeat`` (``None``: no ``OUTBOX_MONITOR_HEARTBEAT_URL``)."""

    def attach(self, scheduler: Any, leadership: Any, interval: float) -> None:
        """Bind the scheduler (``running``), its ``Leadership`` and its interval (seconds)."""
        self.scheduler, self.leadership, self.interval = scheduler, leadership, interval

    def database_ok(self) -> None:
        """A job reached the database and finished."""
        with self._lock:
            self._last_ok = self.clock()

    def database_failed(self, error: BaseException) -> None:
        """A job failed (its first line becomes ``/healthz``'s ``last_error``; a
        ``DatabaseUnavailable`` also its notice while no job succeeds)."""
        with self._lock:
            self._last_error = (str(error).strip().splitlines() or [type(error).__name__])[0]
            self._last_failed = self.clock()
            self._unreachable = isinstance(error, DatabaseUnavailable)

    @property
    def reachable(self) -> bool | None:
        """Whether the jobs' last attempt reached the database (``None``: none yet)."""
        with self._lock:
            return self._reached()

    def _reached(self) -> bool | None:
        """``reachable``, the lock held by the caller."""
        if self._last_failed is None:
            return None if self._last_ok is None else True
        return self._last_ok is not None and self._last_ok > self._last_failed

    @property
    def unreachable(self) -> bool:
        """Whether the jobs' last attempt failed because the database could not be reached
        (``DatabaseUnavailable``; a statement timeout or another error is not that)."""
        with self._lock:
            return self._unreachable and self._reached() is False

    @property
    def last_error(self) -> str | None:
        """The first line of the jobs' last failure (``None``: none since start)."""
        with self._lock:
            return self._last_error

    def retained(
        self, deleted: Mapping[str, int] | None, error: BaseException | None = None
    ) -> None:
        """The retention job ran: the rows it deleted per own table, or the error that
        stopped it (``/healthz``'s ``retention``, and its notice until a run succeeds)."""
        with self._lock:
            self._retention = {
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "deleted": None if deleted is None else dict(deleted),
                "error": None
                if error is None
                else (str(error).strip().splitlines() or [type(error).__name__])[0],
            }

    def evaluated(self, seconds: float) -> None:
        """An evaluation pass took ``seconds`` (wall time)."""
        with self._lock:
            self._evaluation_seconds = seconds

    def watched(self, age: float | None, stalled: bool) -> None:
        """The stall watch read the lease: ``age`` seconds since the last completed
        evaluation (``None``: none yet), and whether alerting is ``stalled``."""
        with self._lock:
            self._evaluation_age = None if age is None else (age, self.clock())
            self._stalled = stalled

    @property
    def evaluation_age(self) -> float | None:
        """Seconds since the last completed evaluation now (the watch's reading plus the
        time since it); ``None`` before the watch saw one."""
        with self._lock:
            if self._evaluation_age is None:
                return None
            age, read_at = self._evaluation_age
            return age + max(0.0, self.clock() - read_at)

    @property
    def stalled(self) -> bool:
        """Whether the stall watch saw alerting stalled at its last check."""
        with self._lock:
            return self._stalled

    def replica(self, reading: Any, *, skipping: bool, max_lag: float) -> None:
        """The leader read the read DSN's replay lag: ``reading`` (``store.standby.ReplicaStatus``),
        whether rules and samples are ``skipping`` it (lag over ``max_lag`` seconds)."""
        with self._lock:
            self._replica = (reading, skipping, max_lag)

    @property
    def replica_reading(self) -> tuple[Any, bool, float] | None:
        """``(ReplicaStatus, skipping, max_lag)`` of the last replica check; ``None`` before
        one (followers never check: the leader evaluates)."""
        with self._lock:
            return self._replica

    def delivered(self, counts: Mapping[str, int]) -> None:
        """Add one sender pass's counts (``sender.deliver_due``) to the outcome counters."""
        with self._lock:
            for outcome in NOTIFICATION_OUTCOMES:
                self._notifications[outcome] += int(counts.get(outcome, 0))

    @property
    def writes_failing_since(self) -> datetime | None:
        """When this process's writes began to fail (``None``: they succeed, or unwatched)."""
        return None if self.writes is None else self.writes.failing_since

    def refused(self, route: str, answer: str) -> None:
        """Slack refused a message of ``route`` for good with ``answer`` (its error code,
        ``slack_outcomes.answer_label``): the message failed, the route went on."""
        with self._lock:
            self._refused[(route, answer)] += 1

    def refusal_counts(self) -> dict[tuple[str, str], int]:
        """Messages refused for good since start, by (route, answer)."""
        with self._lock:
            return dict(self._refused)

    @property
    def is_leader(self) -> bool:
        """Whether this process held the evaluator lease at its last check."""
        return bool(self.leadership is not None and self.leadership.held)

    @property
    def evaluation_seconds(self) -> float | None:
        """Duration of this process's last evaluation pass; ``None`` before the first."""
        with self._lock:
            return self._evaluation_seconds

    def notification_counts(self) -> dict[str, int]:
        """``{outcome: notifications}`` since start, every ``NOTIFICATION_OUTCOMES`` key."""
        with self._lock:
            return {outcome: self._notifications[outcome] for outcome in NOTIFICATION_OUTCOMES}

    def health(self) -> tuple[bool, dict[str, Any]]:
        """The answer of ``/healthz``: the state of *this process*, nothing outside it.

        Healthy while the scheduler runs and every one of its jobs (sampler, evaluator,
        sender, …) is scheduled, i.e. has a next run. The configuration was validated at
        start (an invalid one stops the process before it serves anything). A database
        or Slack outage, or a stalled evaluation, is not this process's fault and a
        restart cannot fix it — a scheduler restarted during the outage starts and
        waits for the database the same way (``service.start_check``) — so it never turns
        ``/healthz`` red (as Alertmanager's and Prometheus's ``/-/healthy``): it shows in
        ``/metrics`` (``outbox_monitor_up``, ``outbox_monitor_notifications_total``),
        on the dashboard and in Slack.

        A read replica lagging over ``OUTBOX_MONITOR_MAX_REPLICA_LAG`` is not this
        process's fault either: ``/healthz`` stays 200 and says it (``notice``); so is a
        database the jobs' last attempt could not reach (``database unreachable: <last
        error>``, from start too: issue 29 item 13), as a fleet's ``/healthz`` names each
        unreachable outbox (``export.fleet.FleetStatus``); so are writes the database refuses (a
        full disk: ``alerts.write_health``).

        Returns:
            ``(healthy, {"status": "ok"|"unavailable", "reason" (``None`` when ok),
            "notice" (``None``, or why rules are not evaluated: the read replica lags),
            "scheduler_running", "jobs" (id → next run, ISO, or ``None`` when it has none),
            "seconds_since_database_contact" (``None``: never), "last_error",
            "replica" (``None`` before a check, else ``{"in_recovery", "lag_seconds",
            "max_lag_seconds", "evaluating"}``), "alertmanager" (``None``, or each URL's
            ``UrlStatus.as_json``), "heartbeat" (``None``, or ``Heartbeat.as_json``)})``;
            the last six are information only (a failing Alertmanager or heartbeat is a
            notice).
        """
        with self._lock:
            last_ok, last_error = self._last_ok, self._last_error
            replica = self._replica
            retention = self._retention
        running = bool(self.scheduler is not None and self.scheduler.running)
        since = None if last_ok is None else self.clock() - last_ok
        jobs = {
            job.id: None if job.next_run_time is None else job.next_run_time.isoformat()
            for job in (self.scheduler.get_jobs() if running else [])
        }
        stopped = sorted(job_id for job_id, next_run in jobs.items() if next_run is None)
        if not running:
            reason = "the scheduler is not running"
        elif stopped:
            reason = f"job(s) without a next run: {', '.join(stopped)}"
        else:
            reason = None
        details = {
            "status": "ok" if reason is None else "unavailable",
            "reason": reason,
            "notice": "; ".join(
                filter(
                    None,
                    (
                        _database_notice(self.unreachable, last_error),
                        _replica_notice(replica),
                        _retention_notice(retention),
                        self._writes_notice(),
                        None if self.alertmanager is None else self.alertmanager.notice(),
                        _heartbeat_notice(self.heartbeat),
                    ),
                )
            )
            or None,
            "scheduler_running": running,
            "jobs": jobs,
            "seconds_since_database_contact": None if since is None else round(since, 3),
            "last_error": last_error,
            "retention": retention,
            "alertmanager": None
            if self.alertmanager is None
            else [url.as_json() for url in self.alertmanager.urls()],
            "heartbeat": None if self.heartbeat is None else self.heartbeat.as_json(),
            "replica": None
            if replica is None
            else {
                **replica[0].as_json(),
                "max_lag_seconds": replica[2],
                "evaluating": not replica[1],
            },
        }
        return reason is None, details

    def _writes_notice(self) -> str | None:
        """``/healthz``'s notice while this process's writes fail (``alerts.write_health``)."""
        since = self.writes_failing_since
        if since is None:
            return None
        return (
            f"writes fail since {since.isoformat(timespec='seconds')}: "
            f"{self.writes.last_error or 'no error text'}"
        )


def _database_notice(unreachable: bool, last_error: str | None) -> str | None:
    """``/healthz``'s notice while the jobs' last attempt could not reach the database:
    ``database unreachable: <its first line>``."""
    return f"database unreachable: {last_error}" if unreachable else None


def _heartbeat_notice(heartbeat: Any) -> str | None:
    """``/healthz``'s notice while the heartbeat's pings fail (``service.heartbeat``)."""
    state = None if heartbeat is None else heartbeat.as_json()
    if state is None or state["failing_since"] is None:
        return None
    return f"heartbeat {state['url']} failing since {state['failing_since']}: {state['last_error']}"


def _replica_notice(replica: tuple[Any, bool, float] | None) -> str | None:
    """``/healthz``'s notice while rules are skipped (``alerts.replica_lag.skip_reason``)."""
    if replica is None or not replica[1]:
        return None
    return skip_reason(replica[0], replica[2])


def _retention_notice(retention: dict[str, Any] | None) -> str | None:
    """``/healthz``'s notice while the last retention run failed."""
    if retention is None or retention["error"] is None:
        return None
    return (
        f"the retention of outbox-monitor's own tables failed at {retention['at']}: "
        f"{retention['error']} (they grow until a run succeeds)"
    )
