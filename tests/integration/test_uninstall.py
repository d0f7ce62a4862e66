"""Issue 17 item 5: ``outbox-monitor uninstall`` drops the outbox_monitor schema and only
the indexes init-db created, previewed and confirmed; the users' table, rows and own
indexes stay, and a second run has nothing to drop."""

import json
from datetime import timedelta

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.partitioned import create_partitioned_outbox
from outbox_monitor.errors import ActionRefused
from outbox_monitor.store import uninstall as uninstall_module
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from outbox_monitor.store.uninstall import plan_uninstall, uninstall

PRODUCT_INDEXES = [
    "integration_outbox_clock_skew_idx",
    "integration_outbox_done_at_idx",
    "integration_outbox_failed_at_idx",
    "integration_outbox_failed_by_type_idx",
]
INDEXES = "SELECT indexname FROM pg_indexes WHERE tablename = 'integration_outbox' ORDER BY 1"
ROWS = "SELECT id, status, payload FROM public.integration_outbox ORDER BY id"
ALL_INDEXES = "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
SCHEMA = "SELECT to_regnamespace('outbox_monitor') IS NOT NULL AS present"


@pytest.fixture
def cli(dsn, monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "uninstaller")
    return lambda *args: CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_uninstall_drops_the_schema_and_its_indexes_and_keeps_the_users_table(
    cli, conn, rows, caplog
):
    for status in ("pending", "done", "failed"):
        rows.add(status=status, processed_ago=None if status == "pending" else 60)
    # The users' own: an index, and one named like the flow-control index but built by hand.
    conn.execute("CREATE INDEX outbox_payload_idx ON public.integration_outbox USING gin (payload)")
    conn.execute(
        "CREATE INDEX integration_outbox_pending_types_idx"
        " ON public.integration_outbox (event_type)"
    )
    before_rows = conn.execute(ROWS).fetchall()
    before_indexes = [row["indexname"] for row in conn.execute(INDEXES)]
    assert set(PRODUCT_INDEXES) <= set(before_indexes)

    preview = cli("uninstall", "--dry-run")
    assert preview.exit_code == 0, preview.output
    assert "schema outbox_monitor:" in preview.stdout and "audit_log" in preview.stdout
    assert [line.strip() for line in preview.stdout.splitlines() if "index " in line] == [
        f"index {name}" for name in PRODUCT_INDEXES
    ]
    unconfirmed = cli("uninstall")  # no terminal, no --yes
    assert unconfirmed.exit_code == 2 and "--yes" in unconfirmed.stderr
    assert conn.execute(SCHEMA).fetchone()["present"]

    done = cli("uninstall", "--yes", "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["applied"] and result["schema"] and result["indexes"] == PRODUCT_INDEXES
    assert "uninstall by uninstaller: dropped schema outbox_monitor: 31 table(s)" in caplog.text
    assert not conn.execute(SCHEMA).fetchone()["present"]
    assert conn.execute(ROWS).fetchall() == before_rows
    after_indexes = [row["indexname"] for row in conn.execute(INDEXES)]
    assert after_indexes == sorted(set(before_indexes) - set(PRODUCT_INDEXES))
    assert "integration_outbox_pending_types_idx" in after_indexes
    assert conn.execute("SELECT count(*) AS n FROM public.integration_idempotency").fetchone()

    again = cli("uninstall", "--yes")
    assert again.exit_code == 0 and "Nothing of outbox-monitor's to drop" in again.stdout
    assert json.loads(cli("uninstall", "--json").stdout)["nothing_to_drop"]


def test_uninstall_refuses_while_a_users_object_depends_on_the_schema(cli, conn):
    conn.execute("CREATE VIEW public.audit_report AS SELECT actor FROM outbox_monitor.audit_log")
    refused = cli("uninstall", "--yes")
    assert refused.exit_code == 1
    assert "view audit_report" in refused.stderr and "nothing was dropped" in refused.stderr
    assert conn.execute(SCHEMA).fetchone()["present"]
    assert len([r for r in conn.execute(INDEXES) if r["indexname"] in PRODUCT_INDEXES]) == 4


def test_a_fresh_install_with_flow_control_has_no_outside_dependents(cli, conn, db):
    init_db(db, flow_control=True)
    preview = json.loads(cli("uninstall", "--dry-run", "--json").stdout)
    assert preview["blockers"] == [] and preview["applied"] is False
    assert preview["indexes"] == sorted([*PRODUCT_INDEXES, "integration_outbox_pending_types_idx"])
    assert preview["functions"] > 20 and "schema_migrations" in preview["tables"]


def test_on_a_partitioned_outbox_the_parents_indexes_go_with_their_partitions(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        now = conn.execute("SELECT date_trunc('day', now())").fetchone()[0]
        bounds = [now - timedelta(days=2), now - timedelta(days=1), now + timedelta(days=1)]
        create_partitioned_outbox(conn, "public", "integration_outbox", bounds)
    with Database(load_settings(dsn=empty_dsn)) as db:
        assert init_db(db).created_indexes == [
            "integration_outbox_done_at_idx",
            "integration_outbox_failed_at_idx",
            "integration_outbox_failed_by_type_idx",
            "integration_outbox_clock_skew_idx",
        ]
        with psycopg.connect(empty_dsn) as conn:
            before = conn.execute(ALL_INDEXES).fetchall()
        plan = plan_uninstall(db)
        assert plan.indexes == PRODUCT_INDEXES and plan.partitioned == set(PRODUCT_INDEXES)
        uninstall(db, plan, actor="tester")
        assert plan_uninstall(db).empty
    with psycopg.connect(empty_dsn) as conn:
        after = conn.execute(ALL_INDEXES).fetchall()
    gone = {name for (name,) in before} - {name for (name,) in after}
    # each recommended index of the parent and its three partitions' (two ranges, default)
    purposes = ("done_at", "failed_at", "failed_by_type", "clock_skew")
    assert len(gone) == 4 * 4
    assert all(any(purpose in name for purpose in purposes) for name in gone), gone


def test_a_lock_timeout_stops_it_and_a_second_run_drops_only_what_is_left(db, dsn, monkeypatch):
    monkeypatch.setattr(uninstall_module, "DROP_LOCK_TIMEOUT_SECONDS", 0.3)
    plan = plan_uninstall(db)
    with psycopg.connect(dsn) as reader:  # a transaction holding a lock in the schema
        reader.execute("SELECT count(*) FROM outbox_monitor.audit_log")
        with pytest.raises(ActionRefused, match="dropped so far: integration_outbox_clock"):
            uninstall(db, plan, actor="tester")
    left = plan_uninstall(db)
    assert left.schema and left.indexes == []  # the indexes went, the schema stayed
    uninstall(db, left, actor="tester")
    assert plan_uninstall(db).empty


def test_an_index_an_earlier_init_db_created_goes_too(db, conn):
    # as an init-db of release ≤ 005 left it: migrations up to 005 applied before 006
    conn.execute(
        "UPDATE outbox_monitor.schema_migrations"
        " SET applied_at = applied_at - interval '1 day' WHERE version <= 5"
    )
    retired = "integration_outbox_created_at_idx"
    conn.execute(f"CREATE INDEX {retired} ON integration_outbox (created_at)")
    plan = plan_uninstall(db)
    assert plan.indexes == sorted([*PRODUCT_INDEXES, retired])
    uninstall(db, plan, actor="tester")
    left = [row["indexname"] for row in conn.execute(INDEXES)]
    assert not {*PRODUCT_INDEXES, retired} & set(left)
