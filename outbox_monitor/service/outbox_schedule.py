"""One outbox's jobs in a scheduler: ``add_outbox_jobs`` adds the watchdog, sampler, claim
plan, maintenance, evaluator and sender of one outbox (its Databases, lease, database health,
stall and replica-lag watches) to an APScheduler made by ``new_scheduler``, each job's start
and end noted for its hang watch (``hang_watch``).
``scheduler.build_scheduler`` adds those of the single outbox, ``fleet_scheduler`` those of
every outbox of a fleet to one scheduler (issue 16 item 5)."""

import logging
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.schedulers.blocking import BlockingScheduler

from outbox_monitor.alerts.alertmanager import AlertmanagerReceiver, alertmanager_urls
from outbox_monitor.alerts.alertmanager_health import AlertmanagerHealth
from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.leader import Leadership, lease_ttl
from outbox_monitor.alerts.outage import BACKOFF_CAP_SECONDS, DatabaseHealth
from outbox_monitor.alerts.outbox_scope import scope_labels
from outbox_monitor.alerts.replica_lag import ReplicaLagWatch
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.stall import StallWatch
from outbox_monitor.alerts.write_health import FAILED_INTERVALS, WriteHealth
from outbox_monitor.config.fleet import Outbox
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.service.hang_watch import HangWatch, hang_after
from outbox_monitor.service.heartbeat import Heartbeat
from outbox_monitor.service.job_activity import TimedJobs
from outbox_monitor.service.jobs import (
    SENDER_INTERVAL_SECONDS,
    JobRuntime,
    add_alertmanager_job,
    add_claim_plan_job,
    add_evaluator_job,
    add_maintenance_jobs,
    add_sampler_job,
    add_sender_job,
    add_watchdog_job,
)
from outbox_monitor.service.skipped_runs import quiet_skipped_runs
from outbox_monitor.service.start_check import StartCheck, add_start_check_job
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import describe_target


def new_scheduler(*, blocking: bool, workers: int | None = None) -> BaseScheduler:
    """An empty APScheduler in UTC: ``BlockingScheduler`` when ``blocking``, else a
    ``BackgroundScheduler``; ``workers`` threads run its jobs (default APScheduler's 10).
    APScheduler's "Running job …" INFO lines (and with ``workers``, a fleet's, its "Added
    job …" lines) are silenced unless the application configured that logger itself; its
    skipped-run WARNINGs come once a minute per job (``service.skipped_runs``)."""
    executor_log = logging.getLogger("apscheduler.executors.default")
    if executor_log.level == logging.NOTSET:
        executor_log.setLevel(logging.WARNING)
    scheduler_class = BlockingScheduler if blocking else BackgroundScheduler
    scheduler_log = logging.getLogger("apscheduler.scheduler")
    quiet_skipped_runs(scheduler_log)  # a hung database: once a minute per job, not 5/s
    if workers is None:
        return scheduler_class(timezone=UTC)
    # a fleet adds jobs by the hundred: APScheduler's "Added job …" lines would flood the log
    if scheduler_log.level == logging.NOTSET:
        scheduler_log.setLevel(logging.WARNING)
    return scheduler_class(timezone=UTC, executors={"default": ThreadPoolExecutor(workers)})


def add_outbox_jobs(
    scheduler: Any,
    db: Database,
    *,
    ruleset: RuleSet | None = None,
    clock: Clock = system_clock,
    transports: Mapping[str, Any] | None = None,
    leadership: Leadership | None = None,
    sender_interval: float = SENDER_INTERVAL_SECONDS,
    outage_alert_after: float | None = None,
    status: SchedulerStatus | None = None,
    primary: Database | None = None,
    outbox: Outbox | None = None,
    hang_seconds: float | None = None,
    hang_watches: list[HangWatch] | None = None,
    start_check: StartCheck | None = None,
) -> JobRuntime:
    """Add one outbox's jobs to ``scheduler`` (arguments and jobs as ``build_scheduler``;
    ``scheduler`` may be a ``fleet_scheduler.OutboxJobs``, which gives the job ids the
    outbox's name). Returns the jobs' ``JobRuntime`` (its ``leadership`` is the outbox's
    lease: release it when the scheduler shuts down).

    Each job notes its start and end in ``JobRuntime.running`` (``service.job_activity.TimedJobs``);
    the outbox's ``HangWatch`` (threshold ``hang_seconds``, default ``hang_after``) is
    appended to ``hang_watches`` for the caller's ``hang_watch.add_hang_watch_job``. A
    ``start_check`` that has not passed (the database was unreachable at start) is retried
    every tick by the job ``start_check`` (``service.start_check``)."""
    interval = ruleset.defaults.interval if ruleset else db.settings.sample_interval
    primary = primary or db
    leadership = leadership or Leadership(primary.settings, ttl=lease_ttl(interval))
    health = DatabaseHealth(
        primary,
        identity=leadership.identity,
        ruleset=ruleset,
        transports=transports,
        clock=clock,
        alert_after=interval if outage_alert_after is None else outage_alert_after,
        backoff_cap=min(BACKOFF_CAP_SECONDS, interval),
    )
    status = status or SchedulerStatus()
    status.attach(scheduler, leadership, interval)
    replica = ReplicaLagWatch(
        db,
        primary,
        max_lag=db.settings.max_replica_lag,
        ruleset=ruleset,
        transports=transports,
        clock=clock,
        status=status,
        fence=leadership.fence,
    )
    writes = WriteHealth(
        primary,
        identity=leadership.identity,
        ruleset=ruleset,
        transports=transports,
        database=health,
        alert_after=FAILED_INTERVALS * interval,
        mark=leadership.mark_writes_failing,
        clock=clock,
    )
    status.writes = writes
    runtime = JobRuntime(
        db, leadership, health, status, primary=primary, replica=replica, writes=writes
    )
    jobs = TimedJobs(scheduler, runtime.running)
    target = f"{db.table_name} at {describe_target(db.settings.dsn)}"
    watch = (
        StallWatch(
            primary,
            ruleset,
            identity=leadership.identity,
            transports=transports,
            clock=clock,
            grace=health.backoff_cap,
            status=status,
        )
        if ruleset is not None
        else None
    )
    tick = min(interval, sender_interval)
    if hang_watches is not None:
        after = hang_after(db.settings, interval) if hang_seconds is None else hang_seconds
        hang_watches.append(HangWatch(runtime, watch, after=after, target=target, tick=tick))
    add_watchdog_job(jobs, runtime, watch, tick=tick, target=target)
    if start_check is not None and not start_check.passed:
        add_start_check_job(jobs, start_check, runtime.in_every_process, tick=tick, target=target)
    add_sampler_job(jobs, db, wrap=runtime.as_leader, primary=primary, skip=runtime.replica_lags)
    add_claim_plan_job(jobs, runtime, target=target)
    add_maintenance_jobs(jobs, runtime, target=target)
    if ruleset is not None:
        after_pass = _after_pass_hooks(
            jobs, runtime, ruleset, outbox=outbox, tick=tick, target=target
        )
        add_evaluator_job(
            jobs, runtime, ruleset, clock=clock, target=target, outbox=outbox, after_pass=after_pass
        )
        if transports is not None:
            add_sender_job(
                jobs,
                runtime,
                ruleset,
                clock=clock,
                transports=transports,
                interval=sender_interval,
                target=target,
            )
    return runtime


def _after_pass_hooks(
    jobs: Any,
    runtime: JobRuntime,
    ruleset: RuleSet,
    *,
    outbox: Outbox | None,
    tick: float,
    target: str,
) -> Callable[[], None] | None:
    """What follows each completed evaluation (issue 31 item 7): with ``type: alertmanager``
    routes, their receiver (its job added; the Watchdog fires while passes complete) and,
    with ``OUTBOX_MONITOR_HEARTBEAT_URL``, a heartbeat ping. ``None`` when neither."""
    hooks: list[Callable[[], Any]] = []
    urls = alertmanager_urls(ruleset)
    if urls:
        receiver = AlertmanagerReceiver(
            runtime.primary,
            ruleset,
            urls,
            interval=ruleset.defaults.interval,
            scope=scope_labels(outbox, runtime.primary.alert_outbox),
            health=AlertmanagerHealth(
                runtime.primary,
                ruleset,
                interval=ruleset.defaults.interval,
                fence=runtime.leadership.fence,
            ),
        )
        runtime.status.alertmanager = receiver.status
        add_alertmanager_job(jobs, runtime, receiver, tick=tick, target=target)
        hooks.append(receiver.evaluated)
    if runtime.db.settings.heartbeat_url:
        heartbeat = Heartbeat(runtime.db.settings.heartbeat_url)
        runtime.status.heartbeat = heartbeat
        hooks.append(heartbeat.ping)
    if not hooks:
        return None

    def after_pass() -> None:
        for hook in hooks:
            hook()

    return after_pass
