"""Issue 10 item 15: an outbox column of the wrong type is reported as such — the column,
its type, the types accepted and how to fix it — never as "add the missing columns"
(real Postgres, `outbox-monitor status`)."""

import json

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main


@pytest.fixture
def status(dsn, monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.delenv("OUTBOX_MONITOR_TABLE", raising=False)

    def run():
        result = CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False)
        assert result.exit_code == 1, result.output
        return json.loads(result.stdout)

    return run


def alter(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def test_a_text_attempts_column_is_named_with_its_type_and_the_fix(dsn, status):
    alter(dsn, "ALTER TABLE integration_outbox ALTER COLUMN attempts TYPE text")

    shown = status()

    assert shown["error"] == (
        "the outbox table public.integration_outbox does not match SPEC §1: column attempts "
        "is text, expected integer, bigint or smallint"
    )
    assert "missing" not in shown["hint"].lower()
    fix = "ALTER TABLE public.integration_outbox ALTER COLUMN attempts TYPE integer"
    assert fix in shown["hint"]


def test_missing_and_mistyped_columns_are_each_told_their_fix(dsn, status):
    alter(
        dsn,
        "ALTER TABLE integration_outbox DROP COLUMN locked_by",
        "ALTER TABLE integration_outbox ALTER COLUMN payload TYPE text",
    )

    shown = status()

    assert shown["error"] == (
        "the outbox table public.integration_outbox does not match SPEC §1: missing "
        "columns: locked_by; column payload is text, expected jsonb"
    )
    assert "Add the missing column (locked_by)" in shown["hint"]
    assert "ALTER COLUMN payload TYPE jsonb" in shown["hint"]
