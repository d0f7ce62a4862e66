"""The background process: APScheduler jobs — sampler, alert evaluator, notification sender,
and the optional reaper and pruner — plus ``/metrics`` and ``/healthz`` (``exporter``).

Every job is wrapped by ``guarded``: an error is logged with the job's name and target and
the job runs again at its next interval — a background loop never dies on one error. Every
job runs only in the process holding the evaluator lease (``alerts.leader``), so any number
of scheduler processes evaluate, send, reap and prune exactly once (issue 3 §2, §4; issue 5),
except the ``watchdog``, which runs in every process: it renews or takes over the lease
and watches for a stalled evaluation (``alerts.stall``; issue 10 §2).
"""

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.schedulers.blocking import BlockingScheduler

from outbox_monitor import actions
from outbox_monitor.access import SCHEDULER, Identity
from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.leader import Leadership, LeadershipLost, lease_ttl
from outbox_monitor.alerts.outage import BACKOFF_CAP_SECONDS, DatabaseHealth
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules, resolve_rules_path
from outbox_monitor.alerts.sender import SEND_INTERVAL_SECONDS, deliver_due
from outbox_monitor.alerts.slack import (
    TransportConfigError,
    TransportNotConfigured,
    transport_for_route,
)
from outbox_monitor.alerts.stall import StallWatch
from outbox_monitor.config import Settings, interface_address, load_settings
from outbox_monitor.db import Database
from outbox_monitor.db_errors import describe_target
from outbox_monitor.errors import ConfigError, DatabaseUnavailable, OutboxMonitorError
from outbox_monitor.exporter import SchedulerStatus
from outbox_monitor.metrics_server import MetricsServer
from outbox_monitor.sampler import record_sample
from outbox_monitor.schema import check_outbox_table

log = logging.getLogger(__name__)

SAMPLER_JOB_ID = "sampler"
EVALUATOR_JOB_ID = "evaluator"
SENDER_JOB_ID = "sender"
REAPER_JOB_ID = "reaper"
PRUNER_JOB_ID = "pruner"
WATCHDOG_JOB_ID = "watchdog"
SENDER_INTERVAL_SECONDS = SEND_INTERVAL_SECONDS
"""Seconds between sender passes (due notifications wait at most this long; a message that
failed transiently is tried again at the next pass)."""
PRUNE_INTERVAL_SECONDS = 86400.0
"""The automatic prune runs once a day (first run at start)."""
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
) -> None:
    """Add the sampler (``sampler.record_sample``) every ``settings.sample_interval`` s.

    One instance at a time, missed runs coalesced, first run immediately. ``wrap``
    (``build_scheduler`` passes its leader-only wrapper) goes inside ``guarded``.
    """
    target = f"{db.table_name} at {describe_target(db.settings.dsn)}"

    def sample() -> None:
        record_sample(db)

    add_interval_job(
        scheduler,
        SAMPLER_JOB_ID,
        guarded(SAMPLER_JOB_ID, wrap(sample) if wrap else sample, target=target),
        seconds=db.settings.sample_interval,
        name="record headline sample",
    )


class _Runtime:
    """What the jobs of one scheduler share: the evaluator lease, the database health and
    the status the exporter reads (``SchedulerStatus``)."""

    def __init__(
        self,
        db: Database,
        leadership: Leadership,
        health: DatabaseHealth,
        status: SchedulerStatus,
    ) -> None:
        self.db = db
        self.leadership = leadership
        self.health = health
        self.status = status

    def as_leader(self, job: Callable[[], Any]) -> Callable[[], None]:
        """Run ``job`` only while this process is the leader (renewing or taking the lease
        first), backing off while the database is unreachable (``DatabaseHealth``);
        failures still reach ``guarded``. A lease taken over mid-job (``LeadershipLost``
        from a fence) ends the job quietly: ``Leadership`` has logged it."""
        return self._reporting(job, leader_only=True)

    def in_every_process(self, job: Callable[[], Any]) -> Callable[[], None]:
        """Like ``as_leader``, but ``job`` runs whether or not this process leads."""
        return self._reporting(job, leader_only=False)

    def _reporting(self, job: Callable[[], Any], *, leader_only: bool) -> Callable[[], None]:
        def run() -> None:
            self.health.tick()
            if not self.health.due():
                return
            was_leader = self.leadership.held
            try:
                if not leader_only or self.leadership.try_acquire():
                    job()
            except LeadershipLost as error:
                log.info("%s", error)
            except DatabaseUnavailable as error:
                self.status.database_failed(error)
                self.health.failed(error, was_leader=was_leader or self.leadership.held)
                raise
            except Exception as error:
                self.status.database_failed(error)
                raise
            self.status.database_ok()
            self.health.succeeded()

        return run


def add_evaluator_job(
    scheduler: BaseScheduler, runtime: _Runtime, ruleset: RuleSet, *, clock: Clock, target: str
) -> None:
    """Add the rule evaluator (``Evaluator.run_once``) every ``ruleset.defaults.interval`` s,
    on the leader only, fenced by its lease term; the first pass runs at once. A completed
    pass is stamped in the lease (``Leadership.record_evaluation``) for the stall watch."""
    evaluator = Evaluator(runtime.db, ruleset, clock=clock, fence=runtime.leadership.fence)

    def evaluate() -> None:
        report = evaluator.run_once()
        runtime.leadership.record_evaluation()
        runtime.status.evaluated(report.duration_seconds)
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
        guarded(EVALUATOR_JOB_ID, runtime.as_leader(evaluate), target=target),
        seconds=interval,
        name="evaluate alert rules",
    )


def add_sender_job(
    scheduler: BaseScheduler,
    runtime: _Runtime,
    ruleset: RuleSet,
    *,
    clock: Clock,
    transports: Mapping[str, Any],
    interval: float,
    target: str,
) -> None:
    """Add the notification sender (``sender.deliver_due``) every ``interval`` s, on the
    leader only, fenced by its lease term. It also drives the database-unreachable alert
    (``DatabaseHealth.tick``)."""

    def send() -> None:
        counts = deliver_due(
            runtime.db,
            ruleset,
            clock=clock,
            transports=transports,
            fence=runtime.leadership.fence,
            retry_interval=interval,
        )
        runtime.status.delivered(counts)
        if counts.get("messages") or counts.get("failed"):
            log.info("sender: %s", ", ".join(f"{k} {v}" for k, v in counts.items() if v))

    add_interval_job(
        scheduler,
        SENDER_JOB_ID,
        guarded(SENDER_JOB_ID, runtime.as_leader(send), target=target),
        seconds=interval,
        name="send due notifications",
    )


def add_watchdog_job(
    scheduler: BaseScheduler,
    runtime: _Runtime,
    watch: StallWatch | None,
    *,
    tick: float,
    target: str,
) -> None:
    """Add the watchdog every ``tick`` s in every process: renew the lease (leader) or take
    it over when expired or its holder is gone (followers), then ``watch.check()`` (the
    stalled-alerting alert; ``None``: no rules, nothing to watch)."""

    def watchdog() -> None:
        try:
            runtime.leadership.try_acquire()
        except DatabaseUnavailable:
            if watch is not None:
                watch.lost_database()
            raise
        if watch is not None:
            watch.check()

    add_interval_job(
        scheduler,
        WATCHDOG_JOB_ID,
        guarded(WATCHDOG_JOB_ID, runtime.in_every_process(watchdog), target=target),
        seconds=tick,
        name="renew the evaluator lease and watch for a stalled evaluation",
    )


def reap_stuck_locks(db: Database, *, actor: Identity = SCHEDULER) -> actions.ActionResult | None:
    """The reaper job: reap every stuck lock now (SPEC §4 reap), audited as ``actor``.

    Preview then apply, as an operator would (``actions.preview_reap`` + ``actions.apply``),
    with the settings' lock timeout; nothing is applied (and no audit row written) when
    no lock is stuck.

    Returns:
        The ``ActionResult``, or ``None`` when nothing was stuck.

    Raises:
        DatabaseUnavailable and the connector's errors (``guarded`` logs them).
    """
    preview = actions.preview_reap(db)
    if not preview.matched:
        return None
    result = actions.apply(db, preview, actor=actor)
    log.warning(
        "reaper: reaped %d stuck lock(s) of %s (%d dead-lettered at max attempts), run %s",
        result.changed,
        db.table_name,
        result.dead_lettered,
        result.run_id,
    )
    return result


def prune_retention(db: Database, *, actor: Identity = SCHEDULER) -> actions.ActionResult | None:
    """The pruner job: delete ``done`` rows older than ``auto_prune_done`` and ``failed``
    rows older than ``auto_prune_failed`` (SPEC §4 prune, in batches), audited as ``actor``.

    Returns:
        The ``ActionResult``, or ``None`` when neither age is set or nothing is old enough
        (no audit row then).

    Raises:
        DatabaseUnavailable and the connector's errors (``guarded`` logs them).
    """
    settings = db.settings
    if settings.auto_prune_done is None and settings.auto_prune_failed is None:
        return None
    preview = actions.preview_prune(
        db,
        done_older_than=settings.auto_prune_done,
        failed_older_than=settings.auto_prune_failed,
    )
    if not preview.matched:
        return None
    result = actions.apply(db, preview, actor=actor)
    log.info(
        "pruner: deleted %d row(s) of %s in %d batch(es), run %s",
        result.changed,
        db.table_name,
        result.batches,
        result.run_id,
    )
    return result


def add_maintenance_jobs(scheduler: BaseScheduler, runtime: _Runtime, *, target: str) -> None:
    """Add the optional reaper and pruner (off unless configured), leader only.

    - ``reaper`` with ``OUTBOX_MONITOR_AUTO_REAP=true``: ``reap_stuck_locks`` every
      ``lock_timeout / 3`` (at least 1 s), so a lock is reaped at most a third of the
      lock timeout after it expired;
    - ``pruner`` with ``OUTBOX_MONITOR_AUTO_PRUNE_DONE`` and/or ``…_FAILED``:
      ``prune_retention`` daily.

    Both start with a run at once, and write audit rows with actor ``scheduler``.
    """
    settings = runtime.db.settings
    if settings.auto_reap:
        add_interval_job(
            scheduler,
            REAPER_JOB_ID,
            guarded(
                REAPER_JOB_ID,
                runtime.as_leader(lambda: reap_stuck_locks(runtime.db)),
                target=target,
            ),
            seconds=max(MIN_REAP_INTERVAL_SECONDS, settings.lock_timeout / 3),
            name="reap stuck locks",
        )
    if settings.auto_prune_done is not None or settings.auto_prune_failed is not None:
        add_interval_job(
            scheduler,
            PRUNER_JOB_ID,
            guarded(
                PRUNER_JOB_ID,
                runtime.as_leader(lambda: prune_retention(runtime.db)),
                target=target,
            ),
            seconds=PRUNE_INTERVAL_SECONDS,
            name="prune old done and failed rows",
        )


def build_scheduler(
    db: Database,
    *,
    blocking: bool,
    ruleset: RuleSet | None = None,
    clock: Clock = system_clock,
    transports: Mapping[str, Any] | None = None,
    leadership: Leadership | None = None,
    sender_interval: float = SENDER_INTERVAL_SECONDS,
    outage_alert_after: float | None = None,
    status: SchedulerStatus | None = None,
) -> BaseScheduler:
    """Assemble the scheduler with every background job of the product.

    Jobs, each through ``guarded``, ``max_instances=1``, ``coalesce=True``, and each but
    the watchdog only in the process that holds the evaluator lease (``alerts.leader``):

    - ``watchdog`` every tick (the shorter of the interval and ``sender_interval``), in
      every process: the leader renews its lease; a follower takes it over when its holder
      is gone (at once) or it expired (TTL ``lease_ttl(interval)``: twice the interval,
      5 to 15 s); with a ``ruleset``, the stall watch (``alerts.stall``: after 3 intervals
      without a completed evaluation, one "alerting is stalled" message per episode, sent
      directly, then its resolve);

    - ``sampler`` every ``settings.sample_interval`` s. Leader only: samples describe one
      table, and N replicas sampling it would write N interleaved series (N× the load,
      a chart whose density depends on the replica count);
    - with a ``ruleset``: ``evaluator`` every ``ruleset.defaults.interval`` s;
    - with a ``ruleset`` and ``transports``: ``sender`` every ``sender_interval`` s;
    - with ``settings.auto_reap`` / ``auto_prune_*``: ``reaper`` / ``pruner``
      (``add_maintenance_jobs``).

    While the database is unreachable the jobs back off exponentially (up to the
    evaluation interval or 30 s) and the process that was leader posts the
    "cannot reach the database" alert (``alerts.outage``). The lease is released when
    the scheduler shuts down.

    Args:
        db: the connector the jobs use (one pool for the process).
        blocking: ``True`` for a ``BlockingScheduler`` (``outbox-monitor scheduler``),
            ``False`` for a ``BackgroundScheduler`` running in threads beside other work
            (dashboard ``--with-scheduler``, demo, tests).
        ruleset: the loaded alerts.yml; ``None``: no alerting (sampler only).
        clock: the evaluator's and sender's clock (tests pass a fake one).
        transports: ``{route: transport}`` (``slack.transports_for``); ``None``: rules are
            evaluated and notifications queued, but this process sends nothing.
        leadership: the lease object (tests pass their own to watch it); default a new
            ``Leadership(db.settings, ttl=lease_ttl(interval))``.
        sender_interval: seconds between sender passes.
        outage_alert_after: seconds of outage before the database-unreachable alert;
            default one evaluation interval.
        status: where the jobs report for ``/metrics`` and ``/healthz`` (``exporter``);
            it is attached to this scheduler, its leadership and interval. Default: a
            new one nobody reads.

    Returns:
        The scheduler, not started: call ``start()`` (and ``shutdown()`` when done).
    """
    # APScheduler logs every run at INFO ("Running job …"); keep errors and skips only,
    # unless the application configured that logger itself.
    executor_log = logging.getLogger("apscheduler.executors.default")
    if executor_log.level == logging.NOTSET:
        executor_log.setLevel(logging.WARNING)
    scheduler_class = BlockingScheduler if blocking else BackgroundScheduler
    scheduler = scheduler_class(timezone=UTC)
    interval = ruleset.defaults.interval if ruleset else db.settings.sample_interval
    leadership = leadership or Leadership(db.settings, ttl=lease_ttl(interval))
    health = DatabaseHealth(
        db,
        identity=leadership.identity,
        ruleset=ruleset,
        transports=transports,
        clock=clock,
        alert_after=interval if outage_alert_after is None else outage_alert_after,
        backoff_cap=min(BACKOFF_CAP_SECONDS, interval),
    )
    status = status or SchedulerStatus()
    status.attach(scheduler, leadership, interval)
    runtime = _Runtime(db, leadership, health, status)
    target = f"{db.table_name} at {describe_target(db.settings.dsn)}"
    watch = (
        StallWatch(
            db,
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
    add_watchdog_job(scheduler, runtime, watch, tick=min(interval, sender_interval), target=target)
    add_sampler_job(scheduler, db, wrap=runtime.as_leader)
    add_maintenance_jobs(scheduler, runtime, target=target)
    if ruleset is not None:
        add_evaluator_job(scheduler, runtime, ruleset, clock=clock, target=target)
        if transports is not None:
            add_sender_job(
                scheduler,
                runtime,
                ruleset,
                clock=clock,
                transports=transports,
                interval=sender_interval,
                target=target,
            )
    scheduler.add_listener(lambda event: leadership.release(), EVENT_SCHEDULER_SHUTDOWN)
    return scheduler


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Inside the block, SIGTERM raises ``KeyboardInterrupt`` like Ctrl-C does.

    Only in the main thread (elsewhere signals cannot be handled); the previous handler
    is restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def load_alerting(
    rules_path: str | Path | None, settings: Settings | None = None
) -> tuple[RuleSet | None, Mapping[str, Any] | None]:
    """The rules and Slack transports of ``outbox-monitor scheduler`` (and of ``dashboard
    --with-scheduler`` and the demo), checked at start: a process never runs crippled.

    Args:
        rules_path: ``--rules``; ``None``: ``$OUTBOX_MONITOR_RULES``, ``./alerts.yml``,
            then the shipped alerts.yml (``rules_file.resolve_rules_path``).
        settings: the validated settings (``slack_timeout`` for every transport);
            default ``load_settings()``.

    Returns:
        ``(ruleset, transports)``. ``(None, None)`` when no file was named (neither
        ``--rules`` nor ``OUTBOX_MONITOR_RULES``) and none exists (sampling only, logged).
        ``transports`` holds every route whose Slack variable is set; a route whose
        variable is not set is logged as an error naming it, and its notifications are
        queued and wait (a process with the variable sends them when it leads).

    Raises:
        ConfigError: ``OUTBOX_MONITOR_RULES`` names no file.
        RulesError: the rules file named (or found) is missing or invalid.
        TransportConfigError: a Slack variable is set but invalid (not an http(s) URL),
            naming it, every one.
        ConfigError: ``settings`` not given and an ``OUTBOX_MONITOR_*`` variable is invalid.
    """
    path = resolve_rules_path(rules_path)
    if rules_path is None and not path.is_file():
        if os.environ.get(RULES_ENV):
            raise ConfigError(
                f"{RULES_ENV}: no rules file at {path}",
                hint=f"Point {RULES_ENV} at your alerts.yml, or unset it to use ./alerts.yml.",
            )
        log.warning("no rules file (%s): alerting is off, sampling only", path)
        return None, None
    ruleset = load_rules(path)
    timeout = (settings or load_settings()).slack_timeout
    transports: dict[str, Any] = {}
    invalid: list[TransportConfigError] = []
    for name, route in ruleset.routes.items():
        try:
            transports[name] = transport_for_route(name, route, os.environ, timeout=timeout)
        except TransportNotConfigured as error:
            log.error(
                "notifications of route %s are evaluated and queued but NOT sent by this "
                "process: %s %s",
                name,
                error,
                error.hint,
            )
        except TransportConfigError as error:
            invalid.append(error)
    if invalid:
        raise TransportConfigError(
            "\n".join(str(error.args[0]) for error in invalid),
            hint=" ".join(dict.fromkeys(e.hint for e in invalid if e.hint)),
        )
    return ruleset, transports


def start_metrics_server(
    db: Database, status: SchedulerStatus, ruleset: RuleSet | None, *, address: str, port: int
) -> MetricsServer | None:
    """Start the scheduler's ``/metrics`` and ``/healthz`` (``metrics_server.MetricsServer``).

    Args:
        db, status, ruleset: what the server reports on.
        address, port: where it listens; port 0 starts nothing.

    Returns:
        The running server (``stop()`` it at the end), or ``None`` when the port is 0.

    Raises:
        ConfigError: the address or port cannot be served, naming the setting: the
            process stops at start (issue 10 item 1: fail fast, never run without
            ``/healthz``, which an orchestrator would read as a dead process, or without
            ``/metrics``).
    """
    if not port:
        return None
    return MetricsServer(db, status, ruleset=ruleset, address=address, port=port).start()


def run_scheduler(
    settings: Settings,
    rules_path: str | Path | None = None,
    *,
    metrics_port: int | None = None,
    metrics_address: str | None = None,
) -> None:
    """``outbox-monitor scheduler``: run every background job until SIGINT or SIGTERM.

    Checks the outbox table and loads the rules first, starts ``/metrics`` and ``/healthz``
    (``metrics_server.MetricsServer``) unless the port is 0 (an address or port that cannot be
    served stops the start), then blocks; a database outage later is retried with backoff
    (and alerted by the leader), never fatal.

    Args:
        settings: connection, table, the sample interval/retention, the metrics server,
            the optional reaper/pruner.
        rules_path: the alerts.yml (``--rules``); default as ``load_alerting``.
        metrics_port: ``--metrics-port`` (default ``settings.metrics_port``, 9108;
            0: no server).
        metrics_address: ``--metrics-address`` (default ``settings.metrics_address``).

    Raises:
        DatabaseUnavailable, TableMissing, ColumnsMissing, SchemaNotInitialised: from
            the start-up check, with the fix in the message.
        RulesError: the rules file is invalid.
        TransportConfigError: a Slack variable is set but invalid.
        ConfigError: ``--metrics-address`` is not an address, or the address or port
            cannot be served.
    """
    ruleset, transports = load_alerting(rules_path, settings)
    port = settings.metrics_port if metrics_port is None else metrics_port
    try:
        address = interface_address(metrics_address or settings.metrics_address)
    except ValueError as error:
        raise ConfigError(f"--metrics-address: {error}") from None
    with Database(settings) as db:
        check_outbox_table(db)
        status = SchedulerStatus()
        scheduler = build_scheduler(
            db, blocking=True, ruleset=ruleset, transports=transports, status=status
        )
        server = start_metrics_server(db, status, ruleset, address=address, port=port)
        log.info(
            "scheduler started: sampling %s every %g s (retention %g s)%s; Ctrl-C to stop",
            db.table_name,
            settings.sample_interval,
            settings.sample_retention,
            f"; evaluating {len(ruleset.rules)} rule(s) of {ruleset.path} every "
            f"{ruleset.defaults.interval:g} s"
            if ruleset
            else "",
        )
        with interrupt_on_sigterm():
            try:
                scheduler.start()
            except KeyboardInterrupt:
                log.info("scheduler stopping")
            finally:
                if scheduler.running:
                    scheduler.shutdown(wait=True)
                if server is not None:
                    server.stop()
