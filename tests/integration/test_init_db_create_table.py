"""Issue 29 item 11: a misspelled ``--table`` followed by the error's own hint never creates an
empty outbox under the typo. ``init-db`` creates a missing outbox table (and the ledger) only
with ``--create-table``; without it, it exits 1 before changing anything and names the tables
of that database that have the outbox's columns ("did you mean public.integration_outbox?")."""

import json

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main

TYPO = "public.integration_outbx"


@pytest.fixture
def cli(monkeypatch):
    """``outbox-monitor ARGS`` on ``dsn`` (CliRunner, the real command group)."""

    def run(dsn: str, *args: str):
        monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
        return CliRunner().invoke(main, list(args), prog_name="outbox-monitor")

    return run


def relations(dsn: str) -> set[str]:
    """Every table, index and sequence of the database outside the system schemas, as
    ``schema.name`` from pg_class: what init-db would have created shows here."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%'"
        ).fetchall()
    return {name for (name,) in rows}


def test_a_misspelled_table_exits_1_naming_the_real_one_and_creates_nothing(cli, dsn):
    before = relations(dsn)
    status = cli(dsn, "status", "--table", TYPO)
    assert status.exit_code == 1
    assert f"the outbox table {TYPO} does not exist" in status.stderr
    assert "did you mean public.integration_outbox?" in status.stderr
    # a misspelling's hint points at the table meant, never at creating the typo
    assert "to the table you meant (public.integration_outbox)" in status.stderr
    assert "--create-table" not in status.stderr

    followed = cli(dsn, "init-db", "--table", TYPO)  # the user follows the hint's command
    assert followed.exit_code == 1, followed.output
    assert "did you mean public.integration_outbox?" in followed.stderr
    assert "OUTBOX_MONITOR_TABLE (or --table)" in followed.stderr
    assert relations(dsn) == before  # no table, no index, no sequence: nothing created
    assert "public.integration_outbx" not in relations(dsn)

    as_json = cli(dsn, "init-db", "--table", TYPO, "--json")
    assert as_json.exit_code == 1
    payload = json.loads(as_json.stdout)
    assert "did you mean public.integration_outbox?" in payload["error"]
    assert "--create-table" not in payload["hint"]


def test_a_name_like_none_hints_at_creating_it(cli, dsn):
    result = cli(dsn, "init-db", "--table", "ops.zz", "--json")
    assert result.exit_code == 1
    assert "init-db --create-table" in json.loads(result.stdout)["hint"]


def test_create_table_of_a_near_name_creates_it_and_says_which_outbox_was_likely_meant(cli, dsn):
    made = cli(dsn, "init-db", "--table", "publc.integration_outbox", "--create-table")
    assert made.exit_code == 0, made.output
    assert "created tables: publc.integration_outbox" in made.stdout
    assert (
        "warning: created the new, empty outbox publc.integration_outbox, yet this database "
        "has public.integration_outbox with the outbox's columns" in made.stderr
    )
    again = cli(dsn, "init-db", "--table", "publc.integration_outbox", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["near_tables"] == {}


def test_a_name_like_none_lists_the_tables_with_the_outbox_columns(cli, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:  # a second outbox, another schema
        conn.execute("CREATE SCHEMA billing")
        conn.execute("CREATE TABLE billing.events (LIKE public.integration_outbox)")
        conn.execute("CREATE TABLE public.unrelated (id bigint, status text)")
    result = cli(dsn, "init-db", "--table", "ops.zz")
    assert result.exit_code == 1
    assert (
        "tables with the outbox's columns: billing.events, public.integration_outbox"
        in result.stderr
    )
    assert "unrelated" not in result.stderr


def test_an_empty_database_names_no_candidate(cli, empty_dsn):
    before = relations(empty_dsn)
    result = cli(empty_dsn, "init-db")
    assert result.exit_code == 1
    assert "no table of this database has the outbox's columns" in result.stderr
    assert relations(empty_dsn) == before


def test_create_table_creates_the_outbox_and_ledger(cli, dsn):
    result = cli(dsn, "init-db", "--table", "public.brand_new", "--create-table", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["created_tables"] == ["public.brand_new"]  # the ledger beside it exists
    assert payload["missing_tables"] == []
    assert "public.brand_new" in relations(dsn)
    assert cli(dsn, "status", "--table", "public.brand_new", "--json").exit_code == 0


def test_an_existing_table_needs_no_flag(cli, dsn):
    result = cli(dsn, "init-db")
    assert result.exit_code == 0, result.output
    assert "already up to date" in result.stdout


def test_a_missing_ledger_is_named_not_created_without_the_flag(cli, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE public.integration_idempotency")
    result = cli(dsn, "init-db", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["missing_tables"] == ["public.integration_idempotency"]
    assert "public.integration_idempotency" not in relations(dsn)
    text = cli(dsn, "init-db")
    assert "idempotency ledger public.integration_idempotency does not exist" in text.stderr
    made = cli(dsn, "init-db", "--create-table", "--json")
    assert json.loads(made.stdout)["created_tables"] == ["public.integration_idempotency"]
    assert "public.integration_idempotency" in relations(dsn)
