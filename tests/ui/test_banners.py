"""Every failure mode is a banner with its fix, never a traceback."""

import re
import socket
import threading
import time

import psycopg
import pytest
from rendered import plain

from outbox_monitor.demo.pgcluster import free_port

PAGES = ["overview", "events", "dead_letters", "actions", "alerts", "health", "timeline"]


def banner(at) -> tuple[str, str]:
    assert not at.exception
    (error,) = at.error
    (hint,) = at.info
    return plain(error.value), hint.value


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

    assert error.startswith("**Outbox table columns missing or mistyped**")
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
    return "docs/reference/configuration.md" in hint


class RefusingServer:
    """A TCP server on 127.0.0.1 that accepts every connection and closes it at once, like
    a database down behind a proxy; ``connections`` counts the attempts."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.connections += 1
            connection.close()

    def __enter__(self) -> "RefusingServer":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.listener.close()
        self._thread.join(timeout=5)


def test_an_outage_keeps_the_title_and_does_not_reconnect_at_every_run(open_page, environment):
    with RefusingServer() as server:
        environment.setenv(
            "OUTBOX_MONITOR_DSN", f"postgresql://postgres@127.0.0.1:{server.port}/app"
        )

        at = open_page("overview")
        tried = server.connections

        assert [t.value for t in at.title] == ["Overview"]
        error, _ = banner(at)
        assert error.startswith("**Database unreachable**")
        assert tried >= 1
        assert any("the page tries again by itself in" in c.value for c in at.caption)

        # reruns within OUTBOX_MONITOR_OUTAGE_RETRY (a click, another page, a live
        # refresh) show the failure again at once, without connecting
        at.run()
        at.switch_page("pages/events.py").run()

        assert [t.value for t in at.title] == ["Events"]
        assert banner(at)[0].startswith("**Database unreachable**")
        assert server.connections == tried

        at.button(key="dashboard.retry").click().run()

        assert server.connections > tried
        assert banner(at)[0].startswith("**Database unreachable**")


OUTAGE_RETRY_SECONDS = 7
"""A retry delay of its own (``OUTBOX_MONITOR_OUTAGE_RETRY``), far from the default 30 s."""


def test_the_retry_delay_is_the_outage_retry_setting(open_page, environment):
    environment.setenv("OUTBOX_MONITOR_OUTAGE_RETRY", f"{OUTAGE_RETRY_SECONDS}s")
    with RefusingServer() as server:
        environment.setenv(
            "OUTBOX_MONITOR_DSN", f"postgresql://postgres@127.0.0.1:{server.port}/app"
        )

        at = open_page("overview")
        failed = time.monotonic()  # the failed attempt was before this
        tried = server.connections

        assert banner(at)[0].startswith("**Database unreachable**")
        assert tried >= 1
        # the session's delay, which the page's rerun fragment runs every (``run_every``)
        outage = at.session_state["_outbox_monitor.outage"]
        assert outage.retry_seconds == OUTAGE_RETRY_SECONDS
        [said] = [c.value for c in at.caption if "tries again by itself in" in c.value]
        shown = re.search(r"tries again by itself in ([\d.]+)s\.", said)
        assert shown is not None, said
        assert 0 < float(shown.group(1)) <= OUTAGE_RETRY_SECONDS, said

        # once the configured delay has passed (not the default's), a plain rerun (a live
        # refresh, no "Retry now") connects again
        time.sleep(max(0.0, failed + OUTAGE_RETRY_SECONDS - time.monotonic()))
        at.run()

        assert server.connections > tried
        assert banner(at)[0].startswith("**Database unreachable**")
