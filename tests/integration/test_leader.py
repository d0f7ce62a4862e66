"""Leadership (one evaluator among many schedulers), failover, the database-down alert."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from outbox_monitor.alerts.leader import Leadership
from outbox_monitor.alerts.rules import RuleSet, load_rules
from outbox_monitor.alerts.sink import SlackSink
from outbox_monitor.alerts.slack import transports_for
from outbox_monitor.config import ENV_PREFIX, load_settings
from outbox_monitor.db import Database
from outbox_monitor.pgcluster import TemporaryCluster
from outbox_monitor.scheduler import build_scheduler
from outbox_monitor.schema import init_db

REPO = Path(__file__).resolve().parents[2]

RULES = """
version: 1
defaults: {interval: 0.3s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h}
rules:
  - name: stuck-lock
    metric: stuck_locks
    op: ">"
    threshold: 0
    severity: warning
    route: oncall
"""


def wait_for(predicate: Callable, timeout: float, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def leader_pids(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND objsubid = 1 AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        ]


@pytest.fixture
def ruleset(tmp_path) -> RuleSet:
    path = tmp_path / "alerts.yml"
    path.write_text(RULES)
    return load_rules(path)


@pytest.fixture
def sink():
    with SlackSink(port=0) as server:
        yield server


def test_of_two_leaderships_exactly_one_leads(settings, dsn):
    with Leadership(settings) as first, Leadership(settings) as second:
        assert first.try_acquire() is True
        assert second.try_acquire() is False
        assert first.try_acquire() is True  # keeps it
        assert (first.is_leader, second.is_leader) == (True, False)
        assert len(leader_pids(dsn)) == 1
        first.release()
        assert not first.is_leader
        assert second.try_acquire() is True
        assert first.try_acquire() is False


def test_the_lock_is_per_outbox_table(settings):
    other = load_settings(dsn=settings.dsn, table="public.other_outbox")
    with Leadership(settings) as first, Leadership(other) as second:
        assert first.try_acquire() and second.try_acquire()


def test_a_terminated_leader_connection_hands_over(settings, dsn):
    with Leadership(settings) as first, Leadership(settings) as second:
        assert first.try_acquire()
        [pid] = leader_pids(dsn)
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert first.is_leader is False  # it notices at once
        assert second.try_acquire() is True
        assert first.try_acquire() is False


def test_a_follower_whose_idle_connection_died_reconnects_without_error(settings, dsn):
    with Leadership(settings) as first, Leadership(settings) as second:
        assert first.try_acquire() and not second.try_acquire()
        with psycopg.connect(dsn, autocommit=True) as admin:  # as a server restart would
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'outbox-monitor leader' AND datname = current_database()"
            )
        assert second.try_acquire() is True
        assert first.try_acquire() is False


def test_a_killed_leader_process_frees_the_lock(settings, dsn):
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["OUTBOX_MONITOR_DSN"] = dsn
    code = (
        "import time; from outbox_monitor.config import load_settings; "
        "from outbox_monitor.alerts.leader import Leadership; "
        "lead = Leadership(load_settings()); assert lead.try_acquire(); "
        "print('leading', flush=True); time.sleep(60)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline().strip() == "leading"
        with Leadership(settings) as other:
            assert other.try_acquire() is False
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            started = time.monotonic()
            assert wait_for(other.try_acquire, timeout=5)
            print(f"\ntakeover after SIGKILL of the leader: {time.monotonic() - started:.2f} s")
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


class Replica:
    """One scheduler process's worth: its own pool, leadership and BackgroundScheduler."""

    def __init__(self, settings, ruleset, transports, *, alert_after: float | None = None):
        self.db = Database(settings)
        self.leadership = Leadership(settings)
        self.scheduler = build_scheduler(
            self.db,
            blocking=False,
            ruleset=ruleset,
            transports=transports,
            leadership=self.leadership,
            sender_interval=0.2,
            outage_alert_after=alert_after,
        )
        self.scheduler.start()

    def stop(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        self.db.close()


def test_two_schedulers_send_one_message_per_transition_and_fail_over(
    settings, dsn, conn, rows, ruleset, sink
):
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": sink.webhook_url})
    replicas = [Replica(settings, ruleset, transports) for _ in range(2)]
    try:
        assert wait_for(lambda: any(r.leadership.held for r in replicas), timeout=5)
        [leader] = [r for r in replicas if r.leadership.held]
        [follower] = [r for r in replicas if r is not leader]

        rows.add(status="processing", created_ago=3600, locked_ago=3600)
        assert wait_for(lambda: len(sink.messages()) >= 1, timeout=10)
        time.sleep(1.5)  # several more evaluation and sender passes on both
        assert len(sink.messages()) == 1
        assert "stuck-lock" in sink.messages()[0]["text"]

        leader.stop()  # the leader goes away; the follower takes over
        started = time.monotonic()
        assert wait_for(lambda: follower.leadership.held, timeout=5)
        takeover = time.monotonic() - started
        conn.execute("UPDATE integration_outbox SET status = 'done', processed_at = now()")
        assert wait_for(lambda: len(sink.messages()) >= 2, timeout=10)
        time.sleep(1.0)
        messages = sink.messages()
        assert len(messages) == 2 and "RESOLVED" in messages[1]["text"].upper()
        print(f"\ntakeover after the leader stopped: {takeover:.2f} s (interval 0.3 s)")
    finally:
        for replica in replicas:
            replica.stop()
    kinds = [
        (r["kind"], r["status"])
        for r in conn.execute("SELECT kind, status FROM outbox_monitor.notifications ORDER BY id")
    ]
    assert kinds == [("firing", "sent"), ("resolved", "sent")]
    transitions = conn.execute(
        "SELECT from_state, to_state FROM outbox_monitor.alert_transitions ORDER BY id"
    ).fetchall()
    assert [(t["from_state"], t["to_state"]) for t in transitions] == [
        ("inactive", "firing"),
        ("firing", "inactive"),
    ]
    assert leader_pids(dsn) == []  # both released on shutdown


@pytest.fixture
def outage_cluster():
    with TemporaryCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE outbox")
        dsn = cluster.dsn_for("outbox")
        with Database(load_settings(dsn=dsn)) as db:
            init_db(db, create_indexes=False)
        yield cluster, dsn


def test_database_outage_alerts_once_from_the_former_leader_and_resolves(
    outage_cluster, ruleset, sink
):
    cluster, dsn = outage_cluster
    settings = load_settings(dsn=dsn, sample_interval=1)
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": sink.webhook_url})
    replicas = [Replica(settings, ruleset, transports, alert_after=1.0) for _ in range(2)]
    try:
        assert wait_for(lambda: any(r.leadership.held for r in replicas), timeout=5)
        [leader] = [r for r in replicas if r.leadership.held]
        time.sleep(0.5)
        assert sink.messages() == []

        sink.fail_next(1, status=429, retry_after=1)  # the first post is rate limited
        cluster.pause()
        started = time.monotonic()
        assert wait_for(lambda: sink.messages(), timeout=15)
        posted_after = time.monotonic() - started
        time.sleep(2.0)  # the follower stays silent, the leader does not repeat
        [alert] = sink.messages()
        assert "cannot reach the database" in alert["text"]
        assert leader.leadership.identity in alert["text"]
        assert "Last error" in json.dumps(alert["blocks"])

        cluster.resume()
        assert wait_for(lambda: len(sink.messages()) >= 2, timeout=20)
        time.sleep(1.0)
        messages = sink.messages()
        assert len(messages) == 2
        assert "RESOLVED" in messages[1]["text"].upper()
        assert "reaches the database" in messages[1]["text"]
        outcomes = [r.outcome for r in sink.requests]
        assert outcomes == ["injected:429", "posted", "posted"]
        print(f"\nunreachable alert posted {posted_after:.1f} s after the database stopped")
    finally:
        for replica in replicas:
            replica.stop()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT rule, kind, status, dedupe_key FROM outbox_monitor.notifications ORDER BY id"
        ).fetchall()
        history = conn.execute(
            "SELECT from_state, to_state FROM outbox_monitor.alert_transitions "
            "WHERE rule = 'database-unreachable' ORDER BY id"
        ).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("database-unreachable", "error", "sent"),
        ("database-unreachable", "resolved", "sent"),
    ]
    assert rows[0][3].removesuffix("error") == rows[1][3].removesuffix("resolved")
    assert history == [("inactive", "error"), ("error", "inactive")]


def test_a_short_database_blip_alerts_nobody(outage_cluster, ruleset, sink):
    cluster, dsn = outage_cluster
    settings = load_settings(dsn=dsn, sample_interval=1)
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": sink.webhook_url})
    replica = Replica(settings, ruleset, transports, alert_after=30.0)
    try:
        assert wait_for(lambda: replica.leadership.held, timeout=5)
        cluster.pause()
        time.sleep(1.0)
        cluster.resume()
        assert wait_for(lambda: replica.leadership.held, timeout=15)
        time.sleep(0.5)
    finally:
        replica.stop()
    assert sink.messages() == []


def test_two_scheduler_processes_one_message_per_transition_and_failover_on_kill(
    dsn, conn, rows, tmp_path, sink
):
    rules = tmp_path / "alerts.yml"
    rules.write_text(RULES)
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(OUTBOX_MONITOR_DSN=dsn, SLACK_WEBHOOK_URL=sink.webhook_url)
    logs = [tmp_path / f"scheduler-{n}.log" for n in range(2)]
    processes = []
    for log_path in logs:
        with log_path.open("w") as log_file:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "outbox_monitor", "scheduler", "--rules", str(rules)],
                    cwd=REPO,
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            )

    def leader_index() -> int | None:
        found = [n for n, p in enumerate(logs) if "is now the alert evaluator" in p.read_text()]
        return found[-1] if len(found) == 1 else None

    try:
        assert wait_for(lambda: leader_index() is not None, timeout=20)
        leader = leader_index()
        rows.add(status="processing", created_ago=3600, locked_ago=3600)
        assert wait_for(lambda: len(sink.messages()) >= 1, timeout=10)
        time.sleep(1.5)
        assert len(sink.messages()) == 1

        processes[leader].send_signal(signal.SIGKILL)  # no release: Postgres frees the lock
        processes[leader].wait(10)
        survivor = processes[1 - leader]
        started = time.monotonic()
        assert wait_for(
            lambda: "is now the alert evaluator" in logs[1 - leader].read_text(), timeout=10
        )
        takeover = time.monotonic() - started
        conn.execute("UPDATE integration_outbox SET status = 'done', processed_at = now()")
        assert wait_for(lambda: len(sink.messages()) >= 2, timeout=10)
        time.sleep(1.0)
        messages = sink.messages()
        assert len(messages) == 2 and "RESOLVED" in messages[1]["text"].upper()
        print(f"\ntakeover after SIGKILL of the leader scheduler process: {takeover:.2f} s")
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(20) == 0, logs[1 - leader].read_text()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert leader_pids(dsn) == []
    kinds = [r["kind"] for r in conn.execute("SELECT kind FROM outbox_monitor.notifications")]
    assert kinds == ["firing", "resolved"]


def test_scheduler_refuses_a_malformed_rules_file(dsn, tmp_path):
    rules = tmp_path / "alerts.yml"
    rules.write_text(RULES.replace("threshold: 0", 'threshold: "abc"'))
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["OUTBOX_MONITOR_DSN"] = dsn
    result = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "scheduler", "--rules", str(rules)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert 'rules[0] "stuck-lock": threshold' in result.stderr
