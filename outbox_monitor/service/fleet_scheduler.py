"""One scheduler process for a fleet of outboxes (issue 16 item 5): ONE APScheduler and one
thread pool hold the jobs of every outbox (``service.outbox_schedule.add_outbox_jobs``, ids
``<job>@<outbox>``), each outbox with its own Databases (figures and writes, as
``scheduler.scheduler_databases``), its own lease in its own database and its own status;
replicas share the outboxes through the registry (``service.replica_registry``).

Start-up: a configuration error stops the process (exit 2 for settings, the fleet file, the
rules, Slack variables, an outbox whose writes would reach a standby, a registry without its
table; the outbox named); so does an outbox table that is missing or does not match (exit 1,
the outbox named). An outbox whose database cannot be reached is logged, shown on
``/healthz`` and in ``outbox_monitor_up{outbox}``, and its jobs retry with backoff: the others
run. ``served_fleet_scheduler`` assembles it, once for both users: ``run_fleet_scheduler``
(``outbox-monitor scheduler`` with ``OUTBOX_MONITOR_OUTBOXES``, blocking) and
``dashboard --with-scheduler`` with a file of several outboxes (in the background).
"""

import logging
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.base import BaseScheduler

from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.leader import Leadership, lease_ttl
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.config.fleet import Fleet, Outbox
from outbox_monitor.errors import DatabaseUnavailable
from outbox_monitor.export.fleet import FleetCollector, FleetStatus
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.logs import for_outbox
from outbox_monitor.service.hang_watch import HangWatch, add_hang_watch_job
from outbox_monitor.service.jobs import (
    SENDER_INTERVAL_SECONDS,
    JobRuntime,
    add_interval_job,
    guarded,
)
from outbox_monitor.service.outbox_schedule import add_outbox_jobs, new_scheduler
from outbox_monitor.service.replica_registry import (
    LeaseShare,
    ReplicaRegistry,
    fleet_key,
    registry_target,
)
from outbox_monitor.service.start_check import StartCheck
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import describe_target

log = logging.getLogger("outbox_monitor.scheduler")

REPLICAS_JOB_ID = "replicas"
POOL_MAX_SIZE = 2
"""Connections of each outbox's pool (``db.POOL_MAX_SIZE``, 4, for a single outbox): 50
outboxes hold at most 100 pooled connections (1 each when idle) plus a lease connection each
(measured at 4: 50 outboxes took every one of a server's 200 connections). No job of an outbox
holds two of its pool's connections at once (the fleet tests pass with 1). Each pool has one
background thread (psycopg_pool's default 3 made 221 threads for 50 outboxes)."""
OUTBOX_WORKERS = 2
"""Threads of each outbox's own pool (the APScheduler executor ``outbox:<name>``), started as
its jobs need them, as many as its connection pool holds: a database that hangs (no answer,
no statement timeout firing) holds its own outbox's threads only. With one pool shared by
all, 3 frozen databases of 4 held every thread and the healthy outbox's evaluation stopped."""
REPLICAS_WORKERS = 1
"""Threads of the default pool: the ``replicas`` job only (the ``hang_watch`` job has a
thread of its own, ``hang_watch.HANG_WATCH_EXECUTOR``: a registry that hangs holds only
this one)."""


class OutboxJobs:
    """A scheduler as one outbox's jobs see it: ``add_job`` suffixes the job's id with
    ``@<outbox>`` (``remove_job`` takes the id without it) and its name with the outbox,
    runs the job in the outbox's own thread pool (``OUTBOX_WORKERS``) and inside
    ``logs.for_outbox`` (its log lines name the outbox), and delays an interval job's first
    run by ``phase`` (0 ≤ phase < 1) of its interval, so the outboxes' passes spread over
    the interval instead of all starting at once; everything else is the scheduler's."""

    def __init__(self, scheduler: BaseScheduler, outbox: str, phase: float = 0.0) -> None:
        self.scheduler, self.outbox, self.phase = scheduler, outbox, phase
        self.executor = f"outbox:{outbox}"
        scheduler.add_executor(ThreadPoolExecutor(OUTBOX_WORKERS), alias=self.executor)

    def add_job(self, func: Any, trigger: Any = None, *, id: str, name: str, **kwargs: Any) -> Any:
        def run(*args: Any, **options: Any) -> Any:
            with for_outbox(self.outbox):
                return func(*args, **options)

        run.__name__ = getattr(func, "__name__", "job")
        first, seconds = kwargs.get("next_run_time"), kwargs.get("seconds")
        if first is not None and seconds:
            kwargs["next_run_time"] = first + timedelta(seconds=seconds * self.phase)
        return self.scheduler.add_job(
            run,
            trigger,
            id=f"{id}@{self.outbox}",
            name=f"{name} ({self.outbox})",
            executor=self.executor,
            **kwargs,
        )

    def remove_job(self, id: str) -> None:
        """Remove this outbox's job ``id`` (the one ``add_job`` added as ``<id>@<outbox>``)."""
        self.scheduler.remove_job(f"{id}@{self.outbox}")

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.scheduler, attribute)


@dataclass
class FleetMember:
    """One outbox of the process: its Databases (``db`` of figures, ``primary`` of writes),
    its status (``/metrics``, ``/healthz``), its start-up check (``open_members``': passed,
    or retried by its ``start_check`` job once its database answers; ``None``: none, as the
    demo's members that only feed ``/metrics``) and, once scheduled, its jobs' runtime."""

    outbox: Outbox
    db: Database
    primary: Database
    status: SchedulerStatus
    check: StartCheck | None = None
    runtime: JobRuntime | None = None


def open_members(fleet: Fleet, stack: ExitStack) -> list[FleetMember]:
    """Each outbox's Databases, entered on ``stack``, checked when reachable (its writes
    not to a standby, its table per SPEC §1, the schema's version).

    Raises:
        ConfigError, TableMissing, ColumnsMissing, SchemaNotInitialised, PermissionDenied:
            the message starts with ``outbox "<name>":``. An unreachable database is logged
            and recorded in the outbox's status instead, and its check retried by the
            outbox's ``start_check`` job: a misconfiguration found then shuts the scheduler
            down and is raised as the ``served_fleet_scheduler`` block ends.
    """
    members = []
    for outbox in fleet.outboxes:
        settings = outbox.settings
        pool = {"max_size": POOL_MAX_SIZE, "pool_workers": 1}
        db = stack.enter_context(Database(settings, **pool))
        primary = db
        if settings.primary_dsn and settings.primary_dsn != settings.dsn:
            primary = stack.enter_context(Database(settings, purpose="primary", **pool))
        member = FleetMember(
            outbox, db, primary, SchedulerStatus(), StartCheck(db, primary, outbox=outbox.name)
        )
        try:
            member.check.run()
        except DatabaseUnavailable as error:
            member.status.database_failed(error)
            log.warning(
                'outbox "%s" (%s at %s) is unreachable at start: %s; its jobs retry with backoff',
                outbox.name,
                db.table_name,
                describe_target(settings.dsn),
                str(error).splitlines()[0],
            )
        members.append(member)
    return members


def build_fleet_scheduler(
    members: Sequence[FleetMember],
    registry: ReplicaRegistry,
    *,
    blocking: bool,
    ruleset: RuleSet | None = None,
    transports: Mapping[str, Any] | None = None,
    clock: Clock = system_clock,
    sender_interval: float = SENDER_INTERVAL_SECONDS,
    hang_seconds: float | None = None,
) -> tuple[BaseScheduler, LeaseShare]:
    """One scheduler with every outbox's jobs (``add_outbox_jobs``, ids ``<job>@<outbox>``),
    each lease taken only within this replica's share, and the ``replicas`` job.

    ``replicas`` every tick (the shorter of the interval and ``sender_interval``): the
    heartbeat (``ReplicaRegistry.heartbeat``: N), then while this replica holds more than
    ⌈M/N⌉ leases it releases the last outboxes it leads (fleet order), each after its
    running pass (``JobRuntime.release``: never in the middle of an evaluation). Another
    replica below its share takes a released lease at its next tick. At shutdown every
    lease is released and the heartbeat row removed.

    ``hang_watch`` every tick on its own thread (``hang_watch``): an outbox whose database
    answers nothing for ``hang_seconds`` (default ``hang_watch.hang_after`` of its settings)
    is unreachable, alerted once, resolved when it answers.

    Returns:
        ``(scheduler, share)``, not started; ``share.replicas`` starts as the registry's
        last count (``run_fleet_scheduler`` heartbeats once before building).
    """
    scheduler = new_scheduler(blocking=blocking, workers=REPLICAS_WORKERS)
    runtimes: list[JobRuntime] = []
    watches: list[HangWatch] = []
    share = LeaseShare(len(members), lambda: sum(r.leadership.held for r in runtimes))
    share.replicas = registry.replicas
    interval = ruleset.defaults.interval if ruleset else members[0].db.settings.sample_interval
    for index, member in enumerate(members):
        leadership = Leadership(
            member.primary.settings, ttl=lease_ttl(interval), may_take=share.may_take
        )
        member.runtime = add_outbox_jobs(
            OutboxJobs(scheduler, member.outbox.name, phase=index / len(members)),
            member.db,
            ruleset=ruleset,
            clock=clock,
            transports=transports,
            leadership=leadership,
            sender_interval=sender_interval,
            status=member.status,
            primary=member.primary,
            outbox=member.outbox,
            hang_seconds=hang_seconds,
            hang_watches=watches,
            start_check=member.check,
        )
        runtimes.append(member.runtime)
    add_hang_watch_job(scheduler, watches)

    def balance() -> None:
        share.replicas = registry.heartbeat(share.held())
        surplus = share.surplus() - sum(runtime.releasing for runtime in runtimes)
        for member in reversed(members):
            runtime = member.runtime
            if surplus <= 0:
                return
            if runtime is None or not runtime.leadership.held or runtime.releasing:
                continue
            runtime.release()
            surplus -= 1
            log.info(
                'releasing the lease of outbox "%s" after its running pass: %d replica(s) '
                "share %d outbox(es), at most %d each",
                member.outbox.name,
                share.replicas,
                share.outboxes,
                share.cap,
            )

    add_interval_job(
        scheduler,
        REPLICAS_JOB_ID,
        guarded(REPLICAS_JOB_ID, balance, target=f"the registry ({registry.source})"),
        seconds=min(interval, sender_interval),
        name="heartbeat and release leases over this replica's share",
    )

    def stop(event: object) -> None:
        for runtime in runtimes:
            runtime.leadership.release()
        registry.leave()

    scheduler.add_listener(stop, EVENT_SCHEDULER_SHUTDOWN)
    return scheduler, share


@contextmanager
def served_fleet_scheduler(
    fleet: Fleet,
    ruleset: RuleSet | None,
    transports: Mapping[str, Any] | None,
    *,
    blocking: bool,
    address: str,
    port: int,
) -> Iterator[tuple[BaseScheduler, MetricsServer | None]]:
    """The one assembly of a fleet's scheduler, for ``outbox-monitor scheduler``
    (``blocking``, ``run_fleet_scheduler``) and ``dashboard --with-scheduler`` (a
    ``BackgroundScheduler`` beside the server, ``scheduler.background_scheduler``): check
    the registry and the outboxes (``open_members``), heartbeat once (so a replica starting
    beside others knows N before it takes a lease), build every outbox's jobs
    (``build_fleet_scheduler``), start ``/metrics`` and ``/healthz`` (``FleetCollector``,
    ``FleetStatus``) unless the port is 0. The outboxes' Databases close when the block
    ends; the leases and the registry row go when the scheduler shuts down.

    Yields:
        ``(scheduler, server)``: the scheduler not started (the caller starts it and shuts
        it down), the running server (the caller stops it) or ``None`` for port 0.

    Raises:
        ConfigError: the registry is a standby or lacks its table (naming
            ``OUTBOX_MONITOR_REGISTRY_DSN``), an outbox's writes would reach a standby, the
            address or port cannot be served.
        TableMissing, ColumnsMissing, SchemaNotInitialised: an outbox's table (named), at
            start or, for an outbox unreachable then, as the block ends (its ``start_check``
            job found it once the database answered and shut the scheduler down).
    """
    dsn, source = registry_target(fleet)
    with ExitStack() as stack:
        members = open_members(fleet, stack)
        interval = ruleset.defaults.interval if ruleset else members[0].db.settings.sample_interval
        registry = ReplicaRegistry(
            dsn,
            source,
            fleet=fleet_key(fleet.names),
            identity=f"{socket.gethostname()}:{os.getpid()}",
            ttl=lease_ttl(interval),
        )
        registry.check()
        registry.heartbeat(0)
        scheduler, share = build_fleet_scheduler(
            members, registry, blocking=blocking, ruleset=ruleset, transports=transports
        )
        server = None
        if port:
            server = MetricsServer(
                None,
                FleetStatus(members, share),
                address=address,
                port=port,
                collector=FleetCollector(members, share, ruleset),
            ).start()
        log.info(
            "scheduler started for %d outbox(es) of %s (%s); %d replica(s) in the registry "
            "(%s), this one leads at most %d%s",
            len(members),
            fleet.path,
            ", ".join(fleet.names),
            share.replicas,
            source,
            share.cap,
            "; Ctrl-C to stop" if blocking else ", in the background",
        )
        yield scheduler, server
    for member in members:  # an outbox unreachable at start, misconfigured once it answered
        if member.check is not None:
            member.check.raise_failure()


def run_fleet_scheduler(
    fleet: Fleet,
    ruleset: RuleSet | None,
    transports: Mapping[str, Any] | None,
    *,
    address: str,
    port: int,
    serve: Any,
) -> None:
    """``outbox-monitor scheduler`` for a fleet file: ``served_fleet_scheduler``, blocking,
    then ``serve(scheduler, server)`` (``scheduler.serve_until_stopped``) until stopped.

    Raises:
        As ``served_fleet_scheduler``.
    """
    with served_fleet_scheduler(
        fleet, ruleset, transports, blocking=True, address=address, port=port
    ) as (scheduler, server):
        serve(scheduler, server)


def writing_with_actions(fleet: Fleet) -> Fleet:
    """``fleet`` with each outbox that has no ``primary_dsn_env`` writing through its
    ``actions_dsn_env`` when it has one (its lease, samples, alert state, notifications and
    the registry when it is the first): ``dashboard --with-scheduler``'s writes, as
    ``scheduler.scheduler_databases``'s ``fallback_dsn`` for a single outbox (the dashboard's
    read login may be a viewer role or a hot standby)."""
    outboxes = tuple(
        replace(o, settings=o.settings.model_copy(update={"primary_dsn": o.settings.actions_dsn}))
        if o.settings.primary_dsn is None and o.settings.actions_dsn
        else o
        for o in fleet.outboxes
    )
    return Fleet(outboxes, fleet.path, fleet.listed)
