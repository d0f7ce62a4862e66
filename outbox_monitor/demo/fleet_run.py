"""``outbox-monitor demo --outboxes N``: the demo with a fleet of outboxes (``demo.fleet``).

One throwaway cluster holds the outboxes' databases; each outbox gets ``init_db``, its
breakers, a downstream of its own (its outage switch) and its own simulated traffic (a
thread: backfill, publisher, workers); the fleet file and the DSN variables it names are
written and set before the dashboard starts (``OUTBOX_MONITOR_OUTBOXES``: its sidebar
chooses the outbox); one fleet scheduler alerts for every outbox (``build_fleet_scheduler``,
its ``/metrics`` and ``/healthz`` on a free port).
Ctrl-C (or SIGTERM) stops all of it and deletes the cluster, as ``demo.run`` does.
"""

import contextlib
import os
import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from outbox_monitor.alerts.leader import lease_ttl
from outbox_monitor.alerts.message import DASHBOARD_URL_ENV
from outbox_monitor.alerts.rules_file import RULES_ENV, resolve_rules_path
from outbox_monitor.config.fleet import FLEET_ENV, load_fleet
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.demo.downstream import Downstream
from outbox_monitor.demo.fleet import (
    DemoOutbox,
    demo_fleet,
    fleet_controls,
    write_fleet_file,
)
from outbox_monitor.demo.lifecycle import (
    DEMO_ACTOR,
    DEMO_ADDRESS,
    DEMO_BACKFILL,
    DEMO_CONTROLS,
    DEMO_LOCK_TIMEOUT,
    DEMO_SAMPLE_INTERVAL,
    START_TIMEOUT,
    alert_destination,
    check_port_free,
    ignoring_sigint,
    wait_for_dashboard,
)
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.demo.rules import use_demo_rules
from outbox_monitor.demo.simulate import run_simulation
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.export.fleet import FleetCollector, FleetStatus
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.flow.controls_file import apply_controls, load_controls
from outbox_monitor.service.fleet_scheduler import FleetMember, build_fleet_scheduler
from outbox_monitor.service.replica_registry import ReplicaRegistry, fleet_key, registry_target
from outbox_monitor.service.scheduler import interrupt_on_sigterm, load_alerting
from outbox_monitor.service.serve import start_dashboard, stop_process, wait_until_healthy
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db


class _Traffic(threading.Thread):
    """One outbox's simulated traffic (``run_simulation``, no worker crashes) until ``stop``;
    ``ready`` is set once its history is in (``backfilled``) or it failed (``error``)."""

    def __init__(
        self,
        member: DemoOutbox,
        settings: Settings,
        downstream: Downstream,
        *,
        rate: float,
        seed: int,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"simulator-{member.name}", daemon=True)
        self.member, self.settings, self.downstream = member, settings, downstream
        self.rate, self.seed, self.stop = rate * member.share, seed, stop
        self.ready = threading.Event()
        self.backfilled: dict[str, Any] = {}
        self.error: Exception | None = None

    def _on_ready(self, backfilled: dict[str, Any]) -> None:
        self.backfilled = backfilled
        self.ready.set()

    def run(self) -> None:
        try:
            run_simulation(
                self.settings,
                rate=self.rate,
                workers=self.member.workers,
                backfill=DEMO_BACKFILL,
                stop_event=self.stop,
                seed=self.seed,
                crash_every=None,  # calm until you break one: its alert is the only one
                on_ready=self._on_ready,
                downstream_outage=self.downstream.outage,
                event_types=self.member.event_types,
            )
        except Exception as error:
            self.error = error
            self.ready.set()


def _fleet_banner(
    *,
    url: str,
    seconds: float,
    path: Path,
    traffics: Sequence[_Traffic],
    server: str,
    folder: Path,
    slack: str,
    metrics_url: str,
) -> str:
    variables = " ".join(f"{t.member.dsn_env}='{t.settings.dsn}'" for t in traffics)
    rules = resolve_rules_path(None).resolve()
    lines = [
        "",
        f"outbox-monitor demo is up (started in {seconds:.1f} s): a fleet of "
        f"{len(traffics)} outboxes",
        f"  dashboard  {url} (the sidebar's Outbox chooses one; ?outbox=NAME in every URL)",
        f"  fleet      {path} ({FLEET_ENV}; DSNs in the variables it names)",
    ]
    for traffic in traffics:
        member, downstream = traffic.member, traffic.downstream.url("")
        labels = ", ".join(f"{k}: {v}" for k, v in member.labels.items())
        lines += [
            f"  {member.name:<14}{member.table} in {traffic.settings.dsn} ({labels})",
            f"{'':16}≈{traffic.rate:g} events/s of {', '.join(member.event_types)}; "
            f"{member.workers} worker{'s' * (member.workers > 1)}; "
            f"{traffic.backfilled.get('rows', 0):,} rows of history",
            f"{'':16}.venv/bin/outbox-monitor demo-downstream break --url {downstream} "
            f"--event-type {member.broken}",
            f"{'':16}.venv/bin/outbox-monitor demo-downstream heal --url {downstream}",
        ]
    lines += [
        f"  CLI        {FLEET_ENV}='{path}' {variables} {RULES_ENV}='{rules}' "
        ".venv/bin/outbox-monitor status  (--outbox NAME: one of them)",
        f"  scheduler  one fleet scheduler for every outbox, in this process ({rules.name}); "
        f"{metrics_url}/healthz and {metrics_url}/metrics",
        f"  postgres   {server}",
        f"  data       {folder} (deleted when the demo stops)",
        f"  alerts     {slack}",
        "Ctrl-C to stop.",
        "",
    ]
    return "\n".join(lines)


def run_fleet_demo(*, port: int = 8501, rate: float = 20.0, outboxes: int = 3) -> int:
    """Run the demo with a fleet of ``outboxes`` outboxes until Ctrl-C or SIGTERM.

    Starts a ``TemporaryCluster`` with the outboxes' databases (``DEMO_FLEET``), writes the
    fleet file into its folder and sets the DSN variables it names and ``FLEET_ENV`` in this
    process's environment (which the dashboard inherits), runs ``init_db`` and applies each
    outbox's breakers, starts each outbox's downstream and traffic (one hour of history,
    then ``rate`` × its share), the dashboard on ``127.0.0.1:port`` and alerting for every
    outbox; prints a banner with the fleet, its file and each outbox's break command.

    Returns:
        ``0`` when stopped by Ctrl-C or SIGTERM; the dashboard's exit code if it died.

    Raises:
        PostgresNotFound: no PostgreSQL server binaries.
        ConfigError: an ``OUTBOX_MONITOR_*`` variable is invalid (checked first).
        OutboxMonitorError: ``outboxes`` out of range, the port is taken, or a part failed
            to start.
    """
    started = time.monotonic()
    load_settings()  # an invalid setting stops the demo now, naming it (ConfigError)
    members = demo_fleet(outboxes)
    check_port_free(port)
    # before the settings are loaded, as run_demo does: links name this demo's port
    os.environ.setdefault(DASHBOARD_URL_ENV, f"http://{DEMO_ADDRESS}:{port}")
    cluster = TemporaryCluster()
    stop = threading.Event()
    seed = random.SystemRandom().randrange(2**31)
    cleanup = contextlib.ExitStack()  # undone in reverse, even when a start fails
    cleanup.callback(cluster.stop)
    try:
        with interrupt_on_sigterm():
            cluster.start()
            dsns: dict[str, str] = {}  # by database: orders and billing share "shop"
            for member in members:
                if member.database not in dsns:
                    dsns[member.database] = cluster.create_database(member.database)
                os.environ[member.dsn_env] = dsns[member.database]
            path = write_fleet_file(
                cluster.root, members, lock_timeout=f"{DEMO_LOCK_TIMEOUT / 60:g}m"
            )
            os.environ[FLEET_ENV] = str(path)
            settings = load_settings(
                dsn=os.environ[members[0].dsn_env],
                sample_interval=DEMO_SAMPLE_INTERVAL,
                lock_timeout=DEMO_LOCK_TIMEOUT,
            )
            fleet = load_fleet(settings, path)
            controls = load_controls(DEMO_CONTROLS)
            databases: dict[str, Database] = {}
            traffics: list[_Traffic] = []
            for index, (member, outbox) in enumerate(zip(members, fleet.outboxes, strict=True)):
                db = databases[outbox.name] = cleanup.enter_context(Database(outbox.settings))
                init_db(db, create_table=True, flow_control=True)  # the demo breaks downstreams
                apply_controls(db, fleet_controls(member, controls), actor=DEMO_ACTOR)
                downstream = Downstream(authorization=None).start()
                cleanup.callback(downstream.stop)
                traffics.append(
                    _Traffic(
                        member, outbox.settings, downstream, rate=rate, seed=seed + index, stop=stop
                    )
                )
            use_demo_rules(cluster.root)  # before the rules are read
            sink, slack_target = alert_destination()
            if sink is not None:
                cleanup.callback(sink.stop)
            log_path = cluster.root / "dashboard.log"
            output = cleanup.enter_context(log_path.open("wb"))
            process = start_dashboard(settings, address=DEMO_ADDRESS, port=port, output=output)
            cleanup.callback(stop_process, process)
            for traffic in traffics:
                traffic.start()
                cleanup.callback(traffic.join, 30)
            cleanup.callback(stop.set)  # before the joins
            deadline = time.monotonic() + START_TIMEOUT
            for traffic in traffics:
                if not traffic.ready.wait(max(deadline - time.monotonic(), 0)) or traffic.error:
                    raise OutboxMonitorError(
                        f"the traffic of {traffic.member.name} failed to start: "
                        f"{traffic.error or 'timeout'}"
                    )
            ruleset, transports = load_alerting(None, settings)
            fleet_members = [
                FleetMember(o, databases[o.name], databases[o.name], SchedulerStatus())
                for o in fleet.outboxes
            ]
            dsn, source = registry_target(fleet)
            registry = ReplicaRegistry(
                dsn,
                source,
                fleet=fleet_key(fleet.names),
                identity=f"demo:{os.getpid()}",
                ttl=lease_ttl(ruleset.defaults.interval),
            )
            registry.check()
            registry.heartbeat(0)
            scheduler, share = build_fleet_scheduler(
                fleet_members, registry, blocking=False, ruleset=ruleset, transports=transports
            )
            scheduler.start()
            cleanup.callback(scheduler.shutdown, wait=True)
            metrics = MetricsServer(
                None,
                FleetStatus(fleet_members, share),
                address=DEMO_ADDRESS,
                collector=FleetCollector(fleet_members, share, ruleset),
            ).start()
            cleanup.callback(metrics.stop)
            wait_until_healthy(process, address=DEMO_ADDRESS, port=port, log_path=log_path)
            banner = _fleet_banner(
                url=f"http://{DEMO_ADDRESS}:{port}",
                seconds=time.monotonic() - started,
                path=path,
                traffics=traffics,
                server=cluster.describe(),
                folder=cluster.root,
                slack=slack_target,
                metrics_url=metrics.url,
            )
            print(banner, flush=True)
            return wait_for_dashboard(process)
    except KeyboardInterrupt:
        print("\nstopping the demo…", flush=True)
        return 0
    finally:
        with ignoring_sigint():
            cleanup.close()
