"""Plain helpers shared by the alerting tests (their fixtures are in tests/conftest.py).

Import as ``from tests.alerting import …``: pyproject's ``pythonpath`` puts the repository
root on ``sys.path``. Nothing here is a fixture and nothing here mocks: the clock is the
injectable clock the evaluator and sender take, the queries read the real alerting tables.
"""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import yaml
from apscheduler.schedulers.base import BaseScheduler

from outbox_monitor.alerts.own_alerts import insert_all, notification_params
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.config.settings import ENV_PREFIX
from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database

REPO = Path(__file__).resolve().parents[1]
SENDER_INTERVAL = 0.2
"""Seconds between the sender's passes in a test's scheduler (the product's default is longer)."""
LOADED_DEADLINE = 60
"""Seconds a test waits for work that takes a few seconds on a quiet machine: a child process
of the product (``python -m outbox_monitor …``) to import, connect and show its first work, or
a few seconds of simulated traffic; up to 15–20 s on 2 cores at load average 16–21 (the loaded
runs of issue 28 item 7). Tests poll for the condition with this deadline, so it costs nothing
when the work is quick."""


class FakeClock:
    """A clock the test moves by hand, for ``Evaluator(clock=)`` and ``deliver_due(clock=)``.

    ``clock()`` is the current instant (aware UTC); ``clock.advance(seconds)`` moves it on
    and returns the new instant; ``clock.now`` may also be set outright. It starts at
    ``start``, or at the real now so that rows inserted with the database's ``now()`` and
    the clock agree.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def rules_file(directory: Path, rules: Any, name: str = "alerts.yml") -> Path:
    """Writes a rules file and returns its path.

    Args: ``rules`` is the file's text as is, or any other value (a mapping, a list) dumped
    as YAML in its own key order; ``name`` the file name inside ``directory``.
    """
    path = directory / name
    path.write_text(rules if isinstance(rules, str) else yaml.safe_dump(rules, sort_keys=False))
    return path


def oncall_rules(rules: str, *, route: str = "") -> str:
    """alerts.yml text: ``rules`` (rule items, as YAML indented by two spaces) evaluated every
    30 s (``for`` and ``keep_firing_for`` 0 s), routed to ``oncall`` (Slack at
    ``SLACK_WEBHOOK_URL``, with ``route``'s extra settings, e.g. ``", repeat_interval: 1h"``)."""
    return f"""
version: 1
defaults: {{interval: 30s, for: 0s, keep_firing_for: 0s}}
routes:
  oncall: {{webhook_url_env: SLACK_WEBHOOK_URL{route}}}
rules:
{rules}"""


def stuck_lock_rules(interval: str, more: str = "") -> str:
    """alerts.yml text: rules evaluated every ``interval`` (``for`` and ``keep_firing_for``
    0 s), routed to ``oncall`` (Slack at ``SLACK_WEBHOOK_URL``, repeated hourly):
    ``stuck-lock`` (``stuck_locks > 0``), then ``more`` (rule items of the same list, as YAML
    indented by two spaces)."""
    return f"""
version: 1
defaults: {{interval: {interval}, for: 0s, keep_firing_for: 0s}}
routes:
  oncall: {{webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h}}
rules:
  - name: stuck-lock
    metric: stuck_locks
    op: ">"
    threshold: 0
    route: oncall
{more}"""


def start_scheduler(
    db: Database, *, ruleset: RuleSet | None = None, sink: SlackSink | None = None, **options: Any
) -> BaseScheduler:
    """``build_scheduler``'s background scheduler, started: ``ruleset``'s alerts posted to
    ``sink`` (its routes' ``SLACK_WEBHOOK_URL``; no transport without a sink), the sender
    every ``SENDER_INTERVAL``; ``options`` as ``build_scheduler`` takes them (``status``,
    ``primary``, ``leadership``, ``outage_alert_after``). End it with ``stop_scheduler``."""
    transports = (
        None if sink is None else transports_for(ruleset, {"SLACK_WEBHOOK_URL": sink.webhook_url})
    )
    scheduler = build_scheduler(
        db,
        blocking=False,
        ruleset=ruleset,
        transports=transports,
        sender_interval=SENDER_INTERVAL,
        **options,
    )
    scheduler.start()
    return scheduler


def stop_scheduler(scheduler: BaseScheduler) -> None:
    """Shuts a ``start_scheduler`` scheduler down, waiting for its jobs (once)."""
    if scheduler.running:
        scheduler.shutdown(wait=True)


@contextmanager
def running_scheduler(db: Database, **options: Any) -> Iterator[BaseScheduler]:
    """``start_scheduler(db, **options)`` for the block, then ``stop_scheduler``."""
    scheduler = start_scheduler(db, **options)
    try:
        yield scheduler
    finally:
        stop_scheduler(scheduler)


def wait_for(predicate: Callable[[], Any], timeout: float, step: float = 0.05) -> Any:
    """Polls ``predicate`` every ``step`` seconds for up to ``timeout`` seconds.

    Returns its first truthy value, or its value after the timeout (falsy) for the caller
    to assert on.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def messages_after(
    sink: SlackSink, count: int, *, timeout: float = 10, settle: float = 1.0
) -> list[dict[str, Any]]:
    """The sink's messages once at least ``count`` have arrived, ``settle`` seconds later.

    Fails the test if fewer than ``count`` arrive within ``timeout`` seconds; the settle
    time lets a duplicate (a second sender, a repeat) show before the caller counts.
    """
    arrived = wait_for(lambda: len(sink.messages()) >= count, timeout=timeout)
    assert arrived, f"fewer than {count} Slack message(s) within {timeout} s"
    time.sleep(settle)
    return sink.messages()


def subprocess_env(dsn: str, **extra: str) -> dict[str, str]:
    """The environment for a child ``python -m outbox_monitor`` process.

    This process's environment without any ``OUTBOX_MONITOR_*`` setting, then
    ``OUTBOX_MONITOR_DSN=dsn``, no metrics server (``OUTBOX_MONITOR_METRICS_PORT=0``: a
    scheduler refuses to start on a port in use, and two replicas of one test share a
    host) and ``extra`` (e.g. ``SLACK_WEBHOOK_URL``, or a free metrics port).
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith(ENV_PREFIX)}
    env["OUTBOX_MONITOR_DSN"] = dsn
    env["OUTBOX_MONITOR_METRICS_PORT"] = "0"
    env.update(extra)
    return env


def leader_pids(dsn: str) -> list[int]:
    """Backend pids of the leadership connections holding a current evaluator lease in
    ``dsn``'s database (unexpired, backend still connected)."""
    with psycopg.connect(dsn) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT holder_pid FROM outbox_monitor.leader_leases WHERE expires_at > now() "
                "AND holder_pid IN (SELECT pid FROM pg_stat_activity)"
            )
        ]


def drain(conn: psycopg.Connection, ids: list[int] | None = None) -> None:
    """Marks outbox rows done now, as a worker that caught up would: the rows ``ids``, or
    every row when ``ids`` is None."""
    conn.execute(
        "UPDATE integration_outbox SET status = 'done', processed_at = now() "
        "WHERE %(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s)",
        {"ids": ids},
    )


def notifications(conn: psycopg.Connection, rule: str | None = None) -> list[dict[str, Any]]:
    """Rows of the notification outbox in insert order (``rule``'s only, if given).

    ``conn`` has dict rows (the ``conn`` fixture); each row has ``id``, ``rule``,
    ``dedupe_key``, ``kind``, ``status``, ``silenced``, ``payload`` and ``evaluation_id``.
    """
    return conn.execute(
        "SELECT id, rule, dedupe_key, kind, status, silenced, payload, evaluation_id "
        "FROM outbox_monitor.notifications WHERE %(rule)s::text IS NULL OR rule = %(rule)s "
        "ORDER BY id",
        {"rule": rule},
    ).fetchall()


def transitions(conn: psycopg.Connection, rule: str | None = None) -> list[dict[str, Any]]:
    """Alert transitions in the order they were written (``rule``'s only, if given).

    ``conn`` has dict rows; each row has ``rule``, ``instance``, ``from_state``,
    ``to_state``, ``value`` and ``detail``.
    """
    return conn.execute(
        "SELECT rule, instance, from_state, to_state, value, detail "
        "FROM outbox_monitor.alert_transitions WHERE %(rule)s::text IS NULL OR rule = %(rule)s "
        "ORDER BY id",
        {"rule": rule},
    ).fetchall()


def evaluate_as_scheduler(settings: Any, db: Any, ruleset: Any) -> None:
    """One evaluation pass as the scheduler runs it: under the evaluator lease (fenced), its
    end stamped in the lease, which is then given back (the dashboard reads the states as
    fresh for 3 intervals)."""
    from outbox_monitor.alerts.evaluate import Evaluator
    from outbox_monitor.alerts.leader import Leadership

    with Leadership(settings) as lead:
        assert lead.try_acquire()
        Evaluator(db, ruleset, fence=lead.fence).run_once()
        assert lead.record_evaluation()


class Scheduler:
    """One ``outbox-monitor scheduler`` process with its own log and /metrics port, run in
    ``cwd`` (the repository; a previous release's export, with ``PYTHONPATH`` in ``env``)."""

    def __init__(self, env: dict[str, str], rules: Path, log: Path, *, cwd: Path = REPO) -> None:
        self.port = free_port()
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "outbox_monitor", "scheduler", "--rules", str(rules)],
                cwd=cwd,
                env={**env, "OUTBOX_MONITOR_METRICS_PORT": str(self.port)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def output(self) -> str:
        return self.log.read_text()

    @property
    def leads(self) -> bool:
        return "is now the alert evaluator" in self.output

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def metric(self, name: str) -> float | None:
        found = re.search(rf"^{name} (\S+)$", self.get("/metrics")[1], re.M)
        return None if found is None else float(found.group(1))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


WRITTEN_TABLES = (
    "samples",
    "event_type_samples",
    "alert_instances",
    "alert_transitions",
    "notifications",
    "leader_leases",
)
"""The tables the leader writes every interval (a full disk refuses them all)."""


def fail_writes(conn: psycopg.Connection) -> None:
    """Make every write to ``WRITTEN_TABLES`` fail as a full disk does (SQLSTATE 53100),
    reads untouched: a test-owned trigger on each."""
    conn.execute(
        "CREATE FUNCTION public.test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'"
        " USING ERRCODE = '53100'; END $$"
    )
    for table in WRITTEN_TABLES:
        conn.execute(
            f"CREATE TRIGGER test_disk_full BEFORE INSERT OR UPDATE OR DELETE"
            f" ON outbox_monitor.{table} FOR EACH ROW EXECUTE FUNCTION public.test_disk_full()"
        )


def writes_work_again(conn: psycopg.Connection) -> None:
    """Drop ``fail_writes``'s triggers and their function: writes succeed again."""
    for table in WRITTEN_TABLES:
        conn.execute(f"DROP TRIGGER test_disk_full ON outbox_monitor.{table}")
    conn.execute("DROP FUNCTION public.test_disk_full()")


def open_stall_episode(db: Database, now: datetime) -> None:
    """An alerting-stalled episode of ``db``'s outbox whose resolve is not queued yet, as
    ``StallWatch`` writes it (a source of the shipped inhibit entries)."""
    stalled = notification_params(
        rule="alerting-stalled",
        instance=db.table_name,
        route="oncall",
        kind="error",
        episode="never",
        payload={"rule": "alerting-stalled", "instance": db.table_name, "kind": "error"},
        now=now,
    )
    with db.transaction() as tx:
        insert_all(db, tx, [stalled])
