"""A watched database that hangs — its server frozen (SIGSTOP): connections accepted, nothing
answered, no statement timeout firing — is never silent (``hang_watch``), on real
``outbox-monitor scheduler`` processes: a fleet of orders and far (far in a cluster of its
own) posts exactly one database-unreachable message naming far within the threshold plus a
few seconds while orders keeps alerting, then exactly one resolve once far answers; the
single-outbox scheduler on far does the same. The threshold is ``hang_after``: statement
timeout 1 s and interval 1 s give its floor, 5 s."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import Popen

import psycopg

from outbox_monitor.config.settings import ENV_PREFIX
from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.service.hang_watch import HANG_FLOOR_SECONDS
from tests.alerting import REPO, stuck_lock_rules, wait_for
from tests.integration import test_fleet_scheduler
from tests.integration.test_exporter import get
from tests.integration.test_fleet_hung_database import frozen
from tests.integration.test_fleet_scheduler import leases, posted

far_cluster = test_fleet_scheduler.far_cluster  # a second cluster, this module's own

INTERVAL = 1.0
THRESHOLD = HANG_FLOOR_SECONDS  # max(3 × 1 s, 2 × 1 s, 5 s)
FLEET = """
version: 1
outboxes:
  - {name: orders, dsn_env: ORDERS_DSN}
  - {name: far, dsn_env: FAR_DSN}
"""
STUCK = (
    "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key, "
    "payload, status, locked_at, locked_by) VALUES ('order.paid', 'a', 'o', 'stuck', '{}', "
    "'processing', now() - interval '2 hours', 'w')"
)


def threads(pid: int) -> int:
    """The process's threads now (``/proc/<pid>/status``)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads")))


def scheduler_env(tmp_path, url: str, **variables: str) -> dict[str, str]:
    """A scheduler's environment: rules ``stuck_lock_rules("1s")`` to the sink at ``url``,
    statement timeout and sample interval 1 s."""
    (tmp_path / "alerts.yml").write_text(stuck_lock_rules(f"{INTERVAL:g}s"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(
        OUTBOX_MONITOR_RULES=str(tmp_path / "alerts.yml"),
        OUTBOX_MONITOR_STATEMENT_TIMEOUT="1",
        OUTBOX_MONITOR_SAMPLE_INTERVAL="1",
        SLACK_WEBHOOK_URL=f"{url}/services/T000/BONCALL/one",
        HOME=str(tmp_path),
        **variables,
    )
    return env


def unreachable(sink) -> list[tuple[str, str]]:
    """``posted(sink)`` of rule database-unreachable."""
    return [found for found in posted(sink) if "database-unreachable" in found[1]]


@contextmanager
def scheduler_process(tmp_path, env: dict[str, str], port: int = 0) -> Iterator[Popen]:
    """``outbox-monitor scheduler`` in ``env`` for the block (stderr in ``scheduler.log``),
    stopped by SIGTERM at its end: it must exit 0."""
    log = tmp_path / "scheduler.log"
    command = [sys.executable, "-m", "outbox_monitor", "scheduler", "--metrics-port", str(port)]
    with log.open("w") as stderr:
        process = subprocess.Popen(command, cwd=REPO, env=env, stderr=stderr)
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert process.returncode == 0, log.read_text()[-3000:]


@contextmanager
def frozen_until_alerted(cluster, sink, process: Popen, label: str) -> Iterator[None]:
    """``cluster`` frozen for the block, entered once the database-unreachable message came:
    prints (and checks) the seconds from the freeze to it and the process's threads."""
    before = threads(process.pid)
    with frozen(cluster):
        froze = time.monotonic()
        assert wait_for(lambda: unreachable(sink), timeout=THRESHOLD + 10), posted(sink)
        took = time.monotonic() - froze
        print(f"{label}: freeze → database-unreachable message {took:.1f} s")
        print(f"{label}: threads before {before}, while frozen {threads(process.pid)}")
        assert THRESHOLD - 1.5 <= took <= THRESHOLD + 4, took
        yield


def test_a_hung_database_of_a_fleet_alerts_once_and_resolves(
    dsn, far_cluster, tmp_path, slack_sink
):
    far = far_cluster.dsn_for("far")
    (tmp_path / "outboxes.yml").write_text(FLEET)
    env = scheduler_env(
        tmp_path,
        slack_sink.url,
        OUTBOX_MONITOR_OUTBOXES=str(tmp_path / "outboxes.yml"),
        ORDERS_DSN=dsn,
        FAR_DSN=far,
    )
    port = free_port()
    with scheduler_process(tmp_path, env, port) as process:
        assert wait_for(lambda: all(leases({"orders": dsn, "far": far}).values()), timeout=30)
        time.sleep(3 * INTERVAL)
        assert posted(slack_sink) == []
        with frozen_until_alerted(far_cluster, slack_sink, process, "fleet"):
            _, health = get(f"http://127.0.0.1:{port}/healthz")  # no scrape: the watch's
            assert 'outbox "far": database unreachable: no answer from ' in health, health
            assert '"orders"' not in health, health
            with psycopg.connect(dsn, autocommit=True) as conn:  # orders alerts on
                conn.execute(STUCK)
            assert wait_for(lambda: len(posted(slack_sink)) == 2, timeout=15), posted(slack_sink)
            time.sleep(3 * INTERVAL)  # a second unreachable message would show now
            assert len(posted(slack_sink)) == 2, posted(slack_sink)
        assert wait_for(lambda: len(posted(slack_sink)) == 3, timeout=30), posted(slack_sink)
        time.sleep(3 * INTERVAL)  # a duplicate would show now
    found = posted(slack_sink)
    assert len(found) == 3, found
    (outage, stuck, back) = found
    assert outage[0] == "far" and "database-unreachable" in outage[1], found
    assert stuck[0] == "orders" and "stuck-lock" in stuck[1], found
    assert back[0] == "far" and "resolved" in back[1].lower(), found
    first = slack_sink.messages()[0]["text"]
    assert "Last error: no answer from public.integration_out" in first, first
    log = (tmp_path / "scheduler.log").read_text()
    assert f"/far within {THRESHOLD:g} s: the database hangs" in log, log[-3000:]


def test_a_hung_database_of_the_single_scheduler_alerts_once_and_resolves(
    far_cluster, tmp_path, slack_sink
):
    far = far_cluster.dsn_for("far")
    env = scheduler_env(tmp_path, slack_sink.url, OUTBOX_MONITOR_DSN=far)
    with scheduler_process(tmp_path, env) as process:
        assert wait_for(lambda: leases({"far": far})["far"], timeout=30)
        time.sleep(3 * INTERVAL)
        with frozen_until_alerted(far_cluster, slack_sink, process, "single"):
            time.sleep(3 * INTERVAL)
            assert len(posted(slack_sink)) == 1, posted(slack_sink)
        assert wait_for(lambda: len(posted(slack_sink)) == 2, timeout=30), posted(slack_sink)
        time.sleep(3 * INTERVAL)
    found = posted(slack_sink)
    assert len(found) == 2, found
    assert "database-unreachable" in found[0][1], found
    assert "resolved" in found[1][1].lower(), found


def test_a_freeze_shorter_than_the_threshold_posts_nothing(far_cluster, tmp_path, slack_sink):
    # frozen 4 s: past 3 intervals (a stall) but within the hang threshold (5 s): the
    # watchdog waited that long for its lease, so the stall watch counts a lost database and
    # gives the leader its after-outage grace: no alerting-stalled message for a blip
    far = far_cluster.dsn_for("far")
    env = scheduler_env(tmp_path, slack_sink.url, OUTBOX_MONITOR_DSN=far)
    with scheduler_process(tmp_path, env):
        assert wait_for(lambda: leases({"far": far})["far"], timeout=30)
        time.sleep(3 * INTERVAL)
        with frozen(far_cluster):
            time.sleep(THRESHOLD - 1)
        time.sleep(5 * INTERVAL)
    assert posted(slack_sink) == []
