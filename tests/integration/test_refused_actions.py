"""Issue 29 item 5: a refused action (a person whose role on the outbox acted on is below
operator) leaves a WARNING line and a rate-limited ``refused`` audit row, written through the
outbox's ``refused`` writer by the actions login (never the viewer's); the scheduler exports
the count on /metrics."""

import logging

import psycopg
import pytest

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.reap import preview_reap
from outbox_monitor.actions.run import apply
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import AccessDenied
from outbox_monitor.flow.controls import pause
from outbox_monitor.store.audited_writers import writer_name
from outbox_monitor.store.db import Database
from tests.integration.test_exporter import running_exporter, scrape, single

VIEWER = Identity("op@example.com", Role.viewer, "proxy")


def refused_rows(conn) -> list[dict]:
    return conn.execute(
        "SELECT actor, filter, affected_count, db_login, host(client_addr) AS addr "
        "FROM outbox_monitor.audit_log WHERE action = 'refused' ORDER BY id"
    ).fetchall()


def refusals(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith("refused:")
    ]


def test_a_refused_reap_is_logged_and_audited_once_a_minute(dsn, logins, rows, conn, caplog):
    stuck = rows.add(status="processing", created_ago=3600, locked_ago=30 * 60)
    settings = load_settings(dsn=dsn, actions_dsn=logins.dsn(dsn, logins.actions))
    caplog.set_level(logging.WARNING, logger="outbox_monitor.actions")

    with Database(settings, purpose="actions") as db:
        preview = preview_reap(db)
        for _ in range(2):  # the second within the minute is folded into the first's row
            with pytest.raises(AccessDenied, match="needs the operator role"):
                apply(db, preview, actor=VIEWER)
        with pytest.raises(AccessDenied):
            pause(db, "order.%", actor=VIEWER)

    assert rows.get(stuck)["status"] == "processing"
    [first, second] = refused_rows(conn)
    assert first == {
        "actor": "op@example.com",
        "filter": {"action": "reap"},
        "affected_count": 0,
        "db_login": logins.actions,
        "addr": "127.0.0.1",
    }
    assert second["filter"] == {"action": "pause"}
    lines = refusals(caplog)
    assert len(lines) == 3
    assert lines[0].startswith(
        "refused: op@example.com (viewer) may not reap on outbox public.integration_outbox "
        "(audit row "
    )
    assert lines[1].endswith("(audit row folded by the rate limit)")
    assert "may not pause on outbox public.integration_outbox" in lines[2]


def test_a_flood_of_refusals_writes_at_most_30_rows_a_minute(dsn, logins, conn):
    refused = f'outbox_monitor."{writer_name("refused", "public", "integration_outbox")}"'
    with psycopg.connect(logins.dsn(dsn, logins.actions), autocommit=True) as ops:
        written = [
            ops.execute(f"SELECT {refused}(%s, 'reap')", (f"p{n}@example.com",)).fetchone()[0]
            for n in range(40)
        ]
    assert sum(1 for w in written if w is not None) == 30
    assert len(refused_rows(conn)) == 30


def test_without_an_operator_login_the_refusal_is_still_logged(dsn, logins, rows, conn, caplog):
    """A dashboard whose actions DSN is the read login: the viewer may not write even a
    refused row; the WARNING line says so."""
    settings = load_settings(dsn=logins.dsn(dsn, logins.read))
    caplog.set_level(logging.WARNING, logger="outbox_monitor.actions")
    with Database(settings) as db, pytest.raises(AccessDenied):
        apply(db, preview_reap(db), actor=VIEWER)
    [line] = refusals(caplog)
    assert "may not reap" in line and "no audit row:" in line and "lacks EXECUTE" in line
    assert refused_rows(conn) == []


def test_the_scheduler_exports_the_refused_count(dsn, db, logins, conn):
    with psycopg.connect(logins.dsn(dsn, logins.actions), autocommit=True) as ops:
        refused = f'outbox_monitor."{writer_name("refused", "public", "integration_outbox")}"'
        for action in ("reap", "replay", "prune"):
            ops.execute(f"SELECT {refused}('op@example.com', %s)", (action,))
    with running_exporter(db) as run:
        samples = scrape(run.url)
    assert single(samples, "outbox_monitor_refused_actions") == 3
    assert len(refused_rows(conn)) == 3
