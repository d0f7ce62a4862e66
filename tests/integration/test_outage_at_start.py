"""Issue 29 item 13: up exactly when the database is not. `outbox-monitor scheduler` and
`outbox-monitor dashboard` (one outbox) started while the watched PostgreSQL is stopped stay
up: the scheduler serves /healthz saying the database is unreachable (200, as a fleet's
/healthz says it of an outbox), posts exactly one database-unreachable FIRING to Slack after
its threshold (one evaluation interval), keeps retrying, and posts exactly one RESOLVED once
the cluster is started; the dashboard serves (every page's outage banner: tests/ui and
tests/browser). A configuration that cannot work still stops the start: a malformed DSN
(named), and a missing table found once the database answers. The route whose Slack variable
is unset is logged with its fix said once."""

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import REPO, stuck_lock_rules, wait_for
from tests.integration.test_exporter import get
from tests.oidc_support import dashboard_command, dashboard_environment

INTERVAL = 1.0
"""The rules' evaluation interval (s): the database-unreachable threshold."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[TemporaryCluster]:
    """A cluster of this module: database ``outbox`` with the outbox (init-db), database
    ``bare`` with none; started, so that each test stops it when it means to."""
    with TemporaryCluster() as started:
        with psycopg.connect(started.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE outbox")
            conn.execute("CREATE DATABASE bare")
        with Database(load_settings(dsn=started.dsn_for("outbox"))) as db:
            init_db(db, create_table=True, create_indexes=False)
        yield started


@pytest.fixture
def stopped(cluster: TemporaryCluster) -> Iterator[TemporaryCluster]:
    """The module's cluster stopped for the test (started again at its end if it is not)."""
    cluster.pause()
    try:
        yield cluster
    finally:
        if not _answers(cluster.dsn):
            cluster.resume()


def test_pausing_a_stopped_cluster_leaves_it_stopped(stopped):
    # the session's teardown pauses its cluster, which a test may have stopped already
    assert not stopped.is_running()
    stopped.pause()
    assert not stopped.is_running() and not _answers(stopped.dsn)


def _answers(dsn: str) -> bool:
    try:
        psycopg.connect(dsn, connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


def scheduler_env(tmp_path: Path, dsn: str, **more: str) -> dict[str, str]:
    """A scheduler's environment: ``dsn``, alerts.yml evaluated every ``INTERVAL``
    (route oncall at ``SLACK_WEBHOOK_URL`` when ``more`` sets it), samples every second."""
    (tmp_path / "alerts.yml").write_text(stuck_lock_rules(f"{INTERVAL:g}s"))
    env = dashboard_environment(
        tmp_path, {"dsn": dsn, "rules": str(tmp_path / "alerts.yml"), "sample_interval": "1"}
    )
    env.update(more)
    return env


def unreachable_messages(sink: SlackSink) -> list[str]:
    """The first lines of the database-unreachable messages Slack received, in order."""
    lines = [message["text"].splitlines()[0] for message in sink.messages()]
    return [line for line in lines if "database-unreachable" in line]


def test_a_scheduler_started_in_an_outage_alerts_once_and_resolves(stopped, slack_sink, tmp_path):
    port = free_port()
    env = scheduler_env(
        tmp_path, stopped.dsn_for("outbox"), SLACK_WEBHOOK_URL=slack_sink.webhook_url
    )
    log = tmp_path / "scheduler.log"
    command = dashboard_command("scheduler", "--metrics-port", str(port))
    with log.open("w") as output:
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=REPO, env=env, stderr=output)
    url = f"http://127.0.0.1:{port}/healthz"
    try:

        def healthz_says_unreachable() -> bool:
            try:
                code, text = get(url)
            except OSError:
                return False
            return code == 200 and text.startswith("ok: database unreachable: cannot connect")

        assert wait_for(healthz_says_unreachable, timeout=30), log.read_text()[-3000:]
        assert wait_for(lambda: unreachable_messages(slack_sink), timeout=30), log.read_text()
        posted_after = time.monotonic() - started
        [firing] = unreachable_messages(slack_sink)
        assert "resolved" not in firing.lower(), firing
        # retrying, never a second message for the same outage
        assert not wait_for(lambda: len(unreachable_messages(slack_sink)) > 1, timeout=3 * INTERVAL)
        assert process.poll() is None, log.read_text()[-3000:]

        stopped.resume()
        back = time.monotonic()
        assert wait_for(lambda: len(unreachable_messages(slack_sink)) == 2, timeout=30), (
            log.read_text()[-3000:]
        )
        resolved_after = time.monotonic() - back
        assert "resolved" in unreachable_messages(slack_sink)[1].lower()
        assert wait_for(lambda: get(url) == (200, "ok"), timeout=20), get(url)
        assert not wait_for(lambda: len(unreachable_messages(slack_sink)) > 2, timeout=3 * INTERVAL)
        print(
            f"outage at start → database-unreachable in Slack: {posted_after:.2f} s after the "
            f"process started (threshold {INTERVAL:g} s); resolved {resolved_after:.2f} s "
            "after the cluster started"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    text = log.read_text()
    assert process.returncode == 0, text[-3000:]
    assert "unreachable at start" in text


def test_a_refused_login_is_said_as_one_not_as_an_unreachable_database(
    cluster, slack_sink, tmp_path
):
    """A hostile pass of issue 29: a wrong login read "cannot reach the database" in Slack.
    The process stays up (a password may be mid-rotation) and says what the server said."""
    port = free_port()
    dsn = cluster.dsn_for("outbox").replace("postgres@", "nobody@", 1)
    assert "nobody@" in dsn
    env = scheduler_env(tmp_path, dsn, SLACK_WEBHOOK_URL=slack_sink.webhook_url)
    log = tmp_path / "scheduler.log"
    command = dashboard_command("scheduler", "--metrics-port", str(port))
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=REPO, env=env, stderr=output)
    try:
        assert wait_for(lambda: unreachable_messages(slack_sink), timeout=30), log.read_text()
        [message] = [m for m in slack_sink.messages() if "database-unreachable" in m["text"]]
        assert "refuses outbox-monitor's login: check its user and password" in message["text"]
        assert "cannot reach" not in message["text"]
        assert 'role \\"nobody\\" does not exist' in json.dumps(message["blocks"])
        assert process.poll() is None, log.read_text()[-3000:]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    assert "database refuses the login" in log.read_text()


def test_the_unset_slack_variable_is_said_once(cluster, tmp_path):
    """The route whose variable is unset is logged on one line with its fix said once (its
    error's text holds the hint: the line printed both, "Export … Export …")."""
    env = scheduler_env(tmp_path, cluster.dsn_for("outbox"))
    env.pop("SLACK_WEBHOOK_URL", None)
    process = subprocess.Popen(
        dashboard_command("scheduler", "--metrics-port", "0"),
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        while not lines or "scheduler started" not in lines[-1]:
            lines.append(process.stderr.readline())
            assert lines[-1], "the scheduler ended before it started:\n" + "".join(lines)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    text = "".join(lines)
    assert text.count("Export SLACK_WEBHOOK_URL=") == 1, text
    [line] = [line for line in lines if "NOT sent by this process" in line]
    assert "which is not set. Export SLACK_WEBHOOK_URL=<incoming-webhook URL>" in line, line


@pytest.mark.parametrize("service", ["scheduler", "dashboard"])
def test_a_malformed_dsn_still_stops_the_start_naming_it(tmp_path, service):
    env = scheduler_env(tmp_path, "postgresql://monitor@127.0.0.1:99999/app")
    command = [service, "--metrics-port", "0"] if service == "scheduler" else [service]
    result = subprocess.run(
        dashboard_command(*command, *(["--port", str(free_port())] * (service == "dashboard"))),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr  # a configuration error, as every one
    assert 'OUTBOX_MONITOR_DSN: connection is bad: invalid port number: "99999"' in result.stderr


def test_a_missing_table_found_when_the_database_answers_stops_the_scheduler(stopped, tmp_path):
    """Started in the outage against a database without the outbox: it waits; once the
    cluster answers, the table check it could not run at start stops it with exit 1."""
    env = scheduler_env(tmp_path, stopped.dsn_for("bare"))
    process = subprocess.Popen(
        dashboard_command("scheduler", "--metrics-port", "0"),
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert not wait_for(lambda: process.poll() is not None, timeout=3)  # up in the outage
        stopped.resume()
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)
    assert process.returncode == 1, stderr[-3000:]
    assert "the outbox table public.integration_outbox does not exist" in stderr
    assert "did you mean" not in stderr  # bare has no table with the outbox's columns


@pytest.mark.parametrize("with_scheduler", [False, True], ids=["alone", "with-scheduler"])
def test_a_dashboard_started_in_an_outage_serves(stopped, tmp_path, with_scheduler):
    """Served, a warning naming the outage; with --with-scheduler its scheduler's /healthz
    says the database is unreachable too."""
    port, metrics_port = free_port(), free_port()
    env = scheduler_env(
        tmp_path, stopped.dsn_for("outbox"), OUTBOX_MONITOR_METRICS_PORT=str(metrics_port)
    )
    log = tmp_path / "dashboard.log"
    flags = ["--with-scheduler"] if with_scheduler else []
    with log.open("w") as output:
        process = subprocess.Popen(
            dashboard_command("dashboard", "--port", str(port), *flags),
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:

        def answers(url: str, wanted) -> bool:
            try:
                return wanted(get(url))
            except OSError:
                return False

        health = f"http://127.0.0.1:{port}/_stcore/health"
        assert wait_for(lambda: answers(health, lambda got: got == (200, "ok")), timeout=90), (
            log.read_text()[-3000:]
        )
        if with_scheduler:
            healthz = f"http://127.0.0.1:{metrics_port}/healthz"

            def said(got: tuple[int, str]) -> bool:
                return got[0] == 200 and got[1].startswith("ok: database unreachable: ")

            assert wait_for(lambda: answers(healthz, said), timeout=30), log.read_text()[-3000:]
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    text = log.read_text()
    assert "warning: cannot connect to " in text, text[-3000:]
    assert "every page says the database is unreachable" in text
