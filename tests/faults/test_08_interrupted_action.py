"""Issue 10, item 8: a database error in the middle of an action ends in one summary.

A real trigger on the outbox table raises a serialization failure on the 3rd batch (an error
of the transaction, not of one row: a row the table refuses, SQLSTATE 22, 23, 54 or P0, is
left and audited while the run goes on, ``tests/integration/test_long_event_types.py``):
the CLI prints one summary
(committed batches, run id, the error, what to do) as text or as one JSON object under
``--json`` and exits 1; the dashboard shows the same summary, never a traceback.
"""

import json
import re

import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main
from tests.ui.conftest import environment, fresh_caches, open_page  # noqa: F401 (fixtures)
from tests.ui.rendered import plain

TRIGGER = """
    CREATE FUNCTION refuse_row() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.id = {row_id} THEN
            RAISE EXCEPTION 'row % could not be serialized (test trigger)', OLD.id
                USING ERRCODE = 'serialization_failure';
        END IF;
        RETURN COALESCE(NEW, OLD);
    END
    $$;
    CREATE TRIGGER refuse_row BEFORE UPDATE OR DELETE ON integration_outbox
        FOR EACH ROW EXECUTE FUNCTION refuse_row();
"""
RUN_ID = re.compile(r"run ([0-9a-f-]{36})")


@pytest.fixture
def cli(dsn, monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "cli-tester")
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args), prog_name="outbox-monitor")


def failed_rows(conn, count: int, *, days_ago: float = 0) -> list[int]:
    """``count`` failed order.paid rows, processed ``days_ago`` days ago; their ids."""
    found = conn.execute(
        """
        INSERT INTO integration_outbox
            (event_type, aggregate_type, aggregate_id, event_key, payload, status, attempts,
             last_error, processed_at)
        SELECT 'order.paid', 'order', n::text, 'order.paid:' || n, '{}', 'failed', 10,
               'HTTP 500 upstream', now() - make_interval(days => %(days)s::int)
        FROM generate_series(1, %(count)s) AS n
        RETURNING id
        """,
        {"count": count, "days": int(days_ago)},
    ).fetchall()
    return sorted(row["id"] for row in found)


def audit_runs(conn) -> dict[str, int]:
    """Rows changed per run id, from the audit log."""
    rows = conn.execute(
        "SELECT run_id::text, sum(affected_count)::int AS n FROM outbox_monitor.audit_log "
        "GROUP BY run_id"
    ).fetchall()
    return {row["run_id"]: row["n"] for row in rows}


def statuses(conn, ids: list[int]) -> list[str]:
    found = conn.execute(
        "SELECT status FROM integration_outbox WHERE id = ANY(%s) ORDER BY id", (ids,)
    ).fetchall()
    return [row["status"] for row in found]


def test_replay_json_is_one_summary_of_the_committed_batches(cli, conn):
    ids = failed_rows(conn, 7)
    conn.execute(TRIGGER.format(row_id=ids[4]))  # batches of 2: the 5th row is in batch 3

    result = cli("replay", "--event-type", "order.paid", "--batch-size", "2", "--yes", "--json")

    assert result.exit_code == 1
    summary = json.loads(result.stdout)  # exactly one JSON object, nothing else on stdout
    assert (summary["applied"], summary["interrupted"]) == (False, True)
    assert (summary["matched"], summary["batches"], summary["changed"]) == (7, 2, 4)
    assert summary["cause"] == (
        f"row {ids[4]} could not be serialized (test trigger) (SQLSTATE 40001)"
    )
    assert summary["error"] == (
        f"replay stopped after 2 committed batches (4 of 7 previewed rows replayed), run "
        f"{summary['run_id']}: {summary['cause']}"
    )
    assert "preview again" in summary["hint"] and summary["run_id"] in summary["hint"]
    assert audit_runs(conn) == {summary["run_id"]: 4}
    assert statuses(conn, ids) == ["pending"] * 4 + ["failed"] * 3
    assert "Traceback" not in result.output


def test_prune_text_is_one_summary_on_stderr_and_exit_1(cli, conn):
    ids = failed_rows(conn, 5, days_ago=100)
    conn.execute(TRIGGER.format(row_id=ids[4]))

    result = cli(
        "prune", "--done-older-than", "30d", "--failed-older-than", "90d",
        "--batch-size", "2", "--yes",
    )  # fmt: skip

    assert result.exit_code == 1
    [summary] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    [run_id] = RUN_ID.findall(summary)
    assert summary == (
        f"error: prune stopped after 2 committed batches (4 of 5 previewed rows deleted), "
        f"run {run_id}: row {ids[4]} could not be serialized (test trigger) (SQLSTATE 40001)"
    )
    assert "Fix the cause, then preview again and confirm" in result.stderr
    assert "Traceback" not in result.output
    assert audit_runs(conn) == {run_id: 4}
    assert statuses(conn, ids) == ["failed"]  # 4 deleted, the 5th kept


def test_the_dashboard_shows_the_same_summary(open_page, conn):  # noqa: F811
    ids = failed_rows(conn, 2500)  # the dashboard's batches hold 1,000 rows
    conn.execute(TRIGGER.format(row_id=ids[2100]))
    at = open_page("actions", event_type="order.paid")
    at.button(key="actions.replay.preview_button").click().run()

    at.button(key="actions.replay.confirm").click().run()

    assert not at.exception
    [banner] = at.error
    [run_id] = audit_runs(conn)
    assert plain(banner.value) == (
        f"**Action stopped part-way** — replay stopped after 2 committed batches (2,000 of "
        f"2,500 previewed rows replayed), run {run_id}: row {ids[2100]} could not be "
        "serialized (test trigger) (SQLSTATE 40001)"
    )
    hint = " ".join(box.value for box in at.info)
    assert f"(2 committed batches, 2,000 rows) stays applied and audited under run {run_id}" in (
        hint
    )
    assert audit_runs(conn) == {run_id: 2000}
    assert statuses(conn, ids).count("pending") == 2000


VETO = """
    CREATE FUNCTION keep_row() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RETURN NULL; END $$;
    CREATE TRIGGER keep_row BEFORE UPDATE OR DELETE ON integration_outbox
        FOR EACH ROW EXECUTE FUNCTION keep_row();
"""
"""A trigger that silently keeps every row: the action runs and changes nothing."""


def test_an_action_that_applied_nothing_says_so_in_json_text_and_log(cli, conn, caplog):
    ids = failed_rows(conn, 5, days_ago=40)
    conn.execute(VETO)

    as_json = cli("prune", "--failed-older-than", "30d", "--yes", "--json")
    outcome = json.loads(as_json.stdout)
    assert (outcome["matched"], outcome["changed"], outcome["skipped"]) == (5, 0, 5)
    assert outcome["warning"].startswith("nothing was applied: every previewed row")

    text = cli("prune", "--failed-older-than", "30d", "--yes")
    assert "prune: 0 row(s) changed, 5 no longer eligible" in text.stdout
    assert "warning: nothing was applied: every previewed row" in text.stderr
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "prune run" in r.message]
    assert len(warnings) == 2 and "nothing was applied" in warnings[0].getMessage()
    assert statuses(conn, ids) == ["failed"] * 5


def test_the_dashboard_warns_when_an_action_applied_nothing(open_page, conn):  # noqa: F811
    failed_rows(conn, 3)
    conn.execute(VETO)
    at = open_page("actions", event_type="order.paid")
    at.button(key="actions.replay.preview_button").click().run()

    at.button(key="actions.replay.confirm").click().run()

    assert not at.exception and not at.success
    [warning] = [w for w in at.warning if "Replayed" in w.value]
    assert plain(warning.value).startswith(
        "Replayed 0 rows; 3 were no longer failed. Nothing was applied: every previewed row"
    )
