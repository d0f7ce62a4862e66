"""The scheduler's jobs: sampler, claim-health plans, alert evaluator, notification sender,
watchdog, retention of the product's own tables, and the optional reaper and pruner, each
added to an APScheduler with its interval (what reaper, pruner and retention do:
``maintenance``).

Every job is wrapped by ``guarded``: an error is logged with the job's name and target and
the job runs again at its next interval; a background loop never dies on one error. Every
job runs only in the process holding the evaluator lease (``alerts.leader``), so any number
of scheduler processes evaluate, reap and prune once per pass and send each notification
at least once — twice when a leader dies mid-post, with one key (``alerts.message_key``;
issue 3 §2, §4; issue 5; issue 29 item 8),
except the ``watchdog``, which runs in every process: it renews or takes over the lease
and watches for a stalled evaluation (``alerts.stall``; issue 10 §2). ``scheduler`` builds
and runs the process around them.

Reads and writes apart (issue 14 item 4): the figures are measured through ``runtime.db``
(``OUTBOX_MONITOR_DSN``, possibly a hot standby); everything the jobs write — the lease,
samples, alert state and transitions, notifications, the reaper's and pruner's changes —
goes through ``runtime.primary`` (``OUTBOX_MONITOR_PRIMARY_DSN``, else the same Database).
While the standby lags more than ``OUTBOX_MONITOR_MAX_REPLICA_LAG`` the evaluator and the
sampler skip their pass (``alerts.replica_lag``).
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.base import BaseScheduler

from outbox_monitor.alerts.alertmanager import AlertmanagerReceiver, shown_url
from outbox_monitor.alerts.clock import Clock
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.leader import Leadership, LeadershipLost
from outbox_monitor.alerts.outage import DatabaseHealth
from outbox_monitor.alerts.receiver_health import watch_receivers
from outbox_monitor.alerts.replica_lag import ReplicaLagWatch
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.sender import SEND_INTERVAL_SECONDS, deliver_due
from outbox_monitor.alerts.stall import StallWatch
from outbox_monitor.alerts.write_health import WriteHealth, is_write_failure
from outbox_monitor.config.fleet import Outbox
from outbox_monitor.errors import DatabaseUnavailable, OutboxMonitorError
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.health.claim_plan import record_claim_plans
from outbox_monitor.service.job_activity import RunningJobs
from outbox_monitor.service.maintenance import prune_own_tables, prune_retention, reap_stuck_locks
from outbox_monitor.service.sampler import record_sample
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import describe_target

# The jobs log as the scheduler process they run in, as they did before they had a module of
# their own: log filters and alerts on these lines key on the logger name.
log = logging.getLogger("outbox_monitor.scheduler")

SAMPLER_JOB_ID = "sampler"
EVALUATOR_JOB_ID = "evaluator"
SENDER_JOB_ID = "sender"
REAPER_JOB_ID = "reaper"
PRUNER_JOB_ID = "pruner"
WATCHDOG_JOB_ID = "watchdog"
CLAIM_PLAN_JOB_ID = "claim_plan"
RETENTION_JOB_ID = "retention"
ALERTMANAGER_JOB_ID = "alertmanager"
SENDER_INTERVAL_SECONDS = SEND_INTERVAL_SECONDS
"""Seconds between sender passes (due notifications wait at most this long; a message that
failed transiently is tried again at the next pass)."""
PRUNE_INTERVAL_SECONDS = 86400.0
"""The automatic prune runs once a day (first run at start)."""
RETENTION_INTERVAL_SECONDS = 3600.0
"""The retention of the product's own tables runs hourly (first run at start)."""
MIN_REAP_INTERVAL_SECONDS = 1.0


def guarded(name: str, job: Callable[[], Any], *, target: str) -> Callable[[], None]:
    """Wrap a job so that no exception escapes it; each one is logged with context.

    Args:
        name: the job's name for the log (``"sampler"``).
        job: the callable to run.
        target: what it works on, for the log (``public.integration_outbox at host/db``).

    Returns:
        A callable for APScheduler: ``DatabaseUnavailable`` is logged as a warning (the
        next interval retries), other ``OutboxMonitorError`` as an error with its hint,
        anything else with its traceback.
    """

    def run() -> None:
        try:
            job()
        except DatabaseUnavailable as error:
            message = str(error).splitlines()[0]
            log.warning("%s on %s: %s; retrying at the next interval", name, target, message)
        except OutboxMonitorError as error:
            log.error("%s on %s failed: %s", name, target, error)
        except Exception:
            log.exception("%s on %s failed unexpectedly; it runs again next interval", name, target)

    run.__name__ = f"guarded_{name}"
    return run


def add_interval_job(
    scheduler: BaseScheduler, job_id: str, job: Callable[[], None], *, seconds: float, name: str
) -> None:
    """Schedule ``job`` every ``seconds``: first run now, one instance at a time, missed
    runs coalesced (the settings every job of this process shares)."""
    scheduler.add_job(
        job,
        "interval",
        seconds=seconds,
        id=job_id,
        name=name,
        max_instances=1,
        coalesce=True,
        next_run_time=datetime.now(UTC),
        misfire_grace_time=max(1, int(seconds)),
        replace_existing=True,
    )


def add_sampler_job(
    scheduler: BaseScheduler,
    db: Database,
    *,
    wrap: Callable[[Callable[[], Any]], Callable[[], Any]] | None = None,
    primary: Database | None = None,
    skip: Callable[[], bool] | None = None,
) -> None:
    """Add the sampler (``sampler.record_sample``) every ``settings.sample_interval`` s.

    One instance at a time, missed runs coalesced, first run immediately. ``wrap``
    (``build_scheduler`` passes its leader-only wrapper) goes inside ``guarded``. Figures
    are read through ``db`` and samples written through ``primary`` (default ``db``); a
    pass is skipped when ``skip()`` says so (``JobRuntime.replica_lags``: stale figures).
    """
    target = f"{db.table_name} at {describe_target(db.settings.dsn)}"

    def sample() -> None:
        if skip is not None and skip():
            return
        record_sample(db, primary=primary)

    add_interval_job(
        scheduler,
        SAMPLER_JOB_ID,
        guarded(SAMPLER_JOB_ID, wrap(sample) if wrap else sample, target=target),
        seconds=db.settings.sample_interval,
        name="record headline sample",
    )


def add_claim_plan_job(scheduler: BaseScheduler, runtime: "JobRuntime", *, target: str) -> None:
    """Add the claim-health job (``health.claim_plan.record_claim_plans``) every
    ``settings.claim_plan_interval`` s (``OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL``, default
    5 min), leader only: EXPLAIN (never ANALYZE) the claim's inner selection through
    ``runtime.db``, record the plans and the workers' ``pg_stat_statements`` costs through
    ``runtime.primary``, prune past the samples' retention. A pass is skipped while the read
    replica lags (``JobRuntime.replica_lags``). A failure is logged by ``guarded`` and shows
    as ``/healthz``'s ``last_error``, like the sampler's."""

    def record() -> None:
        if runtime.replica_lags():
            return
        record_claim_plans(runtime.db, primary=runtime.primary)

    add_interval_job(
        scheduler,
        CLAIM_PLAN_JOB_ID,
        guarded(CLAIM_PLAN_JOB_ID, runtime.as_leader(record), target=target),
        seconds=runtime.db.settings.claim_plan_interval,
        name="explain the workers' claim",
    )


class JobRuntime:
    """What the jobs of one scheduler share: the Database of the figures (``db``) and of
    the writes (``primary``, default ``db``), the evaluator lease, the database health,
    the status the exporter reads (``SchedulerStatus``), the read replica's lag watch
    (``store.standby``; ``None``: no check) and the writes-failing watch
    (``alerts.write_health``; ``None``: none)."""

    def __init__(
        self,
        db: Database,
        leadership: Leadership,
        health: DatabaseHealth,
        status: SchedulerStatus,
        *,
        primary: Database | None = None,
        replica: ReplicaLagWatch | None = None,
        writes: WriteHealth | None = None,
    ) -> None:
        self.db = db
        self.writes = writes
        self.primary = primary or db
        self.leadership = leadership
        self.health = health
        self.status = status
        self.replica = replica
        self.running = RunningJobs()
        self._running = 0
        self._releasing = False
        self._running_lock = threading.Lock()

    @property
    def releasing(self) -> bool:
        """Whether a release of the lease waits for the running pass (``release``)."""
        return self._releasing

    def release(self) -> None:
        """Give the lease back between passes, never in the middle of one (a replica's
        surplus, ``fleet_scheduler``): at once when no leader-only job of this outbox runs,
        else when the last running one ends; meanwhile no such job starts a pass."""
        with self._running_lock:
            if self._running:
                self._releasing = True
                return
            self.leadership.release()

    def replica_lags(self) -> bool:
        """Check the read replica (``ReplicaLagWatch.check``, under this lease term):
        whether its lag is over the setting, so that a leader's pass must be skipped."""
        if self.replica is None:
            return False
        return self.replica.check(self.leadership.term).exceeds(self.replica.max_lag)

    def as_leader(self, job: Callable[[], Any], *, writes: bool = False) -> Callable[[], None]:
        """Run ``job`` only while this process is the leader (renewing or taking the lease
        first), backing off while the database is unreachable (``DatabaseHealth``);
        failures still reach ``guarded``. A lease taken over mid-job (``LeadershipLost``
        from a fence) ends the job quietly: ``Leadership`` has logged it. ``writes``: every
        successful run of ``job`` writes (the evaluator), so it proves the writes work
        again for every job (``WriteHealth.succeeded``)."""
        return self._reporting(job, leader_only=True, writes=writes)

    def in_every_process(self, job: Callable[[], Any]) -> Callable[[], None]:
        """Like ``as_leader``, but ``job`` runs whether or not this process leads."""
        return self._reporting(job, leader_only=False)

    def _reporting(
        self, job: Callable[[], Any], *, leader_only: bool, writes: bool = False
    ) -> Callable[[], None]:
        name = getattr(job, "__name__", repr(job))

        def run() -> None:
            self.health.tick()
            if self.writes is not None:
                self.writes.tick()
            if not self.health.due():
                return
            was_leader = self.leadership.held
            if leader_only:
                with self._running_lock:
                    if self._releasing:
                        return
                    self._running += 1
            ran = False
            try:
                if not leader_only or self.leadership.try_acquire():
                    job()
                    ran = True
            except LeadershipLost as error:
                log.info("%s", error)
            except DatabaseUnavailable as error:
                self.status.database_failed(error)
                self.health.failed(error, was_leader=was_leader or self.leadership.held)
                raise
            except Exception as error:
                self.status.database_failed(error)
                if self.writes is not None and is_write_failure(error):
                    self.writes.failed(name, error, was_leader=was_leader or self.leadership.held)
                raise
            finally:
                if leader_only:
                    self._done()
            self.running.answered()
            self.status.database_ok()
            self.health.succeeded()
            if self.writes is not None:
                self.writes.succeeded(name, proves_writes=writes and ran)

        return run

    def _done(self) -> None:
        with self._running_lock:
            self._running -= 1
            if self._releasing and not self._running:
                self._releasing = False
                self.leadership.release()


def add_evaluator_job(
    scheduler: BaseScheduler,
    runtime: JobRuntime,
    ruleset: RuleSet,
    *,
    clock: Clock,
    target: str,
    outbox: Outbox | None = None,
    after_pass: Callable[[], Any] | None = None,
) -> None:
    """Add the rule evaluator (``Evaluator.run_once``) every ``ruleset.defaults.interval`` s,
    on the leader only, fenced by its lease term; the first pass runs at once. A completed
    pass is stamped in the lease (``Leadership.record_evaluation``) for the stall watch.

    The rules' figures are measured through ``runtime.db`` and the state written through
    ``runtime.primary``. A pass skipped because the read replica lags
    (``JobRuntime.replica_lags``) is stamped too: the replica-lag alert says why no rule is
    evaluated, and the stall alert would say it twice. ``outbox``: the fleet's outbox
    evaluated (``Evaluator``'s: the rules selecting it, its labels). ``after_pass`` is called
    after each completed pass, never after a failed or skipped one (``outbox_schedule``: the
    Alertmanager Watchdog and the heartbeat)."""
    evaluator = Evaluator(
        runtime.primary,
        ruleset,
        clock=clock,
        fence=runtime.leadership.fence,
        figures_db=runtime.db,
        outbox=outbox,
        own_sources=runtime.health.firing_sources,
    )

    def evaluate() -> None:
        if runtime.replica_lags():
            runtime.leadership.record_evaluation()
            return
        report = evaluator.run_once()
        runtime.leadership.record_evaluation()
        runtime.status.evaluated(report.duration_seconds)
        if after_pass is not None:
            after_pass()
        for rule, instance, transition in report.transitions:
            log.info("alert %s%s: %s", rule, f" [{instance}]" if instance else "", transition)
        log.debug(
            "evaluated %d rule(s), %d instance(s) in %.3f s",
            len(report.rule_seconds),
            len(report.instances),
            report.duration_seconds,
        )

    interval = ruleset.defaults.interval
    add_interval_job(
        scheduler,
        EVALUATOR_JOB_ID,
        guarded(EVALUATOR_JOB_ID, runtime.as_leader(evaluate, writes=True), target=target),
        seconds=interval,
        name="evaluate alert rules",
    )


def add_sender_job(
    scheduler: BaseScheduler,
    runtime: JobRuntime,
    ruleset: RuleSet,
    *,
    clock: Clock,
    transports: Mapping[str, Any],
    interval: float,
    target: str,
) -> None:
    """Add the notification sender (``sender.deliver_due``) every ``interval`` s, on the
    leader only, fenced by its lease term, then ``receiver_health.watch_receivers`` (a
    receiver that keeps failing is told through the others). It also drives the
    database-unreachable alert (``DatabaseHealth.tick``; ``hang_watch`` does while this job
    waits on a hung database)."""

    def send() -> None:
        counts = deliver_due(
            runtime.primary,
            ruleset,
            clock=clock,
            transports=transports,
            fence=runtime.leadership.fence,
            retry_interval=interval,
            on_refused=runtime.status.refused,
        )
        runtime.status.delivered(counts)
        told = watch_receivers(
            runtime.primary, ruleset, clock=clock, fence=runtime.leadership.fence
        )
        for route in told["raised"]:
            log.error("receiver %s keeps failing: told through the other receivers", route)
        for route in told["resolved"]:
            log.warning("receiver %s delivers again", route)
        if counts.get("messages") or counts.get("failed"):
            log.info("sender: %s", ", ".join(f"{k} {v}" for k, v in counts.items() if v))

    add_interval_job(
        scheduler,
        SENDER_JOB_ID,
        guarded(SENDER_JOB_ID, runtime.as_leader(send), target=target),
        seconds=interval,
        name="send due notifications",
    )


def add_alertmanager_job(
    scheduler: BaseScheduler,
    runtime: JobRuntime,
    receiver: AlertmanagerReceiver,
    *,
    tick: float,
    target: str,
) -> None:
    """Add the ``alertmanager`` job every ``tick`` s (the sender's), leader only: post the
    alerts of the ``type: alertmanager`` routes and the Watchdog (``alerts.alertmanager``: to a
    URL whose last post failed, and again once per evaluation interval; what an evaluation
    changes is posted right after it, ``AlertmanagerReceiver.evaluated``). A URL that fails is
    the receiver's to report; the job itself fails only when the alert state cannot be read."""

    def post() -> None:
        posted = receiver.run_once()
        if posted:
            log.debug(
                "alertmanager: %s", ", ".join(f"{shown_url(u)} {n}" for u, n in posted.items())
            )

    add_interval_job(
        scheduler,
        ALERTMANAGER_JOB_ID,
        guarded(ALERTMANAGER_JOB_ID, runtime.as_leader(post), target=target),
        seconds=tick,
        name="post alerts to Alertmanager",
    )


def add_watchdog_job(
    scheduler: BaseScheduler,
    runtime: JobRuntime,
    watch: StallWatch | None,
    *,
    tick: float,
    target: str,
) -> None:
    """Add the watchdog every ``tick`` s in every process: renew the lease (leader) or take
    it over when expired or its holder is gone (followers), then ``watch.check()`` (the
    stalled-alerting alert; ``None``: no rules, nothing to watch), whose count restarts
    while the writes fail (``alerts.write_health``: that alert says why)."""

    def watchdog() -> None:
        started = time.monotonic()
        try:
            runtime.leadership.try_acquire()
        except DatabaseUnavailable:
            if watch is not None:
                watch.lost_database()
            raise
        if watch is not None:
            if runtime.writes is not None and runtime.writes.in_episode:
                watch.lost_database()  # the writes-failing alert says why; recount after it
            watch.check(waited=time.monotonic() - started)

    add_interval_job(
        scheduler,
        WATCHDOG_JOB_ID,
        guarded(WATCHDOG_JOB_ID, runtime.in_every_process(watchdog), target=target),
        seconds=tick,
        name="renew the evaluator lease and watch for a stalled evaluation",
    )


def add_maintenance_jobs(scheduler: BaseScheduler, runtime: JobRuntime, *, target: str) -> None:
    """Add the optional reaper and pruner (off unless configured), leader only.

    - ``reaper`` with ``OUTBOX_MONITOR_AUTO_REAP=true``: ``reap_stuck_locks`` every
      ``lock_timeout / 3`` (at least 1 s), each run at most its budget
      (``auto_reap_max_rows``, ``auto_reap_max_share`` of the stuck rows), the oldest locks
      first: a lock is reaped a third of the lock timeout after it expired at most, unless
      more rows are stuck than one run's budget;
    - ``pruner`` with ``OUTBOX_MONITOR_AUTO_PRUNE_DONE`` and/or ``…_FAILED``:
      ``prune_retention`` daily.

    Both start with a run at once, and write audit rows with actor ``scheduler``. Always
    added: ``retention`` (``maintenance.prune_own_tables``) hourly, its outcome reported to
    ``runtime.status`` (``/healthz``'s ``retention``, a notice while it fails).
    """
    settings = runtime.db.settings

    def add(job_id: str, job: Callable[[], Any], seconds: float, name: str) -> None:
        guarded_job = guarded(job_id, runtime.as_leader(job), target=target)
        add_interval_job(scheduler, job_id, guarded_job, seconds=seconds, name=name)

    if settings.auto_reap:
        add(
            REAPER_JOB_ID,
            lambda: reap_stuck_locks(runtime.primary),
            max(MIN_REAP_INTERVAL_SECONDS, settings.lock_timeout / 3),
            "reap stuck locks",
        )
    if settings.auto_prune_done is not None or settings.auto_prune_failed is not None:
        add(
            PRUNER_JOB_ID,
            lambda: prune_retention(runtime.primary),
            PRUNE_INTERVAL_SECONDS,
            "prune old done and failed rows",
        )

    def retain() -> None:
        try:
            runtime.status.retained(prune_own_tables(runtime.primary))
        except Exception as error:
            runtime.status.retained(None, error)
            raise

    add(
        RETENTION_JOB_ID,
        retain,
        RETENTION_INTERVAL_SECONDS,
        "delete outbox-monitor's own rows past their retention",
    )
