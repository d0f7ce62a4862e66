"""One outbox's database hung — its server frozen (SIGSTOP): connections open, no answer, no
statement timeout ever fires — does not blind the fleet's /metrics (issue 16 items 4 and 5):
a scrape answers within its deadline with that outbox ``outbox_monitor_up 0`` and the others'
figures, /healthz names it, and it is measured again once its server answers."""

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from outbox_monitor.config.fleet import Outbox
from outbox_monitor.config.settings import load_settings
from outbox_monitor.export.fleet import FleetCollector, FleetStatus
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.service.fleet_scheduler import OUTBOX_WORKERS, FleetMember
from outbox_monitor.service.replica_registry import LeaseShare
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import REPO, wait_for
from tests.integration import test_fleet_scheduler
from tests.integration.test_fleet_scheduler import add_pending, fleet_env, leases

far_cluster = test_fleet_scheduler.far_cluster  # a second cluster, this module's own

DEADLINE = 2.0


def scrape(collector: FleetCollector) -> tuple[float, dict[tuple[str, str], float]]:
    """Seconds the scrape took, and ``(family sample, outbox) → value`` of the samples
    without an event type (and of ``event_type="order.paid"``)."""
    registry = CollectorRegistry()
    registry.register(collector)
    started = time.monotonic()
    text = generate_latest(registry).decode()
    took = time.monotonic() - started
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("event_type") in (None, "order.paid"):
                found[(sample.name, sample.labels.get("outbox", ""))] = sample.value
    return took, found


@contextmanager
def frozen(cluster) -> Iterator[None]:
    """The cluster's postmaster and backends stopped (SIGSTOP), continued on exit."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(
        ["ps", "--ppid", str(postmaster), "-o", "pid="], capture_output=True, text=True
    ).stdout.split()
    pids = [postmaster, *map(int, children)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_a_hung_database_costs_only_its_outbox_on_metrics_and_healthz(dsn, far_cluster):
    far = far_cluster.dsn_for("far")
    add_pending(dsn, "integration_outbox", "order.paid", 3)
    with psycopg.connect(far, autocommit=True) as conn:
        conn.execute("DELETE FROM integration_outbox")
    add_pending(far, "integration_outbox", "order.paid", 2)
    members = []
    for name, target in (("orders", dsn), ("far", far)):
        settings = load_settings(dsn=target, metrics_cache=0).of_fleet_outbox(name)
        db = Database(settings)
        members.append(FleetMember(Outbox(name, settings), db, db, SchedulerStatus()))
    share = LeaseShare(2, lambda: 0)
    collector = FleetCollector(members, share, deadline=DEADLINE)
    try:
        _, found = scrape(collector)
        assert found[("outbox_queue_depth", "orders")] == 3
        assert found[("outbox_queue_depth", "far")] == 2
        assert FleetStatus(members, share).health()[1]["notice"] is None

        with frozen(far_cluster):
            for _ in range(2):  # the second scrape does not wait for the first's hung read
                took, found = scrape(collector)
                assert took < DEADLINE + 1.5, took
                assert found[("outbox_monitor_up", "orders")] == 1
                assert found[("outbox_queue_depth", "orders")] == 3
                assert found[("outbox_monitor_up", "far")] == 0
                assert ("outbox_queue_depth", "far") not in found
            notice = FleetStatus(members, share).health()[1]["notice"]
            assert notice == (
                f'outbox "far": database unreachable: no figures within {DEADLINE:g} s '
                "(its database does not answer)"
            )

        def far_again() -> bool:
            return scrape(collector)[1].get(("outbox_queue_depth", "far")) == 2

        assert wait_for(far_again, timeout=30, step=0.5)
    finally:
        for member in members:
            member.db.close()


SKIPPED = re.compile(
    r'Execution of job "(?P<job>.+) \((?P<outbox>[\w-]+)\) \(trigger: .*" skipped: '
    r"maximum number of running instances reached"
)
"""APScheduler's line for a job due again while its last run still runs."""


def held_threads(log: Path, offset: int) -> dict[str, set[str]]:
    """Outbox → the names of its jobs found still running when due again (``SKIPPED``) in the
    scheduler's ``log`` from byte ``offset`` on: each holds one of the outbox's threads."""
    held: dict[str, set[str]] = {}
    for found in SKIPPED.finditer(log.read_bytes()[offset:].decode(errors="replace")):
        held.setdefault(found["outbox"], set()).add(found["job"])
    return held


HUNG_FLEET = """
version: 1
outboxes:
  - {name: orders, dsn_env: ORDERS_DSN}
  - {name: far1, dsn_env: FAR1_DSN}
  - {name: far2, dsn_env: FAR2_DSN}
  - {name: far3, dsn_env: FAR3_DSN}
"""


def test_hung_databases_hold_only_their_own_outboxes_threads(
    dsn, far_cluster, tmp_path, slack_sink
):
    # three outboxes of four in a frozen cluster: their jobs hang (no answer, no statement
    # timeout fires), each in its outbox's own thread pool; once every one of their threads
    # is held (the scheduler skips their jobs due again), orders' evaluation goes on and its
    # stuck lock reaches Slack while they hang
    far = {}
    with psycopg.connect(far_cluster.dsn, autocommit=True) as conn:
        for name in ("far1", "far2", "far3"):
            conn.execute(f"CREATE DATABASE {name}")
            far[name] = far_cluster.dsn_for(name)
            with Database(load_settings(dsn=far[name])) as db:
                init_db(db, create_table=True)
    env = fleet_env(
        tmp_path,
        HUNG_FLEET,
        ORDERS_DSN=dsn,
        **{f"{name.upper()}_DSN": target for name, target in far.items()},
        SLACK_WEBHOOK_URL=f"{slack_sink.url}/services/T000/BONCALL/one",
        HOME=str(tmp_path),
    )
    log = tmp_path / "scheduler.log"
    command = [sys.executable, "-m", "outbox_monitor", "scheduler", "--metrics-port", "0"]
    with log.open("w") as stderr:
        process = subprocess.Popen(command, cwd=REPO, env=env, stderr=stderr)
    try:
        assert wait_for(lambda: leases({"orders": dsn})["orders"], timeout=30), log.read_text()
        with frozen(far_cluster):
            since = log.stat().st_size

            def every_far_thread_held() -> bool:
                held = held_threads(log, since)
                return all(len(held.get(name, ())) >= OUTBOX_WORKERS for name in far)

            assert wait_for(every_far_thread_held, timeout=30), log.read_text()[-3000:]
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
                    "event_key, payload, status, locked_at, locked_by) VALUES ('order.paid', "
                    "'a', 'o', 'stuck', '{}', 'processing', now() - interval '2 hours', 'w')"
                )

            # a far outbox whose database never answered since the start may post its
            # database-unreachable first (issue 29 item 13): orders' message is the one awaited
            def orders_fired() -> bool:
                texts = [message["text"] for message in slack_sink.messages()]
                return any("outbox orders" in t and "stuck-lock" in t for t in texts)

            assert wait_for(orders_fired, timeout=15), log.read_text()[-3000:]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
