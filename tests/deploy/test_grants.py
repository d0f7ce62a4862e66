"""The documented grants for an existing database (docs/deploy.md, "Against an existing
database"), run as written: init-db as the outbox table's owner, that page's SQL block (which is
exactly what `outbox-monitor init-db --print-grants` prints), then each role runs what it
is meant to — and is refused what it is not."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from tests.conftest import Rows

DEPLOY_PAGE = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
CLI = str(Path(sys.prefix) / "bin" / "outbox-monitor")


def documented_grants() -> str:
    """The ```sql block of docs/deploy.md's "Against an existing database" section."""
    text = DEPLOY_PAGE.read_text()
    section = text.split("## Against an existing database", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sql\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "one SQL block of grants"
    return blocks[0]


def run_as(role: str, dsn_for_role: str, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "OUTBOX_MONITOR_DSN": dsn_for_role,
        "OUTBOX_MONITOR_ACTOR": role,
    }
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def grants_db(pg_cluster: TemporaryCluster, tmp_path_factory: pytest.TempPathFactory):
    """A new database whose outbox belongs to ``app_owner``, who ran init-db and the
    documented grants; returns ``dsn_as(role)``. Roles are cluster-wide: once per session."""
    name = "grants_documented"
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as su:
        su.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    empty_dsn = pg_cluster.dsn_for(name)
    tmp_path = tmp_path_factory.mktemp("grants")

    def dsn_as(role: str) -> str:
        return f"postgresql://{role}@127.0.0.1:{pg_cluster.port}/{name}"

    with psycopg.connect(empty_dsn, autocommit=True) as su:
        exists = su.execute("SELECT 1 FROM pg_roles WHERE rolname = 'app_owner'").fetchone()
        if exists:
            pytest.fail("the grants test runs once per cluster (roles are cluster-wide)")
        su.execute("CREATE ROLE app_owner LOGIN CREATEROLE")
        su.execute(f'GRANT CREATE ON DATABASE "{name}" TO app_owner')
        su.execute("GRANT CREATE ON SCHEMA public TO app_owner")
    result = run_as(
        "app_owner", dsn_as("app_owner"), "init-db", "--create-table", "--json", home=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(dsn_as("app_owner"), autocommit=True) as owner:
        owner.execute(documented_grants())
    with psycopg.connect(empty_dsn, autocommit=True) as su:
        # The logins the block's comment suggests, one per process.
        su.execute("CREATE ROLE test_viewer LOGIN IN ROLE outbox_viewer")
        su.execute("CREATE ROLE monitor_scheduler LOGIN IN ROLE outbox_scheduler")
        su.execute("CREATE ROLE monitor_dashboard LOGIN IN ROLE outbox_operator")
    return dsn_as


def test_the_documented_grants_are_what_init_db_prints(tmp_path):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    printed = subprocess.run(
        [CLI, "init-db", "--print-grants"], env=env, capture_output=True, text=True, timeout=60
    )
    as_json = subprocess.run(
        [CLI, "init-db", "--print-grants", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == documented_grants(), (
        "docs/deploy.md's grants block differs from `outbox-monitor init-db --print-grants`; "
        "paste the printed text into it"
    )
    assert json.loads(as_json.stdout)["sql"] + "\n" == printed.stdout


def test_each_role_can_do_its_job_and_no_more(grants_db, tmp_path):
    dsn_as = grants_db
    with psycopg.connect(dsn_as("app_owner"), autocommit=True, row_factory=dict_row) as owner:
        rows = Rows(owner)
        dead = rows.add(status="failed", attempts=10, last_error="HTTP 500", processed_ago=60)
        rows.add(status="pending", created_ago=30)

    viewer = run_as("test_viewer", dsn_as("test_viewer"), "status", "--json", home=tmp_path)
    assert viewer.returncode == 0, viewer.stdout + viewer.stderr
    assert json.loads(viewer.stdout)["queue_depth"] == 1
    refused = run_as(
        "test_viewer",
        dsn_as("test_viewer"),
        *("replay", "--id", str(dead), "--yes", "--json"),
        home=tmp_path,
    )
    assert refused.returncode == 1
    error = json.loads(refused.stdout)
    assert "permission denied" in error["error"].lower()
    assert (
        '"test_viewer" lacks EXECUTE on function outbox_monitor.replay__public__integration_outbox'
        in error["error"]
    )
    assert "member of outbox_operator" in error["hint"]
    assert "OUTBOX_MONITOR_ACTIONS_DSN is unset" in error["hint"]

    scheduler_refused = run_as(
        "monitor_scheduler",
        dsn_as("monitor_scheduler"),
        *("replay", "--id", str(dead), "--yes", "--json"),
        home=tmp_path,
    )
    assert scheduler_refused.returncode == 1, "the scheduler never changes the outbox"
    assert (
        "lacks EXECUTE on function outbox_monitor.replay__public__integration_outbox"
        in scheduler_refused.stdout
    )

    operator = run_as(
        "monitor_dashboard",
        dsn_as("monitor_dashboard"),
        *("replay", "--id", str(dead), "--yes", "--json"),
        home=tmp_path,
    )
    assert operator.returncode == 0, operator.stdout + operator.stderr
    assert json.loads(operator.stdout)["changed"] == 1
    with psycopg.connect(dsn_as("app_owner"), autocommit=True) as owner:
        audit = owner.execute("SELECT actor, action, affected_count FROM outbox_monitor.audit_log")
        assert audit.fetchall() == [("monitor_dashboard", "replay", 1)]


def test_the_scheduler_role_samples_and_evaluates(grants_db, tmp_path):
    dsn_as = grants_db
    port = free_port()
    log = tmp_path / "scheduler.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "OUTBOX_MONITOR_DSN": dsn_as("monitor_scheduler"),
        "OUTBOX_MONITOR_METRICS_PORT": str(port),
    }
    with log.open("wb") as output:
        process = subprocess.Popen(
            [CLI, "scheduler"], env=env, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        sampled = evaluated = healthy = False
        while time.monotonic() < deadline and not (sampled and evaluated and healthy):
            assert process.poll() is None, log.read_text()
            with psycopg.connect(dsn_as("app_owner"), autocommit=True) as owner:
                sampled = owner.execute("SELECT count(*) FROM outbox_monitor.samples").fetchone()[0]
                evaluated = owner.execute(
                    "SELECT count(*) FROM outbox_monitor.alert_instances"
                ).fetchone()[0]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    healthy = r.status == 200
            except (urllib.error.URLError, OSError):
                healthy = False
            time.sleep(0.5)
        output = log.read_text()
        assert sampled and evaluated and healthy, output
        assert "permission denied" not in output.lower(), output
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0, log.read_text()
