"""``db_errors.describe_target``: where a DSN points, parts it leaves out taken from libpq's PG*
variables (never the password)."""

import pytest

from outbox_monitor.store.db_errors import describe_target

PG_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD")


@pytest.fixture
def pg_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PG_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_full_dsn_is_described_without_its_password(pg_env):
    pg_env.setenv("PGUSER", "env_user")
    assert (
        describe_target("postgresql://app:s3cret@db.internal:6543/orders")
        == "app@db.internal:6543/orders"
    )


def test_without_a_dsn_the_pg_variables_name_the_target(pg_env):
    pg_env.setenv("PGHOST", "pg.example")
    pg_env.setenv("PGPORT", "5433")
    pg_env.setenv("PGUSER", "monitor")
    pg_env.setenv("PGDATABASE", "app")
    pg_env.setenv("PGPASSWORD", "Pw-never-shown")

    for dsn in (None, ""):
        assert describe_target(dsn) == "monitor@pg.example:5433/app"
    assert "Pw-never-shown" not in describe_target(None)


def test_the_pg_variables_fill_only_the_missing_parts(pg_env):
    pg_env.setenv("PGHOSTADDR", "10.0.0.7")
    pg_env.setenv("PGUSER", "monitor")
    pg_env.setenv("PGDATABASE", "other")

    assert describe_target("dbname=app port=6000") == "monitor@10.0.0.7:6000/app"
    assert describe_target("host=db.internal") == "monitor@db.internal:5432/other"


def test_pghost_is_preferred_to_pghostaddr_and_a_dsn_hostaddr_to_both(pg_env):
    pg_env.setenv("PGHOST", "pg.example")
    pg_env.setenv("PGHOSTADDR", "10.0.0.7")

    assert describe_target(None) == "default user@pg.example:5432/?"
    assert describe_target("hostaddr=192.0.2.1") == "default user@192.0.2.1:5432/?"


def test_without_dsn_or_variables_the_libpq_defaults_are_named(pg_env):
    assert describe_target(None) == "default user@local socket:5432/?"
