"""Issue 29 item 13: the dashboard of one outbox started while its PostgreSQL is stopped
serves every page, each saying the outage right under its title (the "Database unreachable"
banner with its fix), none with a traceback (the process's start: tests/integration/
test_outage_at_start.py; in Chromium: tests/browser/test_outage_at_start_browser.py)."""

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from streamlit.testing.v1 import AppTest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.ui.conftest import ACTOR, DASHBOARD, TIMEOUT_SECONDS

PAGES = {
    "overview": "Overview",
    "events": "Events",
    "dead_letters": "Dead letters",
    "alerts": "Alerts",
    "controls": "Controls",
    "health": "Health",
    "workers": "Workers",
    "timeline": "Timeline",
    "actions": "Actions",
}
"""Every page of one outbox's dashboard (``dashboard.py``'s navigation) and its title."""


@pytest.fixture(scope="module")
def stopped_dsn() -> Iterator[str]:
    """The DSN of an outbox database (init-db done) whose cluster is stopped."""
    with TemporaryCluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE outbox")
        dsn = cluster.dsn_for("outbox")
        with Database(load_settings(dsn=dsn)) as db:
            init_db(db, create_table=True, create_indexes=False)
        cluster.pause()
        yield dsn


def test_the_pages_list_is_the_navigation():
    text = Path(DASHBOARD).read_text()
    listed = {
        line.split('"pages/')[1].split('.py"')[0] for line in text.splitlines() if '"pages/' in line
    }
    assert listed - {"fleet"} == set(PAGES)  # the Fleet page is a fleet's (several outboxes)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_says_the_outage_under_its_title(stopped_dsn, monkeypatch, page):
    for name in list(os.environ):
        if name.startswith("OUTBOX_MONITOR_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", stopped_dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", ACTOR)
    at = AppTest.from_file(DASHBOARD, default_timeout=TIMEOUT_SECONDS)
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [(child.type, str(getattr(child, "value", ""))) for child in at.main.children.values()]
    kinds = [kind for kind, _ in shown if kind != "html"]  # the stylesheet's script comes first
    assert kinds[:3] == ["title", "error", "info"], shown[:5]
    title, banner, fix = [value for kind, value in shown if kind != "html"][:3]
    assert title == PAGES[page]
    assert banner.startswith("**Database unreachable** — cannot connect to "), banner
    assert "The monitor reconnects by itself" in fix
