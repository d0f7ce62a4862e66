"""Issue 10 item 1: every duration setting takes the documented forms
(docs/reference/configuration.md);
a setting that cannot be parsed stops the process at start, naming the variable, with a
non-zero exit (never "run crippled"); ``/healthz`` reports this process — its configuration
and its loops — and stays 200 through a Slack or database outage (those show in ``/metrics``
and Slack).

The scheduler runs as its own process (``python -m outbox_monitor scheduler``) against the
real Postgres of the suite and the local Slack sink.
"""

import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from outbox_monitor.config.settings import ENV_PREFIX, load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.errors import ConfigError, QueryTimeout
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.service.jobs import SAMPLER_JOB_ID
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import drain, rules_file, subprocess_env, wait_for

REPO = Path(__file__).resolve().parents[2]
RULES = """
version: 1
defaults: {interval: 0.5s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h}
rules:
  - {name: stuck-lock, metric: stuck_locks, op: ">", threshold: 0, route: oncall}
"""
START_SECONDS = 30
"""A refused start must end within this (it takes ≈ 1-3 s; the machine is shared)."""


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthz(port: int) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None


def documented_duration_variables() -> dict[str, str]:
    """``{variable: default}`` of the configuration reference's table rows (generated from
    ``Settings``, docs/reference/configuration.md) whose default is a duration (``10s``,
    ``15m``, ``1h``, ``7d``)."""
    found = {}
    for line in (REPO / "docs" / "reference" / "configuration.md").read_text().splitlines():
        row = re.match(r"^\| `(OUTBOX_MONITOR_\w+)` \| [^|]* \| `(\d+[smhd])` \|", line)
        if row:
            found[row.group(1)] = row.group(2)
    return found


def test_every_documented_duration_setting_takes_seconds_minutes_and_plain_numbers(monkeypatch):
    variables = documented_duration_variables()
    assert "OUTBOX_MONITOR_SLACK_TIMEOUT" in variables
    for name in list(variables):
        monkeypatch.delenv(name, raising=False)
    # retentions of a day at least (the audit log, alert history, breaker log) take days
    daily = {name for name in variables if variables[name].endswith("d") and "RETENTION" in name}
    daily.discard("OUTBOX_MONITOR_SAMPLE_RETENTION")  # samples may be kept for minutes
    short = {name: variables[name] for name in variables if name not in daily}
    forms = {
        "short": (("10s", 10.0), ("1m", 60.0), ("45", 45.0), ("2.5", 2.5)),
        "daily": (("2d", 172800.0), ("48h", 172800.0), ("172800", 172800.0)),
    }
    for group, names in (("short", short), ("daily", daily)):
        for written, seconds in forms[group]:
            for name in names:
                monkeypatch.setenv(name, written)
            settings = load_settings()
            read = {
                name: getattr(settings, name.removeprefix(ENV_PREFIX).lower()) for name in names
            }
            assert read == dict.fromkeys(names, seconds), written
    print(f"\n{len(variables)} duration settings read alike: {', '.join(sorted(variables))}")


def scheduler_process(env: dict[str, str], rules: Path, port: int, log: Path) -> subprocess.Popen:
    with log.open("wb") as output:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "outbox_monitor",
                "scheduler",
                "--rules",
                str(rules),
                "--metrics-port",
                str(port),
            ],
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def test_scheduler_with_a_10s_timeout_sends_and_healthz_stays_200_while_slack_fails(
    dsn, conn, rows, tmp_path, slack_sink: SlackSink
):
    port = free_port()
    log = tmp_path / "scheduler.log"
    env = subprocess_env(
        dsn, OUTBOX_MONITOR_SLACK_TIMEOUT="10s", SLACK_WEBHOOK_URL=slack_sink.webhook_url
    )
    process = scheduler_process(env, rules_file(tmp_path, RULES), port, log)
    try:
        rows.add(status="processing", created_ago=3600, locked_ago=3600)  # stuck lock
        arrived = wait_for(lambda: slack_sink.messages() or process.poll() is not None, 60)
        assert slack_sink.messages(), log.read_text()
        assert "FIRING" in slack_sink.messages()[0]["text"].upper()
        assert arrived and process.poll() is None
        # Slack fails every request now; the resolve keeps the sender trying
        slack_sink.fail_next(10_000, status=500)
        drain(conn)
        answers = []
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            answers.append(healthz(port))
            time.sleep(0.25)
        failed = [r for r in slack_sink.requests if r.status == 500]
        print(f"\n/healthz answered {len(answers)} times during {len(failed)} Slack 500s")
        assert failed, "the sender did not try Slack during the outage"
        assert set(answers) == {(200, "ok")}, answers
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
    assert code == 0, log.read_text()
    assert "NOT sent" not in log.read_text()


@pytest.mark.parametrize(
    ("variable", "value", "command"),
    [
        ("OUTBOX_MONITOR_SLACK_TIMEOUT", "ten", ["scheduler"]),
        ("OUTBOX_MONITOR_SLACK_TIMEOUT", "ten", ["dashboard", "--with-scheduler", "--port"]),
        ("OUTBOX_MONITOR_SLACK_TIMEOUT", "ten", ["demo", "--port"]),
        ("OUTBOX_MONITOR_DASHBOARD_URL", "monitor.example.com", ["scheduler"]),
        ("SLACK_WEBHOOK_URL", "hooks.slack.com/services/T0/B0/SeCrEt0123456789", ["scheduler"]),
        ("OUTBOX_MONITOR_RULES", "/nonexistent/alerts.yml", ["scheduler"]),
        # past a day: a browser timer would overflow (setInterval's 2^31 - 1 ms ≈ 24.8 days)
        ("OUTBOX_MONITOR_REFRESH", "25d", ["dashboard", "--port"]),
        ("OUTBOX_MONITOR_OUTAGE_RETRY", "25d", ["dashboard", "--port"]),
    ],
)
def test_an_unparseable_setting_stops_the_process_at_start_naming_it(
    dsn, tmp_path, slack_sink, variable, value, command
):
    env = subprocess_env(
        dsn,
        HOME=str(tmp_path),
        SLACK_WEBHOOK_URL=slack_sink.webhook_url,
        OUTBOX_MONITOR_METRICS_PORT=str(free_port()),
    )
    env[variable] = value
    argv = [sys.executable, "-m", "outbox_monitor", *command]
    if command[-1] == "--port":
        argv.append(str(free_port()))
    started = time.monotonic()
    try:
        result = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=START_SECONDS
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"{' '.join(command)} with {variable}={value} still ran after {START_SECONDS} s: "
            "it runs crippled instead of refusing to start"
        )
    seconds = time.monotonic() - started
    print(
        f"\n{' '.join(command[:2])} with {variable}={value!r}: exit {result.returncode} "
        f"after {seconds:.1f} s"
    )
    assert result.returncode != 0
    assert variable in result.stderr, result.stderr
    assert "SeCrEt0123456789" not in result.stderr + result.stdout
    assert slack_sink.messages() == []


def test_alerts_test_takes_the_documented_timeout_form(dsn, tmp_path, slack_sink):
    env = subprocess_env(
        dsn, SLACK_WEBHOOK_URL=slack_sink.webhook_url, OUTBOX_MONITOR_SLACK_TIMEOUT="10s"
    )
    result = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "alerts", "test"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert len(slack_sink.messages()) == 1


def test_healthz_reports_this_process_not_the_database():
    """A database outage leaves /healthz 200, saying it (and outbox_monitor_up 0); a loop
    that no longer runs turns it 503, naming the job."""
    with TemporaryCluster() as cluster:
        settings = load_settings(dsn=cluster.dsn, sample_interval=1)
        with Database(settings) as db:
            init_db(db, create_table=True, create_indexes=False)
            status = SchedulerStatus()
            scheduler = build_scheduler(db, blocking=False, status=status)
            scheduler.start()
            try:
                with MetricsServer(db, status, port=0) as server:
                    assert wait_for(lambda: healthz(server.port) == (200, "ok"), 10)
                    # the retention job's first run (at start) done before the outage: a run that
                    # the outage fails leaves a notice (200 "ok: …") until the next, an hour on
                    assert wait_for(lambda: status.health()[1]["retention"] is not None, 30)
                    assert status.health()[1]["retention"]["error"] is None
                    cluster.pause()
                    try:
                        answers = []
                        deadline = time.monotonic() + 5  # 5 sample intervals
                        while time.monotonic() < deadline:
                            answers.append(healthz(server.port))
                            time.sleep(0.25)
                        with urllib.request.urlopen(server.url + "/metrics", timeout=20) as r:
                            metrics = r.read().decode()
                    finally:
                        cluster.resume()
                    # 200 (a restart cannot fix it), saying so once a job met the outage, as
                    # a fleet's /healthz names an unreachable outbox (issue 29 item 13)
                    assert {code for code, _ in answers} == {200}, answers
                    assert answers[-1][1].startswith("ok: database unreachable: "), answers
                    assert "outbox_monitor_up 0.0" in metrics
                    scheduler.pause_job(SAMPLER_JOB_ID)
                    code, body = healthz(server.port)
                    assert code == 503 and f"without a next run: {SAMPLER_JOB_ID}" in body
                    scheduler.resume_job(SAMPLER_JOB_ID)
                    # the notice goes with the first job that reaches the database again
                    assert wait_for(lambda: healthz(server.port) == (200, "ok"), 20)
            finally:
                scheduler.shutdown(wait=True)


@pytest.mark.parametrize(
    ("variable", "value", "command"),
    [
        ("OUTBOX_MONITOR_METRICS_ADDRESS", "nan", ["scheduler"]),
        ("OUTBOX_MONITOR_METRICS_ADDRESS", "1.2.3.999", ["scheduler"]),
        ("OUTBOX_MONITOR_METRICS_ADDRESS", "10.9.9.9", ["scheduler"]),
        ("OUTBOX_MONITOR_METRICS_ADDRESS", "10.9.9.9", ["dashboard", "--with-scheduler"]),
        ("OUTBOX_MONITOR_METRICS_PORT", "in use", ["scheduler"]),
        ("SLACK_WEBHOOK_URL", "http://[::1/services/T0/B0/SeCrEt0123456789", ["scheduler"]),
    ],
)
def test_a_metrics_address_or_slack_url_that_cannot_be_used_stops_the_start(
    dsn, tmp_path, variable, value, command
):
    """/metrics and /healthz that cannot be served (an address that is no address, one of
    another host, a port in use) and a Slack URL that urlsplit rejects: exit 2 within
    seconds, the variable named, no traceback (the scheduler ran without /metrics and
    /healthz; the URL gave a raw ValueError traceback)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = subprocess_env(
            dsn,
            HOME=str(tmp_path),
            OUTBOX_MONITOR_RULES=str(rules_file(tmp_path, RULES)),
            SLACK_WEBHOOK_URL="http://127.0.0.1:9/services/T0/B0/x",
            OUTBOX_MONITOR_METRICS_PORT=str(free_port()),
        )
        env[variable] = str(taken.getsockname()[1]) if value == "in use" else value
        argv = [sys.executable, "-m", "outbox_monitor", *command]
        if command[0] == "dashboard":
            argv += ["--port", str(free_port())]
        started = time.monotonic()
        try:
            result = subprocess.run(
                argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=START_SECONDS
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{' '.join(command)} with {variable}={value} still ran after 30 s")
    seconds = time.monotonic() - started
    print(
        f"\n{command[0]} with {variable}={value!r}: exit {result.returncode} after {seconds:.1f} s"
    )
    assert result.returncode == 2, result.stderr
    assert variable in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert "SeCrEt0123456789" not in result.stderr + result.stdout


@pytest.mark.parametrize("seconds", [0.0004, 0.0015])
def test_a_monitor_query_always_runs_under_a_statement_timeout(dsn, monkeypatch, seconds):
    """Postgres takes statement_timeout in whole milliseconds and reads 0 as no timeout:
    ``OUTBOX_MONITOR_STATEMENT_TIMEOUT=0.0004`` became 0 and a 0.3 s query ran to its end.
    A fraction of a millisecond is rounded up, never down to 0: the query is cancelled."""
    monkeypatch.setenv(f"{ENV_PREFIX}STATEMENT_TIMEOUT", str(seconds))
    settings = load_settings(dsn=dsn)
    started = time.monotonic()
    with (
        Database(settings) as db,
        pytest.raises(QueryTimeout, match="statement timeout"),
        db.connection() as conn,
    ):
        conn.execute("SELECT pg_sleep(0.3)")
    elapsed = time.monotonic() - started
    print(f"\nstatement timeout {seconds} s: a 0.3 s query cancelled, {elapsed:.3f} s")


def test_a_statement_timeout_postgres_cannot_hold_is_refused_naming_it(monkeypatch):
    """Postgres' limit is 2,147,483,647 ms (≈ 24.8 days): a longer one is refused at load,
    not by the server at every connection."""
    monkeypatch.setenv(f"{ENV_PREFIX}STATEMENT_TIMEOUT", "30d")
    with pytest.raises(ConfigError, match=f"{ENV_PREFIX}STATEMENT_TIMEOUT"):
        load_settings()


@pytest.mark.parametrize("variable", ["LOCK_TIMEOUT", "SLACK_TIMEOUT"])
def test_a_timeout_under_a_second_is_refused_naming_it(monkeypatch, variable):
    """A lock timeout of 0.0001 s made every in-flight row stuck (auto-reap would reap them
    all); a Slack timeout of 0.0001 s made every post time out. Both were accepted."""
    monkeypatch.setenv(f"{ENV_PREFIX}{variable}", "0.0001")
    with pytest.raises(ConfigError, match=f"{ENV_PREFIX}{variable}"):
        load_settings()
    monkeypatch.setenv(f"{ENV_PREFIX}{variable}", "1s")
    assert getattr(load_settings(), variable.lower()) == 1.0
