"""The dashboard on a real streaming hot standby (issue 14 item 4): every page works read-only
and shows the replay lag in a banner; a lagging standby is a warning; an action through the
standby is refused and names the setting to change."""

import os
import time

import psycopg
import pytest
from conftest import ACTOR, DASHBOARD, TIMEOUT_SECONDS
from rendered import plain
from streamlit.testing.v1 import AppTest

from tests.conftest import Rows

PAGES = ("overview", "events", "dead_letters", "alerts", "controls", "actions", "timeline")


@pytest.fixture
def standby_env(monkeypatch: pytest.MonkeyPatch, replica_db) -> pytest.MonkeyPatch:
    """Only this test's settings: the standby as the read DSN, a fixed actor."""
    for name in list(os.environ):
        if name.startswith("OUTBOX_MONITOR_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", replica_db.standby)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", ACTOR)
    return monkeypatch


def open_page(page: str, **query: str) -> AppTest:
    at = AppTest.from_file(DASHBOARD, default_timeout=TIMEOUT_SECONDS)
    at.query_params.update(query)
    return at.switch_page(f"pages/{page}.py").run()


def banner(at: AppTest) -> str:
    found = [plain(e.value) for kind in ("info", "warning") for e in getattr(at, kind)]
    replica = [text for text in found if "Read replica" in text]
    assert len(replica) == 1, found
    return replica[0]


def test_every_page_shows_the_standby_and_its_lag(standby_env, replica_db):
    with psycopg.connect(replica_db.primary, autocommit=True) as conn:
        conn.row_factory = psycopg.rows.dict_row
        rows = Rows(conn)
        rows.add(created_ago=120)
        rows.add_failed(event_type="invoice.sent")
    replica_db.standby_server.wait_for_database(replica_db.name)
    for page in PAGES:
        at = open_page(page)
        assert not at.exception, page
        assert not at.error, (page, [e.value for e in at.error])
        text = banner(at)
        assert text.startswith("**Read replica** — these figures come from the hot standby")
        assert "replay lag **0.0s**" in text, text
        assert "Operator actions are refused here: OUTBOX_MONITOR_ACTIONS_DSN is not set" in text
    tiles = {m.label: m.value for m in open_page("overview").metric}
    assert tiles["Queue depth"] == "1" and tiles["Failed (24 h)"] == "1"


def test_a_lagging_standby_is_a_warning_with_its_lag(standby_env, replica_db):
    standby_env.setenv("OUTBOX_MONITOR_MAX_REPLICA_LAG", "1s")
    standby_env.setenv("OUTBOX_MONITOR_ACTIONS_DSN", replica_db.primary)
    replica_db.standby_server.pause_replay()
    with psycopg.connect(replica_db.primary, autocommit=True) as conn:
        conn.row_factory = psycopg.rows.dict_row
        Rows(conn).add(created_ago=5)
    time.sleep(2)
    at = open_page("overview")
    assert not at.exception
    [warning] = [w for w in at.warning if "Read replica lagging" in w.value]
    text = plain(warning.value)
    assert "whose replay lags **" in text and "OUTBOX_MONITOR_MAX_REPLICA_LAG (1.0s)" in text
    lag = float(text.split("whose replay lags **")[1].split("s**")[0])
    assert lag >= 2.0
    assert "Operator actions are refused" not in text  # the actions DSN is the primary


def test_a_replay_through_the_standby_is_refused_naming_the_setting(standby_env, replica_db):
    with psycopg.connect(replica_db.primary, autocommit=True) as conn:
        conn.row_factory = psycopg.rows.dict_row
        failed = Rows(conn).add_failed()
    replica_db.standby_server.wait_for_database(replica_db.name)
    at = open_page("actions", event_type="%")
    at.button(key="actions.replay.preview_button").click().run()
    at = at.button(key="actions.replay.confirm").click().run()
    assert not at.exception
    (error,) = at.error
    assert plain(error.value).startswith("**Read-only database** — ")
    assert "accepts no writes" in plain(error.value)
    hint = " ".join(i.value for i in at.info)
    assert "Set OUTBOX_MONITOR_ACTIONS_DSN (operator actions) and" in hint
    with psycopg.connect(replica_db.primary) as conn:
        status = conn.execute("SELECT status FROM integration_outbox WHERE id = %s", (failed,))
        assert status.fetchone()[0] == "failed"
