"""The background process: an APScheduler with the jobs of ``jobs`` (sampler, alert
evaluator, notification sender, watchdog, optional reaper and pruner), the rules and Slack
routes they use (``load_alerting``), and ``/metrics`` and ``/healthz`` (``export.server``).
``build_scheduler`` assembles it (tests and the demo run it in a thread); ``run_scheduler`` is
the ``outbox-monitor scheduler`` command, ``background_scheduler`` the one of ``dashboard
--with-scheduler`` (a fleet's: ``fleet_scheduler``); ``scheduler_databases`` opens its Database of
figures (``OUTBOX_MONITOR_DSN``, possibly a hot standby) and of writes
(``OUTBOX_MONITOR_PRIMARY_DSN``); ``service.start_check`` refuses to start when the writes
would reach a standby or the table does not match, and starts anyway while the database
cannot be reached (retried, alerted, shown on ``/healthz``).
"""

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN
from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.base import BaseScheduler

from outbox_monitor.alerts.alertmanager import alertmanager_urls
from outbox_monitor.alerts.receivers import transport_for_route
from outbox_monitor.alerts.route_model import ALERTMANAGER
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules, resolve_rules_path
from outbox_monitor.alerts.slack import TransportConfigError, TransportNotConfigured
from outbox_monitor.alerts.slack_actions import after_acknowledge
from outbox_monitor.config.fleet import Fleet
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.config.values import interface_address
from outbox_monitor.errors import ConfigError
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.service.hang_watch import HangWatch, add_hang_watch_job
from outbox_monitor.service.outbox_schedule import add_outbox_jobs, new_scheduler
from outbox_monitor.service.slack_listener import slack_listener
from outbox_monitor.service.start_check import StartCheck
from outbox_monitor.store.db import Database

# the logger keeps its name from before the move into a package (log filters use it)
log = logging.getLogger("outbox_monitor.scheduler")


def build_scheduler(db: Database, *, blocking: bool, **options: Any) -> BaseScheduler:
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
    - ``claim_plan`` every ``settings.claim_plan_interval`` s, leader only: EXPLAIN the
      workers' claim and record its plan (``health.claim_plan``, issue 14 item 2);
    - with a ``ruleset``: ``evaluator`` every ``ruleset.defaults.interval`` s;
    - with a ``ruleset`` and ``transports``: ``sender`` every ``sender_interval`` s;
    - with ``settings.auto_reap`` / ``auto_prune_*``: ``reaper`` / ``pruner``
      (``add_maintenance_jobs``);
    - ``hang_watch`` every tick, on a thread of its own: a database that answers nothing
      for ``hang_watch.hang_after`` (or ``hang_seconds``) while a job waits on it fails
      the database health as unreachable (``hang_watch``).

    While the database is unreachable the jobs back off exponentially (up to the
    evaluation interval or 30 s) and the process that was leader posts the
    "cannot reach the database" alert (``alerts.outage``). The lease is released when
    the scheduler shuts down.

    The leader checks the replay lag of ``db`` before each evaluation and sample
    (``alerts.replica_lag``): while a hot standby lags more than
    ``settings.max_replica_lag`` both are skipped and one "rules not evaluated" message
    per route is queued, then its resolve.

    Args (``options``: ``service.outbox_schedule.add_outbox_jobs``'s keywords, but ``blocking``):
        db: the connector the figures are measured through (one pool for the process;
            ``OUTBOX_MONITOR_DSN``, which may be a hot standby).
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
        status: where the jobs report for ``/metrics`` and ``/healthz`` (``export.collector``);
            it is attached to this scheduler, its leadership and interval. Default: a
            new one nobody reads.
        primary: the connector of every write (the lease — ``Leadership`` connects with
            its ``settings.dsn`` —, samples, alert state, notifications, reap, prune):
            ``scheduler_databases``; default ``db``.
        outbox: the fleet's outbox these jobs watch (issue 16; its name and labels);
            ``None``: the single outbox of the settings.

    Returns:
        The scheduler, not started: call ``start()`` (and ``shutdown()`` when done).
    """
    scheduler = new_scheduler(blocking=blocking)
    watches: list[HangWatch] = []
    runtime = add_outbox_jobs(scheduler, db, hang_watches=watches, **options)
    add_hang_watch_job(scheduler, watches)
    scheduler.add_listener(lambda event: runtime.leadership.release(), EVENT_SCHEDULER_SHUTDOWN)
    return scheduler


STOP_RETRY_SECONDS = 0.1
"""While a scheduler asked to stop is still starting, its shutdown is tried again this often."""


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
    rules_path: str | Path | None, settings: Settings | None = None, fleet: Fleet | None = None
) -> tuple[RuleSet | None, Mapping[str, Any] | None]:
    """The rules and Slack transports of ``outbox-monitor scheduler`` (and of ``dashboard
    --with-scheduler`` and the demo), checked at start: a process never runs crippled.

    Args:
        rules_path: ``--rules``; ``None``: ``$OUTBOX_MONITOR_RULES``, ``./alerts.yml``,
            then the shipped alerts.yml (``rules_file.resolve_rules_path``).
        settings: the validated settings (``slack_timeout`` for every transport);
            default ``load_settings()``.
        fleet: the fleet from a file: a rule's ``outboxes:`` naming an outbox it lacks is
            refused (``load_rules(path, fleet)``); ``None``: not checked.

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
    ruleset = load_rules(path, fleet)
    timeout = (settings or load_settings()).slack_timeout
    transports: dict[str, Any] = {}
    invalid: list[TransportConfigError] = []
    alertmanager_urls(ruleset)  # a route's unset URL variable stops the start, named
    for name, route in ruleset.routes.items():
        if route.type == ALERTMANAGER:
            continue  # posted by alerts.alertmanager, never through Slack
        try:
            transports[name] = transport_for_route(name, route, os.environ, timeout=timeout)
        except TransportNotConfigured as error:  # str(error) holds the hint: said once
            log.error(
                "notifications of route %s are evaluated and queued but NOT sent by this "
                "process: %s. %s",
                name,
                error.args[0],
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
    db: Database,
    status: SchedulerStatus,
    ruleset: RuleSet | None,
    *,
    address: str,
    port: int,
    primary: Database | None = None,
) -> MetricsServer | None:
    """Start the scheduler's ``/metrics`` and ``/healthz`` (``export.server.MetricsServer``).

    Args:
        db, status, ruleset: what the server reports on.
        primary: where the scheduler writes (alert states, samples); default ``db``.
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
    return MetricsServer(
        db, status, primary=primary, ruleset=ruleset, address=address, port=port
    ).start()


def build_served_scheduler(
    db: Database,
    primary: Database,
    ruleset: RuleSet | None,
    transports: Mapping[str, Any] | None,
    *,
    blocking: bool,
    address: str,
    port: int,
    check: StartCheck,
) -> tuple[BaseScheduler, MetricsServer | None]:
    """``build_scheduler`` (not started) with a new ``SchedulerStatus``, and its ``/metrics``
    and ``/healthz`` started (``start_metrics_server``): what ``outbox-monitor scheduler``
    and ``dashboard --with-scheduler`` run, on the Databases of ``scheduler_databases``.

    ``check`` (``service.start_check``) runs first: a database unreachable at start is
    logged and shown on ``/healthz``, and the check retried by a job until it passes (a
    configuration error found then shuts the scheduler down: ``check.failure``).

    Raises:
        ConfigError: the address or port cannot be served (nothing was started); the
            writes would reach a hot standby (``check``).
        TableMissing, ColumnsMissing, SchemaNotInitialised, PermissionDenied: from
            ``check`` when the database answers.
    """
    status = SchedulerStatus()
    check.at_start(status)
    scheduler = build_scheduler(
        db,
        blocking=blocking,
        ruleset=ruleset,
        transports=transports,
        status=status,
        primary=primary,
        start_check=check,
    )
    server = start_metrics_server(db, status, ruleset, address=address, port=port, primary=primary)
    return scheduler, server


@contextmanager
def scheduler_databases(
    settings: Settings, *, fallback_dsn: str | None = None
) -> Iterator[tuple[Database, Database]]:
    """The scheduler's two Databases, unchecked: ``(figures, writes)``, closed at the end.

    Figures through ``settings.dsn`` (``OUTBOX_MONITOR_DSN``; a hot standby is fine);
    writes through ``settings.primary_dsn``, else ``fallback_dsn`` (``dashboard
    --with-scheduler`` passes the actions DSN, whose login it always wrote with), else
    the same Database (one pool). Nothing is checked here (``service.start_check`` does,
    where an unreachable database is retried rather than fatal); opening connects to nothing.
    """
    writes = settings.primary_dsn or fallback_dsn
    with ExitStack() as stack:
        db = stack.enter_context(Database(settings))
        primary = db
        if writes is not None and writes != settings.dsn:
            target = settings.model_copy(update={"primary_dsn": writes})
            primary = stack.enter_context(Database(target, purpose="primary"))
        yield db, primary


@contextmanager
def background_scheduler(
    settings: Settings, fleet: Fleet | None = None
) -> Iterator[tuple[BaseScheduler, MetricsServer | None]]:
    """What ``dashboard --with-scheduler`` runs beside the server: a ``BackgroundScheduler``
    (not started; the caller starts it and shuts it down) and its ``/metrics`` and
    ``/healthz`` on ``settings.metrics_address``/``metrics_port`` (started; the caller stops
    it), the rules of ``load_alerting``; its Databases close when the block ends.

    A ``fleet`` of several outboxes (a fleet file, no ``--outbox``): the fleet scheduler of
    ``outbox-monitor scheduler`` (``fleet_scheduler.served_fleet_scheduler``: every outbox, a
    replica of the registry; one unreachable at start is logged and retried), each outbox
    writing through its ``primary_dsn_env``, else its ``actions_dsn_env``
    (``fleet_scheduler.writing_with_actions``); the rules checked against the file's
    outboxes. Otherwise the single outbox of ``settings``, writing through
    ``OUTBOX_MONITOR_PRIMARY_DSN``, else ``OUTBOX_MONITOR_ACTIONS_DSN`` (``scheduler_databases``).

    Raises:
        As ``load_alerting`` (a rule's ``outboxes`` naming an outbox the file lacks:
        ``RulesError``), ``scheduler_databases`` or ``served_fleet_scheduler``, and
        ``start_metrics_server``.
    """
    address, port = settings.metrics_address, settings.metrics_port
    if fleet is not None and len(fleet.outboxes) > 1:
        from outbox_monitor.service.fleet_scheduler import (
            served_fleet_scheduler,
            writing_with_actions,
        )

        refuse_slack_actions_of_fleet(settings)

        ruleset, transports = load_alerting(None, settings, fleet)
        with served_fleet_scheduler(
            writing_with_actions(fleet),
            ruleset,
            transports,
            blocking=False,
            address=address,
            port=port,
        ) as built:
            yield built
        return
    ruleset, transports = load_alerting(None, settings)
    with (
        scheduler_databases(settings, fallback_dsn=settings.actions_dsn) as (db, primary),
        slack_listener(
            settings, os.environ, on_acknowledged=after_acknowledge(ruleset, transports)
        ),
    ):
        yield build_served_scheduler(
            db,
            primary,
            ruleset,
            transports,
            blocking=False,
            address=address,
            port=port,
            check=StartCheck(db, primary),
        )


def refuse_slack_actions_of_fleet(settings: Settings) -> None:
    """Refuse the Slack listener (``OUTBOX_MONITOR_SLACK_ACTIONS_PORT``) with a fleet file:
    its presses act on one outbox's alerts with one actions login, the single outbox's.

    Raises:
        ConfigError: the port is set, naming it.
    """
    if settings.slack_actions_port:
        raise ConfigError(
            "OUTBOX_MONITOR_SLACK_ACTIONS_PORT: the Slack buttons act on the single outbox of "
            "the OUTBOX_MONITOR_* settings; a fleet file's scheduler does not listen for them",
            hint="Unset OUTBOX_MONITOR_SLACK_ACTIONS_PORT for the scheduler of a fleet file "
            "(OUTBOX_MONITOR_OUTBOXES).",
        )


def run_scheduler(
    settings: Settings,
    rules_path: str | Path | None = None,
    *,
    metrics_port: int | None = None,
    metrics_address: str | None = None,
    fleet: Fleet | None = None,
) -> None:
    """``outbox-monitor scheduler``: run every background job until SIGINT or SIGTERM.

    Loads the rules and checks the outbox table first (``service.start_check``), starts
    ``/metrics`` and ``/healthz`` (``export.server.MetricsServer``) unless the port is 0 (an
    address or port that cannot be served stops the start), then blocks; a database outage
    — at start too (issue 29 item 13: shown on ``/healthz``, alerted after its threshold,
    retried, resolved) — is never fatal. With ``OUTBOX_MONITOR_SLACK_ACTIONS_PORT`` set, the
    listener of Slack's button presses runs beside it (``service.slack_listener``; its
    configuration checked at start). With a ``fleet`` from a file, one scheduler
    watches all its outboxes and shares them with the other replicas
    (``fleet_scheduler.run_fleet_scheduler``; an outbox unreachable at start is retried).

    Args:
        settings: connection, table, the sample interval/retention, the metrics server,
            the optional reaper/pruner.
        rules_path: the alerts.yml (``--rules``); default as ``load_alerting``.
        metrics_port: ``--metrics-port`` (default ``settings.metrics_port``, 9108;
            0: no server).
        metrics_address: ``--metrics-address`` (default ``settings.metrics_address``).
        fleet: the fleet (``fleet.load_fleet``); ``None`` or one without a file: the single
            outbox of ``settings``.

    Raises:
        TableMissing, ColumnsMissing, SchemaNotInitialised: from the start-up check, with
            the fix in the message — at start, or once the database answers when it was
            unreachable at start (the scheduler stopped then).
        ConfigError: ``OUTBOX_MONITOR_DSN`` is a hot standby and no
            ``OUTBOX_MONITOR_PRIMARY_DSN`` is set, or that DSN is a standby too
            (``service.start_check``): the scheduler never tries to write to one; the
            replicas' registry is unusable (``OUTBOX_MONITOR_REGISTRY_DSN``).
        RulesError: the rules file is invalid.
        TransportConfigError: a Slack variable is set but invalid.
        ConfigError: ``--metrics-address`` is not an address, or the address or port
            cannot be served; the Slack listener's configuration is incomplete
            (``SLACK_SIGNING_SECRET``, ``OUTBOX_MONITOR_ACTIONS_DSN``, a person without the
            operator role) or asked of a fleet file's scheduler.
    """
    ruleset, transports = load_alerting(
        rules_path, settings, fleet if fleet is not None and fleet.path is not None else None
    )
    port = settings.metrics_port if metrics_port is None else metrics_port
    try:
        address = interface_address(metrics_address or settings.metrics_address)
    except ValueError as error:
        raise ConfigError(f"--metrics-address: {error}") from None
    if fleet is not None and fleet.path is not None:
        from outbox_monitor.service.fleet_scheduler import run_fleet_scheduler

        refuse_slack_actions_of_fleet(settings)

        run_fleet_scheduler(
            fleet, ruleset, transports, address=address, port=port, serve=serve_until_stopped
        )
        return
    with (
        scheduler_databases(settings) as (db, primary),
        slack_listener(
            settings, os.environ, on_acknowledged=after_acknowledge(ruleset, transports)
        ),
    ):
        check = StartCheck(db, primary)
        scheduler, server = build_served_scheduler(
            db,
            primary,
            ruleset,
            transports,
            blocking=True,
            address=address,
            port=port,
            check=check,
        )
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
        serve_until_stopped(scheduler, server)
    check.raise_failure()


def serve_until_stopped(scheduler: BaseScheduler, server: MetricsServer | None) -> None:
    """Run a blocking ``scheduler`` until SIGINT or SIGTERM, then shut it down (its leases
    released, its running jobs finished) and stop ``server``.

    A signal only sets an event; a thread of its own shuts the scheduler down (retrying while
    it is still starting). Raising ``KeyboardInterrupt`` in the main thread, as before, could
    be swallowed: a signal that came while APScheduler called a listener (it catches
    ``BaseException`` there) was lost, and a scheduler SIGTERMed under load right after its
    start kept running (seen in CI, reproduced with 4 busy loops: 2 of 4 starts).
    """
    requested = threading.Event()

    def stop_when_asked() -> None:
        requested.wait()
        log.info("scheduler stopping")
        while True:
            try:
                scheduler.shutdown(wait=True)
                return
            except SchedulerNotRunningError:
                if stopped.is_set():
                    return  # it ended by itself (a start-up check failed)
                time.sleep(STOP_RETRY_SECONDS)  # still starting: not running yet

    stopped = threading.Event()
    previous = {
        number: signal.signal(number, lambda *_: requested.set())
        for number in (signal.SIGINT, signal.SIGTERM)
    }
    threading.Thread(target=stop_when_asked, name="stop-on-signal", daemon=True).start()
    try:
        scheduler.start()  # returns once shut down
    finally:
        stopped.set()
        for number, handler in previous.items():
            signal.signal(number, handler)
        if scheduler.running:
            scheduler.shutdown(wait=True)
        if server is not None:
            server.stop()
