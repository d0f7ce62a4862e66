"""Shared fixtures: one real PostgreSQL cluster per test session, a fresh database per test.

The cluster is started by the suite itself (``outbox_monitor.demo.pgcluster``); a template
database holds the outbox table and the ``outbox_monitor`` schema, and every test gets
``CREATE DATABASE … TEMPLATE`` of it (≈ 50 ms).
"""

import itertools
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.demo.n8n_install import N8nNotFound, find_n8n
from outbox_monitor.demo.pgcluster import TemporaryCluster
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import FakeClock, rules_file
from tests.receiver_fakes import ROUTING_KEY, SECRET, FakePagerDuty, FakeWebhook

pytest_plugins = ["tests.browser_fixtures", "tests.replication", "tests.claim_health"]

TEMPLATE = "outbox_template"
ENGINE_FILES = ("tests/deploy/test_image.py", "tests/deploy/test_compose_up.py")
"""Files that share one podman storage (``tests/deploy/podman.py``): one worker runs them."""


def xdist_group_of(nodeid: str) -> str:
    """The group a test runs in under ``make test``'s pytest-xdist workers: its file (module
    fixtures are built once), except that the podman files share one group (one image build
    in one storage). Each n8n file is a group of its own too (each n8n on ports of its own):
    the workers share them instead of one running them all while the others idle."""
    path = nodeid.split("::", 1)[0]
    return "podman" if path in ENGINE_FILES else path


def pytest_configure(config: pytest.Config) -> None:
    """Tests stop their children as Ctrl-C does (SIGINT). A runner that starts pytest with
    SIGINT ignored (a background job of a non-interactive shell, ``nohup``) passes that on
    to every child, which then ignores it and the test times out: Python's own handler is
    taken back, in the controller and in every xdist worker."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def n8n_installed() -> bool:
    """Whether n8n is installed (``n8n/install.sh`` done), so its tests need not wait."""
    try:
        find_n8n()
    except N8nNotFound:
        return False
    return True


SLOW_FIRST = (
    "tests/n8n/test_n8n_outage.py",
    "tests/browser/test_trips_browser.py",
    "tests/integration/test_demo_drill.py",
    "tests/deploy/test_wheel.py",
    "tests/n8n/test_n8n_poller.py",
    "tests/browser/test_typed_paths_browser.py",
    "tests/integration/test_hang_watch.py",
    "tests/browser/test_demo_drill_browser.py",
    "tests/integration/test_fleet_scheduler.py",
    "tests/browser/test_signin_browser.py",
    "tests/integration/test_demo_forgotten_transaction.py",
    "tests/deploy/test_compose_up.py",
    "tests/browser/test_outage_browser.py",
    "tests/faults/test_01_settings_fail_fast.py",
    "tests/integration/test_replica.py",
)
"""The files that took 40 s or more (their tests' setup, call and teardown summed) in an idle
fresh-clone ``make test`` (issue 28 item 6, ``--durations=0``; 91.5 s down to 41.3 s), slowest
first: the workers take them first, so that none of them is what one worker still runs while
the others have nothing left (longest first, as pytest-split's duration-based groups do)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order ``make test``'s workers take the files in (``--no-loadscope-reorder``): the
    ``SLOW_FIRST`` files, then one file of each folder in turn (browser, deploy, faults,
    integration, n8n, ui, unit), so that the workers mix the files that draw pages in
    Chromium (CPU) with the files that mostly wait on clocks and subprocesses, and the many
    short files come last (whichever worker is free takes them). The n8n files go last while
    n8n is not installed yet: ``make test`` installs it in the background and they wait for
    it (``tests/n8n/conftest.py``)."""
    folders: dict[str, int] = {}
    files: dict[str, tuple[int, int]] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path not in files:
            folder = path.rsplit("/", 1)[0]
            rank = sum(1 for known in files if known.rsplit("/", 1)[0] == folder)
            files[path] = (rank, folders.setdefault(folder, len(folders)))
    waiting = not n8n_installed()
    position = {id(item): index for index, item in enumerate(items)}

    slow = {path: index for index, path in enumerate(SLOW_FIRST)}

    def key(item: pytest.Item) -> tuple[bool, int, int, int, int]:
        path = item.nodeid.split("::", 1)[0]
        first = slow.get(path, len(slow))
        return (waiting and path.startswith("tests/n8n/"), first, *files[path], position[id(item)])

    items.sort(key=key)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scheduler of this suite: whole groups (``xdist_group_of``) to a worker, in
    collection order with ``--no-loadscope-reorder`` (the n8n tests last). Its own
    ``--dist loadgroup`` groups nothing under pytest 9.2 (pytest-xdist issue 1386: the
    node-id suffix it relies on no longer takes effect), so the groups are computed here."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid)

    return GroupScheduling(config, log)


_counter = itertools.count()
DEPLOY_PROPERTY = "deployment"


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Every test leaves ``os.environ`` as it found it: the demo run in-process sets its
    rules file, receivers' variables and DSNs for its own process (``demo/rules.py``,
    ``demo/drill.py``), and a later test of the same worker must not start on them."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def deploy_log(record_property: Callable[[str, object], None]) -> Callable[[str], None]:
    """``deploy_log(line)``: a line of the run's "deployment checks" summary (the image
    built, its containers healthy, compose's leader, the installed wheel's pages), printed at
    the end of the run by ``pytest_terminal_summary`` for each test that passed. It rides on
    the test's user properties, which pytest-xdist carries from its workers."""
    return lambda line: record_property(DEPLOY_PROPERTY, line)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the ``deploy_log`` lines of the passed tests (CI's log shows what was proven)."""
    lines = [
        value
        for report in terminalreporter.stats.get("passed", [])
        for key, value in report.user_properties
        if key == DEPLOY_PROPERTY
    ]
    if lines:
        terminalreporter.write_sep("=", "deployment checks")
        for line in dict.fromkeys(lines):
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[TemporaryCluster]:
    cluster = TemporaryCluster().start()
    try:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        with Database(load_settings(dsn=cluster.dsn_for(TEMPLATE))) as db:
            init_db(db, create_table=True)
        yield cluster
    finally:
        try:
            cluster.pause()  # the server stopped, its folder kept
        finally:
            remove_in_background(cluster.root)


def remove_in_background(folder: Path) -> None:
    """Delete ``folder`` in a process of its own that the session does not wait for: a
    worker's cluster holds a database per test (hundreds), whose deletion (≈ 5 s per 300
    databases) was the last teardown of each worker's run, on the suite's critical path."""
    # the shell returns at once; rm, its child, outlives it (and this process)
    subprocess.run(
        ["sh", "-c", 'rm -rf -- "$0" >/dev/null 2>&1 &', str(folder)],
        check=True,
        start_new_session=True,
    )


def create_database(cluster: TemporaryCluster, template: str = TEMPLATE) -> str:
    """A fresh database cloned from ``template``; returns its DSN."""
    name = f"t_{next(_counter)}"
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    return cluster.dsn_for(name)


@pytest.fixture
def dsn(pg_cluster: TemporaryCluster) -> str:
    """A fresh database with the outbox table and the outbox_monitor schema."""
    return create_database(pg_cluster)


@pytest.fixture
def empty_dsn(pg_cluster: TemporaryCluster) -> str:
    """A fresh database with nothing in it (no outbox table, no outbox_monitor schema)."""
    return create_database(pg_cluster, template="template0")


@pytest.fixture
def make_dsn(pg_cluster: TemporaryCluster):
    """Factory of further fresh outbox databases for tests that need several."""
    return lambda: create_database(pg_cluster)


@pytest.fixture
def settings(dsn: str) -> Settings:
    return load_settings(dsn=dsn)


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    with Database(settings) as database:
        yield database


class Rows:
    """Inserts outbox rows with timestamps relative to one fixed database instant ``t0``.

    ``ago`` arguments are seconds before ``t0``; a figure computed right after differs
    from the hand value only by the milliseconds between insert and query.
    """

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.t0: datetime = conn.execute("SELECT now() AS now").fetchone()["now"]
        self._n = itertools.count(1)

    def at(self, seconds_ago: float | None) -> datetime | None:
        return None if seconds_ago is None else self.t0 - timedelta(seconds=seconds_ago)

    def add(
        self,
        *,
        event_type: str = "order.paid",
        status: str = "pending",
        created_ago: float = 60,
        available_ago: float | None = None,
        processed_ago: float | None = None,
        locked_ago: float | None = None,
        locked_by: str | None = None,
        attempts: int = 0,
        last_error: str | None = None,
        aggregate: tuple[str, str] = ("order", "1"),
        payload: Any = None,
        event_key: str | None = None,
        id: int | None = None,
    ) -> int:
        n = next(self._n)
        columns: dict[str, Any] = {
            "event_type": event_type,
            "aggregate_type": aggregate[0],
            "aggregate_id": aggregate[1],
            "event_key": event_key or f"{event_type}:{n}:{self.t0.timestamp()}",
            "payload": Jsonb(payload if payload is not None else {"n": n}),
            "status": status,
            "attempts": attempts,
            "available_at": self.at(created_ago if available_ago is None else available_ago),
            "locked_at": self.at(locked_ago),
            "locked_by": locked_by or ("worker-1" if locked_ago is not None else None),
            "last_error": last_error,
            "created_at": self.at(created_ago),
            "processed_at": self.at(processed_ago),
        }
        if id is not None:
            columns["id"] = id
        names = ", ".join(columns)
        marks = ", ".join(f"%({name})s" for name in columns)
        row = self.conn.execute(
            f"INSERT INTO integration_outbox ({names}) VALUES ({marks}) RETURNING id", columns
        ).fetchone()
        return row["id"]

    def add_failed(self, **fields: Any) -> int:
        """One dead letter (``add`` with status failed): by default failed 60 s before ``t0``
        at 10 attempts with ``HTTP 500 upstream``."""
        fields.setdefault("processed_ago", 60)
        fields.setdefault("attempts", 10)
        fields.setdefault("last_error", "HTTP 500 upstream")
        return self.add(status="failed", **fields)

    def add_dead_letters(self, count: int, *, attempts: int = 10) -> None:
        """``count`` failed order.paid rows with ``attempts``, failed 30 minutes before
        ``t0``, in one statement; each with a 200-character error so that they fill pages."""
        self.conn.execute(
            """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id,
                   event_key, payload, status, attempts, last_error, created_at, processed_at)
               SELECT 'order.paid', 'order', g::text, 'dead:' || %(tag)s || ':' || g, '{}',
                      'failed', %(attempts)s, repeat('x', 200), %(failed_at)s, %(failed_at)s
               FROM generate_series(1, %(count)s) AS g""",
            {
                "tag": next(self._n),
                "attempts": attempts,
                "count": count,
                "failed_at": self.at(30 * 60),
            },
        )

    def get(self, row_id: int) -> dict[str, Any]:
        return self.conn.execute(
            "SELECT * FROM integration_outbox WHERE id = %s", (row_id,)
        ).fetchone()


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as connection:
        yield connection


@pytest.fixture
def rows(conn: psycopg.Connection) -> Rows:
    return Rows(conn)


# ---------------------------------------------------------------------------- alerting
# Fixtures shared by the alerting tests. Plain helpers (FakeClock, rules_file, wait_for,
# notifications, transitions, leader_pids, …) are in tests/alerting.py.


@pytest.fixture
def fake_clock() -> FakeClock:
    """A clock at the real now that moves only when the test calls ``fake_clock.advance(s)``."""
    return FakeClock()


@pytest.fixture
def write_rules(tmp_path: Path) -> Callable[..., RuleSet]:
    """``write_rules(rules, name="alerts.yml")`` writes ``tmp_path/name`` (text as is, a
    mapping as YAML) and returns it loaded; ``RulesError`` if it is invalid."""

    def write(rules: Any, name: str = "alerts.yml") -> RuleSet:
        return load_rules(rules_file(tmp_path, rules, name))

    return write


@pytest.fixture
def slack_sink_options() -> dict[str, Any]:
    """Keyword arguments for ``slack_sink``'s ``SlackSink``: none (a free port, the default
    bot token). A test module overrides this fixture to change them."""
    return {}


@pytest.fixture
def slack_sink(slack_sink_options: dict[str, Any]) -> Iterator[SlackSink]:
    """The local Slack-compatible sink running on 127.0.0.1 for this test."""
    with SlackSink(**slack_sink_options) as sink:
        yield sink


@pytest.fixture
def pagerduty() -> Iterator[FakePagerDuty]:
    """A local PagerDuty Events API v2 (tests/receiver_fakes.py) taking ``ROUTING_KEY``."""
    fake = FakePagerDuty(ROUTING_KEY)
    yield fake
    fake.close()


@pytest.fixture
def webhook() -> Iterator[FakeWebhook]:
    """A local receiver of the signed webhook verifying with ``SECRET`` (the docs' snippet)."""
    fake = FakeWebhook(SECRET)
    yield fake
    fake.close()


@pytest.fixture
def logins(pg_cluster, dsn):
    """Logins of each role ``init-db --print-grants`` prints, granted in this test's
    database (``tests.least_privilege``)."""
    from tests.least_privilege import grant_in, logins_for

    found = logins_for(pg_cluster)
    grant_in(dsn, found)
    return found
