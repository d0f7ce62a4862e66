"""The automatic reaper's budget per run (issue 29 item 12, SPEC §4): at most N rows and at
most a share of the stuck rows, the oldest locks first, the rest left to the next run and
said so (preview, log line, audit row); what the sampler saw of each holder shown as
evidence, never as a veto; a reap by hand is not bounded. Real PostgreSQL, rows inserted
here."""

import json
import logging
import os
from datetime import datetime

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.access import SCHEDULER
from outbox_monitor.actions.reap import preview_auto_reap, preview_reap
from outbox_monitor.actions.run import apply
from outbox_monitor.cli import main
from outbox_monitor.config.settings import load_settings
from outbox_monitor.figures.worker_sightings import record_workers
from outbox_monitor.service.maintenance import reap_stuck_locks
from outbox_monitor.store.db import Database

STUCK = 1000
LOCK_TIMEOUT = 900  # the default, 15 min
MAX_ROWS = 100


def lock_age(g: int) -> int:
    """The lock age in seconds of the g-th stuck row (g = 1 … STUCK): a permutation of
    ``LOCK_TIMEOUT + 100 … LOCK_TIMEOUT + 1099`` (37 and 1,000 are coprime), so that the
    oldest locks are not the lowest ids."""
    return LOCK_TIMEOUT + 100 + (g * 37) % STUCK


def insert_stuck(conn: psycopg.Connection, count: int) -> dict[int, int]:
    """``count`` stuck rows of worker-1 in one statement; returns each row's id → g."""
    found = conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, status, attempts, locked_by, locked_at, created_at, available_at)
           SELECT 'order.paid', 'order', g::text, 'stuck:' || g, '{}', 'processing', 1,
                  'worker-1', now() - make_interval(secs => %(timeout)s + 100 + (g * 37) %% 1000),
                  now() - interval '1 day', now() - interval '1 day'
           FROM generate_series(1, %(count)s) AS g
           RETURNING id, aggregate_id""",
        {"timeout": LOCK_TIMEOUT, "count": count},
    ).fetchall()
    return {row["id"]: int(row["aggregate_id"]) for row in found}


def oldest(by_id: dict[int, int], among: set[int], count: int) -> set[int]:
    """The ``count`` ids of ``among`` with the oldest locks, by ``lock_age`` (all distinct)."""
    return set(sorted(among, key=lambda i: -lock_age(by_id[i]))[:count])


def processing(conn: psycopg.Connection) -> set[int]:
    rows = conn.execute("SELECT id FROM integration_outbox WHERE status = 'processing'")
    return {row["id"] for row in rows.fetchall()}


def reap_audits(conn: psycopg.Connection) -> list[dict]:
    return conn.execute(
        "SELECT actor, run_id, affected_count, affected_ids, filter FROM outbox_monitor.audit_log "
        "WHERE action = 'reap' ORDER BY id"
    ).fetchall()


@pytest.fixture
def budget_db(dsn):
    settings = load_settings(dsn=dsn, auto_reap_max_rows=MAX_ROWS, auto_reap_max_share="50%")
    with Database(settings) as db:
        yield db


def test_auto_reap_takes_its_row_budget_of_the_oldest_locks_and_says_what_is_left(
    budget_db, conn, caplog
):
    by_id = insert_stuck(conn, STUCK)
    caplog.set_level(logging.INFO, logger="outbox_monitor.scheduler")

    first = reap_stuck_locks(budget_db)

    expected = oldest(by_id, set(by_id), MAX_ROWS)  # min(100, ⌈0.5 × 1,000⌉) = 100
    assert first is not None and first.changed == MAX_ROWS
    assert set(first.ids) == expected
    assert processing(conn) == set(by_id) - expected
    [audit] = reap_audits(conn)  # 100 rows: one batch, one audit row
    assert audit["actor"] == SCHEDULER.name and set(audit["affected_ids"]) == expected
    assert audit["filter"]["budget"] == {
        "stuck": 1000,
        "taken": 100,
        "left": 900,
        "max_rows": 100,
        "max_share": 0.5,
        "bound": "rows",
    }
    [line] = [r for r in caplog.records if r.getMessage().startswith("reaper:")]
    assert line.levelno == logging.INFO
    assert "reaped 100 of 1000 stuck lock(s) of public.integration_outbox" in line.getMessage()
    assert "900 left for the next run (budget: 100 rows, 50 % of the stuck" in line.getMessage()

    # the second run takes the next 100 oldest of the 900 left
    caplog.clear()
    second = reap_stuck_locks(budget_db)
    assert second is not None
    assert set(second.ids) == oldest(by_id, set(by_id) - expected, MAX_ROWS)
    assert len(processing(conn)) == 800
    assert reap_audits(conn)[-1]["filter"]["budget"]["left"] == 800
    assert "reaped 100 of 900 stuck lock(s)" in caplog.text
    assert "800 left for the next run" in caplog.text


def test_auto_reap_takes_at_most_its_share_of_the_stuck_rows(budget_db, conn):
    by_id = insert_stuck(conn, 10)

    preview = preview_auto_reap(budget_db)
    result = reap_stuck_locks(budget_db)

    # min(100, ⌈0.5 × 10⌉) = 5: the share binds
    assert preview.matched == 5
    assert preview.details["budget"]["bound"] == "share"
    assert result is not None and set(result.ids) == oldest(by_id, set(by_id), 5)
    assert len(processing(conn)) == 5
    budget = reap_audits(conn)[0]["filter"]["budget"]
    assert (budget["stuck"], budget["taken"], budget["left"]) == (10, 5, 5)


def test_a_tiny_share_still_takes_one_stuck_row_per_run(dsn, conn):
    """A share at its lower bound (any share above 0 is accepted: 0.00001 % is 1e-7) rounds up
    to one row, never to none: 1e-7 × 1 stuck row is 1e-7, rounded up 1 (the 1e-6 rounding of
    the product once made it 0, so the only stuck row was never reaped, run after run)."""
    settings = load_settings(dsn=dsn, auto_reap_max_rows=MAX_ROWS, auto_reap_max_share="0.00001%")
    by_id = insert_stuck(conn, 1)
    with Database(settings) as db:
        preview = preview_auto_reap(db)
        result = reap_stuck_locks(db)

    assert preview.matched == 1
    assert result is not None and set(result.ids) == set(by_id)
    assert processing(conn) == set()
    budget = reap_audits(conn)[0]["filter"]["budget"]
    assert (budget["stuck"], budget["taken"], budget["left"]) == (1, 1, 0)


def test_a_reap_by_hand_takes_every_stuck_row_whatever_the_budget(budget_db, conn):
    by_id = insert_stuck(conn, STUCK)

    preview = preview_reap(budget_db)
    result = apply(budget_db, preview, actor=SCHEDULER)

    assert preview.matched == STUCK and result.changed == STUCK
    assert processing(conn) == set()
    assert sum(a["affected_count"] for a in reap_audits(conn)) == len(by_id)
    assert all("budget" not in a["filter"] for a in reap_audits(conn))


def test_holders_seen_by_the_sampler_are_evidence_never_a_veto(dsn, conn, rows, caplog):
    settings = load_settings(dsn=dsn, auto_reap_max_share="100%")
    # n8n-alive: 3 stuck rows, a fresh one, and two more it will ack and dead-letter
    stuck_alive = [
        rows.add(status="processing", locked_ago=LOCK_TIMEOUT + 60 * n, locked_by="n8n-alive")
        for n in (1, 2, 3)
    ]
    fresh = rows.add(status="processing", locked_ago=5, locked_by="n8n-alive")
    acked = rows.add(status="processing", locked_ago=10, locked_by="n8n-alive")
    dead = rows.add(status="processing", locked_ago=10, locked_by="n8n-alive")
    with Database(settings) as db:
        record_workers(db)  # the sampler sees n8n-alive holding six rows
        ack_at = rows.t0.replace(microsecond=0)  # both after the first pass
        fail_at = rows.t0.replace(microsecond=500_000)
        conn.execute(
            "UPDATE integration_outbox SET status = 'done', processed_at = %s, locked_at = NULL, "
            "locked_by = NULL WHERE id = %s",
            (ack_at, acked),
        )
        conn.execute(
            "UPDATE integration_outbox SET status = 'failed', processed_at = %s, "
            "locked_at = NULL, locked_by = NULL WHERE id = %s",
            (fail_at, dead),
        )
        record_workers(db)  # … and then the ack and the dead-letter
        # n8n-ghost appears after the sampler's passes: nothing known of it
        stuck_ghost = [
            rows.add(status="processing", locked_ago=LOCK_TIMEOUT + 30, locked_by="n8n-ghost")
            for _ in range(2)
        ]
        caplog.set_level(logging.INFO, logger="outbox_monitor.scheduler")

        preview = preview_auto_reap(db)
        result = reap_stuck_locks(db)

    holders = {h["locked_by"]: h for h in preview.details["holders"]}
    assert holders["n8n-alive"]["rows"] == 3 and holders["n8n-alive"]["seen_by_sampler"]
    assert datetime.fromisoformat(holders["n8n-alive"]["last_ack"]) == ack_at
    assert datetime.fromisoformat(holders["n8n-alive"]["last_fail"]) == fail_at
    assert datetime.fromisoformat(holders["n8n-alive"]["last_claim"]) == rows.at(5)
    assert holders["n8n-ghost"] == {"locked_by": "n8n-ghost", "rows": 2, "seen_by_sampler": False}
    # never a veto: the live worker's expired locks are reaped with the unknown one's
    assert result is not None and set(result.ids) == {*stuck_alive, *stuck_ghost}
    assert rows.get(fresh)["status"] == "processing"
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reaper:")]
    alive = holders["n8n-alive"]
    assert (
        f"n8n-alive: 3 rows; the sampler last saw it holding rows at "
        f"{datetime.fromisoformat(alive['last_seen_holding']).isoformat(timespec='seconds')}"
    ) in line
    for name, moment in (("last ack", alive["last_ack"]), ("last dead-letter", alive["last_fail"])):
        assert f"{name}: {datetime.fromisoformat(moment).isoformat(timespec='seconds')}" in line
    assert "n8n-ghost: 2 rows; never seen by the sampler" in line
    audit = reap_audits(conn)[0]["filter"]
    assert {h["locked_by"]: h["seen_by_sampler"] for h in audit["holders"]} == {
        "n8n-alive": True,
        "n8n-ghost": False,
    }


@pytest.fixture
def budget_env(dsn, monkeypatch):
    """The environment of a CLI or dashboard run on ``dsn`` with a budget of 100 rows / 50 %."""
    for name in list(os.environ):
        if name.startswith("OUTBOX_MONITOR_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "ops")
    monkeypatch.setenv("OUTBOX_MONITOR_AUTO_REAP_MAX_ROWS", str(MAX_ROWS))
    monkeypatch.setenv("OUTBOX_MONITOR_AUTO_REAP_MAX_SHARE", "50%")


def test_reap_budget_cli_previews_and_runs_one_budgeted_run(budget_env, conn):
    by_id = insert_stuck(conn, 300)
    runner = CliRunner()

    dry = runner.invoke(main, ["reap", "--budget", "--dry-run"], catch_exceptions=False)
    assert dry.exit_code == 0
    assert "reap preview: 100 row(s) match" in dry.stdout
    assert (
        "takes 100 of 300 stuck rows, 200 left for the next run (budget: 100 rows, 50 % of "
        "the stuck; the rows bound this run)"
    ) in dry.stdout
    assert "holder worker-1: 100 rows; never seen by the sampler" in dry.stdout
    assert len(processing(conn)) == 300  # a dry run changes nothing

    run = runner.invoke(main, ["reap", "--budget", "--yes", "--json"], catch_exceptions=False)
    payload = json.loads(run.stdout)
    assert payload["changed"] == 100 and payload["details"]["budget"]["left"] == 200
    assert {int(i) for i in payload["ids"]} == oldest(by_id, set(by_id), 100)
    assert len(processing(conn)) == 200

    refused = runner.invoke(main, ["reap", "--budget", "--event-type", "order.paid"])
    assert refused.exit_code == 2 and "drop --lock-timeout and --event-type" in refused.output
