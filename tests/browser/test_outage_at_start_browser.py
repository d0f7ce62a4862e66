"""Issue 29 item 13 in a real browser: `outbox-monitor dashboard` (one outbox) started while
its PostgreSQL is stopped serves; the Overview and the Events page show their heading with
the "Database unreachable" banner under it; once the cluster is started the Overview's
figures come back by themselves, the banner gone."""

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest
from playwright.sync_api import Page, expect

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import REPO
from tests.browser_support import START_TIMEOUT_SECONDS, healthy
from tests.oidc_support import dashboard_command, dashboard_environment

pytestmark = pytest.mark.browser


@pytest.fixture
def cluster() -> Iterator[TemporaryCluster]:
    """A cluster with an outbox database holding one pending row (init-db done)."""
    with TemporaryCluster() as started:
        with psycopg.connect(started.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE outbox")
        with Database(load_settings(dsn=started.dsn_for("outbox"))) as db:
            init_db(db, create_table=True, create_indexes=False)
        with psycopg.connect(started.dsn_for("outbox"), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
                "event_key, payload, created_at) VALUES ('order.paid', 'order', '1', 'k1', "
                "'{}', now() - interval '1 minute')"
            )
        yield started


def test_a_dashboard_started_in_an_outage_shows_it_and_recovers(cluster, page: Page, tmp_path):
    cluster.pause()
    port = free_port()
    env = dashboard_environment(tmp_path, {"dsn": cluster.dsn_for("outbox"), "actor": "browser"})
    log = tmp_path / "dashboard.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            dashboard_command("dashboard", "--port", str(port)),
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its Streamlit child is stopped with it
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not healthy(url):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        for path, heading in (("overview", "Overview"), ("events", "Events")):
            page.goto(f"{url}/{path}")
            expect(page.get_by_role("heading", name=heading)).to_be_visible()
            expect(page.get_by_text("Database unreachable")).to_be_visible()
            expect(page.get_by_text("The monitor reconnects by itself")).to_be_visible()

        cluster.resume()
        page.goto(f"{url}/overview")
        tile = page.locator('[data-testid="stMetric"]').filter(has_text="Queue depth")
        expect(tile.locator('[data-testid="stMetricValue"]')).to_have_text("1", timeout=60_000)
        expect(page.get_by_text("Database unreachable")).to_have_count(0)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
    assert "warning: cannot connect to " in log.read_text()
