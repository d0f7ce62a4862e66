"""Every failure mode is a banner with its fix, never a traceback."""

import psycopg
import pytest

from outbox_monitor.pgcluster import free_port

PAGES = ["overview", "events", "dead_letters", "actions", "alerts"]


def banner(at) -> tuple[str, str]:
    assert not at.exception
    (error,) = at.error
    (hint,) = at.info
    return error.value, hint.value


def test_wrong_dsn(open_page, environment):
    port = free_port()  # nothing listens there
    environment.setenv("OUTBOX_MONITOR_DSN", f"postgresql://postgres@127.0.0.1:{port}/app")

    error, hint = banner(open_page("overview"))

    assert error.startswith("**Database unreachable**")
    assert f"postgres@127.0.0.1:{port}/app" in error
    assert "OUTBOX_MONITOR_DSN" in hint


@pytest.mark.parametrize("page", PAGES)
def test_table_missing_on_every_page(open_page, environment, page):
    environment.setenv("OUTBOX_MONITOR_TABLE", "public.no_such_outbox")

    error, hint = banner(open_page(page))

    assert error.startswith("**Outbox table missing**")
    assert "public.no_such_outbox does not exist" in error
    assert "outbox-monitor init-db" in hint and "OUTBOX_MONITOR_TABLE" in hint


def test_columns_missing(open_page, environment, conn):
    conn.execute("CREATE TABLE thin_outbox (id bigserial PRIMARY KEY, event_type text, status int)")
    environment.setenv("OUTBOX_MONITOR_TABLE", "thin_outbox")

    error, hint = banner(open_page("dead_letters"))

    assert error.startswith("**Outbox table columns missing**")
    assert "missing columns: aggregate_type, aggregate_id, event_key, payload" in error
    assert "status is integer, expected text or character varying" in error
    assert "OUTBOX_MONITOR_TABLE" in hint


def test_schema_not_initialised(open_page, conn):
    conn.execute("DROP SCHEMA outbox_monitor CASCADE")

    error, hint = banner(open_page("overview"))

    assert error.startswith("**Schema not initialised**")
    assert "outbox-monitor init-db" in hint


def test_statement_timeout(open_page, environment, dsn, rows):
    rows.add()
    environment.setenv("OUTBOX_MONITOR_STATEMENT_TIMEOUT", "1s")
    with psycopg.connect(dsn) as locker:  # holds the table until the page gave up
        locker.execute("LOCK TABLE integration_outbox IN ACCESS EXCLUSIVE MODE")

        error, hint = banner(open_page("overview"))

    assert error.startswith("**Statement timeout**")
    assert "(1 s)" in error
    assert "OUTBOX_MONITOR_STATEMENT_TIMEOUT" in hint


def test_invalid_setting(open_page, environment):
    environment.setenv("OUTBOX_MONITOR_LOCK_TIMEOUT", "soon")

    error, hint = banner(open_page("overview"))

    assert error.startswith("**Invalid configuration**")
    assert "OUTBOX_MONITOR_LOCK_TIMEOUT" in error and "'soon'" in error
    assert at_least_one_page_listed(hint)


def at_least_one_page_listed(hint: str) -> bool:
    return "README" in hint
