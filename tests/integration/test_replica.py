"""Read replicas (issue 14 item 4) on a real streaming hot standby started by the suite
(``pg_basebackup -R``; ``tests/replication.py``): detection and replay lag, the scheduler
reading the standby and writing the primary, skipping evaluation while the standby lags
(one Slack message, one resolve), and refusing to start or act against a standby."""

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.rows import dict_row

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.replica_lag import ReplicaLagWatch
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.cli import main
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.errors import ReadOnlyDatabase
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.store.db import Database
from outbox_monitor.store.standby import replica_status
from tests.alerting import running_scheduler, stuck_lock_rules, subprocess_env, wait_for
from tests.conftest import Rows

REPO = Path(__file__).resolve().parents[2]
MAX_LAG = 2.0
RULES = stuck_lock_rules("1s")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _cli(dsn: str, *args: str, **env: str) -> Any:
    runner = CliRunner(env={"OUTBOX_MONITOR_DSN": dsn, **env})
    return runner.invoke(main, list(args), catch_exceptions=False, prog_name="outbox-monitor")


def _connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


def _lag_after_write(replica_db: Any, seconds: float) -> float:
    """Pause replay, commit a row on the primary, wait ``seconds``; returns the wait
    measured from the commit (the standby's lag must be at least that)."""
    replica_db.standby_server.pause_replay()
    with _connect(replica_db.primary) as conn:
        Rows(conn).add(status="pending", created_ago=5)
    written = time.monotonic()
    time.sleep(seconds)
    return time.monotonic() - written


def _replayed_all_of_the_primary(replica_db: Any) -> bool:
    """The standby has replayed every WAL record the primary has written so far: a check
    then reads lag 0. (Between receiving the first commit after an idle spell and replaying
    it, "now - the last replayed commit" reads the idle spell: seen as 1.6 s under load.)"""
    with _connect(replica_db.primary) as primary, _connect(replica_db.standby) as standby:
        written = primary.execute("SELECT pg_current_wal_lsn() AS lsn").fetchone()["lsn"]
        return standby.execute(
            "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn AS done", (written,)
        ).fetchone()["done"]


def test_a_standby_is_detected_and_an_idle_one_lags_0(replica_db):
    with (
        Database(load_settings(dsn=replica_db.standby)) as standby,
        Database(load_settings(dsn=replica_db.primary)) as primary,
    ):
        assert replica_status(primary).as_json() == {"in_recovery": False, "lag_seconds": 0.0}
        time.sleep(1.5)  # "now - the last replayed commit" would read ≥ 1.5 s here
        assert wait_for(lambda: replica_status(standby).lag_seconds == 0.0, timeout=5)
        found = replica_status(standby)
        assert found.in_recovery and found.receive_lsn == found.replay_lsn
        assert found.as_json() == {"in_recovery": True, "lag_seconds": 0.0}
    result = _cli(replica_db.standby, "status", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["replica"] == {"in_recovery": True, "lag_seconds": 0.0}
    result = _cli(replica_db.primary, "status", "--json")
    assert json.loads(result.stdout)["replica"] == {"in_recovery": False, "lag_seconds": 0.0}


def test_the_lag_is_measured_while_replay_is_paused(replica_db):
    waited = _lag_after_write(replica_db, 2.0)
    with Database(load_settings(dsn=replica_db.standby)) as standby:
        found = replica_status(standby)
        print(f"\nreplay paused {waited:.2f} s after a commit: lag {found.lag_seconds:.2f} s")
        assert found.in_recovery and found.receive_lsn != found.replay_lsn
        assert found.lag_seconds >= waited
        assert found.exceeds(1.0) and not found.exceeds(found.lag_seconds + 60)
        result = _cli(replica_db.standby, "status", "--json")
        assert json.loads(result.stdout)["replica"]["lag_seconds"] >= waited
        assert "read from" in _cli(replica_db.standby, "status").stdout
        replica_db.standby_server.resume_replay()
        assert wait_for(lambda: replica_status(standby).lag_seconds == 0.0, timeout=10)


@contextmanager
def standby_scheduler(
    replica_db: Any, ruleset: RuleSet, sink: SlackSink, **settings: Any
) -> Iterator[tuple[Database, Database, MetricsServer]]:
    """The scheduler of ``build_scheduler`` reading the standby and writing the primary,
    with /metrics and /healthz on a free port; ``ruleset``'s alerts posted to ``sink``."""
    config = load_settings(
        dsn=replica_db.standby, primary_dsn=replica_db.primary, sample_interval=1, **settings
    )
    status = SchedulerStatus()
    with (
        Database(config) as db,
        Database(config, purpose="primary") as primary,
        running_scheduler(db, ruleset=ruleset, sink=sink, status=status, primary=primary),
    ):
        server = MetricsServer(db, status, primary=primary, ruleset=ruleset, cache_seconds=0)
        server.start()
        try:
            yield db, primary, server
        finally:
            server.stop()


def _stuck_lock(dsn: str) -> int:
    with _connect(dsn) as conn:
        return Rows(conn).add(status="processing", created_ago=3000, locked_ago=2000)


def test_the_scheduler_reads_the_standby_and_writes_the_primary(
    replica_db, write_rules, slack_sink
):
    _stuck_lock(replica_db.primary)
    replica_db.standby_server.wait_for_database(replica_db.name)
    with standby_scheduler(replica_db, write_rules(RULES), slack_sink):
        assert wait_for(lambda: slack_sink.messages(), timeout=20), "no firing message"
        assert "[FIRING] stuck-lock" in slack_sink.messages()[0]["text"]
        with _connect(replica_db.standby) as standby:
            readers = standby.execute(
                "SELECT count(*) AS n FROM pg_stat_activity "
                "WHERE application_name = 'outbox-monitor' AND datname = %s",
                (replica_db.name,),
            ).fetchone()["n"]
        assert readers >= 1  # the figures' pool is on the standby
    with _connect(replica_db.primary) as conn:
        lease = conn.execute("SELECT holder, evaluated_at FROM outbox_monitor.leader_leases")
        assert lease.fetchone()["evaluated_at"] is not None
        samples = conn.execute("SELECT stuck_locks FROM outbox_monitor.samples").fetchall()
        assert samples and {row["stuck_locks"] for row in samples} == {1}
        sent = conn.execute(
            "SELECT status FROM outbox_monitor.notifications WHERE rule = 'stuck-lock'"
        ).fetchall()
        assert [row["status"] for row in sent] == ["sent"]
        state = conn.execute("SELECT state FROM outbox_monitor.alert_instances").fetchone()
        assert state["state"] == "firing"


def _last_evaluated(dsn: str) -> Any:
    with _connect(dsn) as conn:
        return conn.execute(
            "SELECT last_evaluated_at FROM outbox_monitor.alert_instances WHERE rule = 'stuck-lock'"
        ).fetchone()["last_evaluated_at"]


def test_a_lagging_standby_skips_evaluation_and_alerts_once_then_resolves(
    replica_db, write_rules, slack_sink
):
    row_id = _stuck_lock(replica_db.primary)
    replica_db.standby_server.wait_for_database(replica_db.name)
    with standby_scheduler(replica_db, write_rules(RULES), slack_sink, max_replica_lag=MAX_LAG) as (
        db,
        _,
        server,
    ):
        assert wait_for(lambda: slack_sink.messages(), timeout=20), "no firing message"
        assert _get(server.url + "/healthz") == (200, "ok")
        # the standby stops replaying; the primary reaps the stuck lock meanwhile
        replica_db.standby_server.pause_replay()
        replayed_at = replica_status(db).replayed_at
        with _connect(replica_db.primary) as conn:
            conn.execute("UPDATE integration_outbox SET status = 'done' WHERE id = %s", (row_id,))
        over_at = replayed_at + timedelta(seconds=MAX_LAG)  # the lag crosses the setting

        def lag_alerts() -> list[Any]:
            return [r for r in slack_sink.requests if "replica-lag" in json.dumps(r.body)]

        assert wait_for(lag_alerts, timeout=20), "no replica-lag message"
        [alert] = lag_alerts()
        delay = (alert.at - over_at).total_seconds()
        print(f"\nlag over {MAX_LAG:g} s → Slack message in {delay:.2f} s")
        assert "rules not evaluated: replica lags" in json.dumps(alert.body)
        # its runbook steps, as a rule's (alerts/own_runbooks.py)
        runbook = f"📋 *Runbook · replica-lag*\n1. {own_runbooks.steps('replica-lag')[0]}"
        assert runbook in json.dumps(alert.body, ensure_ascii=False).replace("\\n", "\n")
        status, body = _get(server.url + "/healthz")
        assert status == 200 and body.startswith("ok: rules not evaluated: replica lags"), body
        metrics = _get(server.url + "/metrics")[1]
        assert "outbox_monitor_evaluation_skipped 1.0" in metrics
        assert "outbox_monitor_replica_in_recovery 1.0" in metrics
        frozen = _last_evaluated(replica_db.primary)
        time.sleep(3)  # three evaluation intervals: no rule is evaluated, no second message
        assert _last_evaluated(replica_db.primary) == frozen
        assert len(lag_alerts()) == 1
        assert [m["text"] for m in slack_sink.messages()].count(
            slack_sink.messages()[0]["text"]
        ) == 1

        replica_db.standby_server.resume_replay()
        assert wait_for(lambda: len(lag_alerts()) == 2, timeout=20), "no resolve"
        assert "RESOLVED" in json.dumps(lag_alerts()[1].body)
        # evaluation resumes on fresh figures: the stuck lock reaped on the primary resolves
        assert wait_for(
            lambda: any("[RESOLVED] stuck-lock" in m["text"] for m in slack_sink.messages()), 20
        )
        assert _get(server.url + "/healthz") == (200, "ok")
        time.sleep(2)
        assert len(lag_alerts()) == 2
        texts = [m["text"] for m in slack_sink.messages()]
        assert len(texts) == 4, texts  # firing, replica-lag, its resolve, resolved
    with _connect(replica_db.primary) as conn:
        history = conn.execute(
            "SELECT from_state, to_state FROM outbox_monitor.alert_transitions "
            "WHERE rule = 'replica-lag' ORDER BY id"
        ).fetchall()
    assert [(h["from_state"], h["to_state"]) for h in history] == [
        ("inactive", "error"),
        ("error", "inactive"),
    ]


def _run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "outbox_monitor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=subprocess_env(**env),
    )


def test_a_scheduler_on_a_standby_without_a_primary_dsn_exits_naming_the_variable(replica_db):
    started = _run_cli("scheduler", dsn=replica_db.standby)
    assert started.returncode == 2, started.stderr
    assert "OUTBOX_MONITOR_PRIMARY_DSN: not set, and OUTBOX_MONITOR_DSN" in started.stderr
    assert "hot standby" in started.stderr
    # a primary DSN that is a standby too
    started = _run_cli(
        "scheduler", dsn=replica_db.standby, OUTBOX_MONITOR_PRIMARY_DSN=replica_db.standby
    )
    assert started.returncode == 2, started.stderr
    assert "OUTBOX_MONITOR_PRIMARY_DSN:" in started.stderr
    with _connect(replica_db.primary) as conn:
        assert (
            conn.execute("SELECT count(*) AS n FROM outbox_monitor.leader_leases").fetchone()["n"]
            == 0
        )


def test_operator_actions_against_a_standby_are_refused(replica_db):
    result = _cli(replica_db.standby, "reap", "--yes")
    assert result.exit_code == 2
    assert "OUTBOX_MONITOR_ACTIONS_DSN: not set, and OUTBOX_MONITOR_DSN" in result.stderr
    result = _cli(
        replica_db.standby,
        "replay",
        "--yes",
        "--event-type",
        "x",
        OUTBOX_MONITOR_ACTIONS_DSN=replica_db.standby,
    )
    assert result.exit_code == 2
    assert "OUTBOX_MONITOR_ACTIONS_DSN: " in result.stderr and "not set" not in result.stderr
    # the actions DSN on the primary acts; figures keep coming from the standby
    result = _cli(
        replica_db.standby, "reap", "--yes", OUTBOX_MONITOR_ACTIONS_DSN=replica_db.primary
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("purpose", ["read", "primary", "actions"])
def test_a_write_reaching_a_standby_names_the_setting_to_change(replica_db, purpose):
    given = {"primary": {"primary_dsn": replica_db.standby}}.get(purpose, {})
    settings = load_settings(dsn=replica_db.standby, **given)
    with Database(settings, purpose=purpose) as db, pytest.raises(ReadOnlyDatabase) as caught:
        db.fetch_all("samples_prune", {"table_name": "x", "retention": 60, "batch": 1})
    wanted = {
        # the read DSN serves actions and the scheduler's writes while their DSNs are unset
        "read": "Set OUTBOX_MONITOR_ACTIONS_DSN (operator actions) and "
        "OUTBOX_MONITOR_PRIMARY_DSN (the scheduler's writes) to the primary",
        "primary": "Set OUTBOX_MONITOR_PRIMARY_DSN to the primary",  # set, to a standby
        "actions": "Set OUTBOX_MONITOR_ACTIONS_DSN to the primary",  # unset: the read DSN
    }[purpose]
    assert "accepts no writes" in str(caught.value)
    assert wanted in caught.value.hint


def test_a_leader_taking_over_during_an_episode_sends_nothing_more_and_resolves_it(
    replica_db, write_rules
):
    """The episode lives in the notification outbox on the primary: a new leader (a new
    watch, or a new lease term) finds it open, queues no second message, and queues its
    one resolve when the standby has caught up."""
    ruleset = write_rules(RULES)
    config = load_settings(dsn=replica_db.standby, primary_dsn=replica_db.primary)
    with Database(config) as db, Database(config, purpose="primary") as primary:

        def watch() -> ReplicaLagWatch:
            return ReplicaLagWatch(db, primary, max_lag=1.0, ruleset=ruleset, confirm_seconds=0)

        first, second = watch(), watch()
        _lag_after_write(replica_db, 1.5)
        assert first.check(term=1).exceeds(1.0)
        assert second.check(term=2).exceeds(1.0)  # the next leader, same episode
        assert first.check(term=3).exceeds(1.0)  # the first again, under a new term
        replica_db.standby_server.resume_replay()
        assert wait_for(lambda: not second.check(term=2).exceeds(1.0), timeout=10)
        assert wait_for(lambda: _replayed_all_of_the_primary(replica_db), timeout=10)
        assert not first.check(term=4).exceeds(1.0)
    with _connect(replica_db.primary) as conn:
        kinds = conn.execute(
            "SELECT kind FROM outbox_monitor.notifications WHERE rule = 'replica-lag' ORDER BY id"
        ).fetchall()
    assert [row["kind"] for row in kinds] == ["error", "resolved"]
