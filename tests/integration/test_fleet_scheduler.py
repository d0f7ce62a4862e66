"""Scheduler replicas share a fleet (issue 16 item 5), on real processes and two clusters: three
outboxes (orders and billing in one database of the session cluster, far in a second cluster),
two `outbox-monitor scheduler` processes with the fleet file. The leases split 2/1 while both
live; after kill -9 of one the other leads all three within one interval plus the lease TTL;
/metrics labels every family by outbox with the hand-computed depths; far's stuck lock fires
once, one Slack message naming far, across the takeover; a stopped cluster shows only its
outbox unreachable on /healthz and /metrics and posts one database-unreachable message naming
far, then its resolve; a stuck lock in orders then posts one message, billing (same database)
none; an outbox unreachable at start stops neither the scheduler nor `dashboard
--with-scheduler`."""

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.rows import dict_row

from outbox_monitor.alerts.leader import lease_ttl
from outbox_monitor.config.settings import ENV_PREFIX, load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import REPO, stuck_lock_rules, wait_for
from tests.integration.test_exporter import by, get, scrape

INTERVAL = 1.0
FLEET = """
version: 1
outboxes:
  - name: orders
    dsn_env: ORDERS_DSN
  - name: billing
    dsn_env: ORDERS_DSN
    table: public.billing_outbox
  - name: far
    dsn_env: FAR_DSN
"""
TABLES = {"orders": "integration_outbox", "billing": "billing_outbox", "far": "integration_outbox"}


@pytest.fixture(scope="module")
def far_cluster() -> Iterator[TemporaryCluster]:
    with TemporaryCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE far")
        with Database(load_settings(dsn=cluster.dsn_for("far"))) as db:
            init_db(db, create_table=True)
        yield cluster


def add_pending(dsn: str, table: str, event_type: str, count: int, *, due: bool = True) -> None:
    """``count`` pending rows of ``event_type``, created a minute ago, due now or in an hour."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL(
                "INSERT INTO {} (event_type, aggregate_type, aggregate_id, event_key, payload, "
                "status, created_at, available_at) "
                "SELECT %(type)s, 'a', g::text, %(type)s || ':' || g || ':' || %(due)s, '{{}}', "
                "'pending', now() - interval '1 minute', "
                "CASE WHEN %(due)s THEN now() - interval '1 minute' "
                "ELSE now() + interval '1 hour' END "
                "FROM generate_series(1, %(count)s) AS g"
            ).format(psycopg.sql.Identifier(table)),
            {"type": event_type, "count": count, "due": due},
        )


def leases(dsns: dict[str, str]) -> dict[str, str | None]:
    """Each outbox's live lease holder (host:pid), ``None`` when nobody holds it."""
    held = {}
    for name, dsn in dsns.items():
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            row = conn.execute(
                "SELECT holder FROM outbox_monitor.leader_leases AS l WHERE table_name = %s "
                "AND expires_at > now() "
                "AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.holder_pid)",
                (f"public.{TABLES[name]}",),
            ).fetchone()
        held[name] = None if row is None else row["holder"]
    return held


def firings(dsn: str) -> tuple[int, int]:
    """``(transitions to firing, firing notifications)`` of rule stuck-lock in ``dsn``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM outbox_monitor.alert_transitions "
            "        WHERE rule = 'stuck-lock' AND to_state = 'firing'), "
            "       (SELECT count(*) FROM outbox_monitor.notifications "
            "        WHERE rule = 'stuck-lock' AND kind = 'firing')"
        ).fetchone()


def split(dsns: dict[str, str], pids: list[int]) -> list[int]:
    """How many outboxes each process leads, in ``pids`` order."""
    holders = Counter(leases(dsns).values())
    return [sum(n for h, n in holders.items() if h and h.endswith(f":{pid}")) for pid in pids]


def posted(sink: SlackSink) -> list[tuple[str, str]]:
    """``(outbox, first line)`` of each Slack message so far (``?`` when none is named)."""
    found = []
    for message in sink.messages():
        text = message["text"]
        outbox = next((name for name in TABLES if f"outbox {name}" in text), "?")
        found.append((outbox, text.splitlines()[0]))
    return found


def test_replicas_split_the_fleet_and_take_over_a_killed_one(
    dsn, far_cluster, tmp_path, slack_sink
) -> None:
    far = far_cluster.dsn_for("far")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE billing_outbox (LIKE integration_outbox INCLUDING ALL)")
    add_pending(dsn, "integration_outbox", "order.paid", 3)
    add_pending(dsn, "billing_outbox", "invoice.sent", 2)
    add_pending(dsn, "billing_outbox", "invoice.sent", 1, due=False)  # a scheduled retry
    add_pending(far, "integration_outbox", "ship.requested", 4)
    with psycopg.connect(far, autocommit=True) as conn:  # one stuck lock: stuck-lock fires
        conn.execute(
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
            "event_key, payload, status, locked_at, locked_by) VALUES ('ship.requested', 'a', "
            "'s', 'stuck', '{}', 'processing', now() - interval '2 hours', 'w')"
        )
    dsns = {"orders": dsn, "billing": dsn, "far": far}
    (tmp_path / "outboxes.yml").write_text(FLEET)
    (tmp_path / "alerts.yml").write_text(stuck_lock_rules(f"{INTERVAL:g}s"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(
        ORDERS_DSN=dsn,
        FAR_DSN=far,
        SLACK_WEBHOOK_URL=f"{slack_sink.url}/services/T000/BONCALL/one",
        OUTBOX_MONITOR_OUTBOXES=str(tmp_path / "outboxes.yml"),
        OUTBOX_MONITOR_RULES=str(tmp_path / "alerts.yml"),
        OUTBOX_MONITOR_SAMPLE_INTERVAL="1",
        OUTBOX_MONITOR_METRICS_CACHE="0",
    )
    ports = [free_port(), free_port()]
    logs = [tmp_path / "replica-0.log", tmp_path / "replica-1.log"]
    command = [sys.executable, "-m", "outbox_monitor", "scheduler", "--metrics-port"]
    processes = []
    for port, log in zip(ports, logs, strict=True):
        with log.open("w") as stderr_file:
            processes.append(
                subprocess.Popen([*command, str(port)], cwd=REPO, env=env, stderr=stderr_file)
            )
    pids = [process.pid for process in processes]
    survivor = 1

    def stderr() -> str:
        return "\n".join(log.read_text()[-3000:] for log in logs)

    try:
        assert wait_for(lambda: sorted(split(dsns, pids)) == [1, 2], timeout=30), stderr()
        for _ in range(10):  # it stays split while both live: never 3/0
            assert sorted(split(dsns, pids)) == [1, 2]
            time.sleep(0.3)

        # the replica leading far is killed; the other one's /metrics is read
        far_leader = next(
            i for i, pid in enumerate(pids) if leases(dsns)["far"].endswith(f":{pid}")
        )
        survivor = 1 - far_leader
        assert wait_for(lambda: firings(far) == (1, 1), timeout=15), firings(far)
        url = f"http://127.0.0.1:{ports[survivor]}"
        found = scrape(url)
        for family, outbox, event_type, rows in (
            ("outbox_queue_depth", "orders", "order.paid", 3),
            ("outbox_queue_depth", "billing", "invoice.sent", 2),
            ("outbox_scheduled_retries", "billing", "invoice.sent", 1),
            ("outbox_queue_depth", "far", "ship.requested", 4),
        ):
            assert by(found, family, "event_type", outbox=outbox) == {event_type: rows, "other": 0}
        assert by(found, "outbox_monitor_up", "outbox") == {"orders": 1, "billing": 1, "far": 1}
        leaders = by(found, "outbox_monitor_leader", "outbox")
        assert sum(leaders.values()) == split(dsns, pids)[survivor]
        assert found["outbox_monitor_replicas"] == [({}, 2.0)]

        processes[far_leader].kill()  # kill -9: no release, no goodbye
        processes[far_leader].wait(timeout=10)
        killed_at = time.monotonic()
        assert wait_for(lambda: split(dsns, pids)[survivor] == 3, timeout=30), stderr()
        took = time.monotonic() - killed_at
        print(f"takeover of the killed replica's outboxes: {took:.2f} s")
        assert took <= INTERVAL + lease_ttl(INTERVAL) + 2, took
        assert wait_for(lambda: scrape(url)["outbox_monitor_replicas"] == [({}, 1.0)], 10)
        time.sleep(3 * INTERVAL)  # the new leader evaluates far: still firing, nothing new
        assert firings(far) == (1, 1)  # one transition, one notification, across the takeover
        assert [outbox for outbox, _ in posted(slack_sink)] == ["far"], posted(slack_sink)
        assert "stuck-lock" in posted(slack_sink)[0][1]

        far_cluster.pause()
        try:

            def far_down() -> bool:
                status, text = get(url + "/healthz")
                return status == 200 and 'outbox "far": database unreachable' in text

            assert wait_for(far_down, timeout=30), get(url + "/healthz")
            _, text = get(url + "/healthz")
            assert '"orders"' not in text and '"billing"' not in text
            found = scrape(url)
            assert by(found, "outbox_monitor_up", "outbox") == {"orders": 1, "billing": 1, "far": 0}
            assert by(found, "outbox_queue_depth", "event_type", outbox="orders")["order.paid"] == 3
            assert by(found, "outbox_queue_depth", "event_type", outbox="far") == {}
            assert wait_for(lambda: len(posted(slack_sink)) == 2, timeout=30), posted(slack_sink)
        finally:
            far_cluster.resume()
        assert wait_for(lambda: len(posted(slack_sink)) == 3, timeout=30), posted(slack_sink)
        time.sleep(3 * INTERVAL)  # a duplicate would show now
        assert len(posted(slack_sink)) == 3, posted(slack_sink)
        outage, back = posted(slack_sink)[1:]
        assert outage[0] == back[0] == "far", posted(slack_sink)
        assert "database-unreachable" in outage[1] and "resolved" in back[1].lower(), (outage, back)

        with psycopg.connect(dsn, autocommit=True) as conn:  # orders breaks; billing does not
            conn.execute(
                "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
                "event_key, payload, status, locked_at, locked_by) VALUES ('order.paid', 'a', "
                "'o', 'stuck', '{}', 'processing', now() - interval '2 hours', 'w')"
            )
        assert wait_for(lambda: len(posted(slack_sink)) == 4, timeout=15), posted(slack_sink)
        time.sleep(3 * INTERVAL)
        assert [outbox for outbox, _ in posted(slack_sink)] == ["far", "far", "far", "orders"]
        assert "stuck-lock" in posted(slack_sink)[3][1]
        # one process runs three outboxes' jobs: each job's log lines name its outbox
        survivor_log = logs[survivor].read_text()
        assert re.search(r'outbox "orders": alert stuck-lock\S*: inactive→firing', survivor_log)
        print("Slack messages:", *posted(slack_sink), sep="\n  ")
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=30)
    assert processes[survivor].returncode == 0, stderr()
    assert "scheduler started for 3 outbox(es)" in logs[survivor].read_text()


def fleet_env(tmp_path, fleet: str, **variables: str) -> dict[str, str]:
    """The environment of a scheduler process with ``fleet`` as its fleet file."""
    (tmp_path / "outboxes.yml").write_text(fleet)
    (tmp_path / "alerts.yml").write_text(stuck_lock_rules("1s"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(
        OUTBOX_MONITOR_OUTBOXES=str(tmp_path / "outboxes.yml"),
        OUTBOX_MONITOR_RULES=str(tmp_path / "alerts.yml"),
        **variables,
    )
    return env


ONE_AND_GONE = """
version: 1
outboxes:
  - name: orders
    dsn_env: ORDERS_DSN
  - name: gone
    dsn_env: GONE_DSN
"""


SERVICES = {
    "scheduler": ["scheduler"],
    "dashboard": ["dashboard", "--with-scheduler", "--port"],  # its fleet scheduler
}


@pytest.mark.parametrize("service", SERVICES)
def test_an_outbox_unreachable_at_start_stops_nothing(dsn, tmp_path, service):
    gone = dsn.rsplit("/", 1)[0] + "/no_such_database"
    port = free_port()
    env = fleet_env(
        tmp_path,
        ONE_AND_GONE,
        ORDERS_DSN=dsn,
        GONE_DSN=gone,
        HOME=str(tmp_path),
        OUTBOX_MONITOR_METRICS_PORT=str(port),
    )
    command = [sys.executable, "-m", "outbox_monitor", *SERVICES[service]]
    if service == "dashboard":
        command.append(str(free_port()))
    process = subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: leases({"orders": dsn})["orders"], timeout=20)
        status, text = get(url + "/healthz")
        found = scrape(url)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert status == 200 and 'outbox "gone": database unreachable' in text, text
    assert '"orders"' not in text
    assert by(found, "outbox_monitor_up", "outbox") == {"orders": 1, "gone": 0}
    assert 'outbox "gone" (public.integration_outbox at ' in stderr
    assert "unreachable at start" in stderr


def test_an_outbox_unreachable_at_start_is_checked_once_it_answers(dsn, tmp_path):
    """A hostile pass of issue 29: an outbox unreachable at start never had its table checked
    once its database answered. Its database is created (without the outbox) while the
    scheduler runs: the start-up check, retried, stops the scheduler naming the outbox, as a
    start with the database up would have."""
    late = f"late_{uuid.uuid4().hex[:8]}"
    env = fleet_env(
        tmp_path, ONE_AND_GONE, ORDERS_DSN=dsn, GONE_DSN=dsn.rsplit("/", 1)[0] + "/" + late
    )
    command = [sys.executable, "-m", "outbox_monitor", "scheduler", "--metrics-port", "0"]
    process = subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: leases({"orders": dsn})["orders"], timeout=30)
        assert process.poll() is None
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(late)))
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1, stderr
    assert "unreachable at start" in stderr
    assert 'outbox "gone": the outbox table public.integration_outbox does not exist' in stderr


@pytest.mark.parametrize(
    ("registry", "table", "code", "message"),
    [
        ("empty", None, 2, "OUTBOX_MONITOR_REGISTRY_DSN: the replicas' registry at "),
        (None, "public.nope", 1, 'outbox "gone": the outbox table public.nope does not exist'),
    ],
)
def test_a_misconfiguration_stops_the_start_naming_it(
    dsn, make_dsn, empty_dsn, tmp_path, registry, table, code, message
):
    fleet = ONE_AND_GONE + (f"    table: {table}\n" if table else "")
    env = fleet_env(tmp_path, fleet, ORDERS_DSN=dsn, GONE_DSN=make_dsn())
    if registry:
        env["OUTBOX_MONITOR_REGISTRY_DSN"] = empty_dsn
    result = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "scheduler", "--metrics-port", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == code, result.stderr
    assert message in result.stderr
