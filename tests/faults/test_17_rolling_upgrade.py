"""Issue 17 item 5: an upgrade from the previous release stops no worker and sends no
notification twice.

The previous release is main before migrations 013 and 014 (``PREVIOUS_RELEASE``), exported
from git (``git archive``) and run in child processes with ``PYTHONPATH`` at the export:

- its ``init-db`` creates the database (schema version 12); worker threads claim, ack and
  dead-letter through the shared functions while rows keep arriving, and this release's
  init-db upgrades the database under them: no worker error, every row settled exactly once,
  rows settled during the upgrade itself;
- its scheduler runs, the database is upgraded under it, this release's scheduler starts
  beside it against the same database and the local Slack sink (a rolling upgrade), then the
  old one stops: one alert fires and resolves, exactly one Slack message for each transition.
"""

import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from outbox_monitor import outbox
from outbox_monitor.config.settings import load_settings
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import Scheduler, rules_file, stuck_lock_rules, subprocess_env, wait_for
from tests.upgrades import since

REPO = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "f3d028c7d3a649a6b28ab28e76c2a98d3f7cc7cb"
"""main before the workers' merge: the last release whose schema version is 012."""
PREVIOUS_VERSION = 12
WORKERS = 4
CLAIM_BATCH = 5
PUBLISH_BATCH = 20
UPGRADED = "SELECT max(version) FROM outbox_monitor.schema_migrations"


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory) -> Path:
    """The previous release's package, exported into a folder of its own."""
    folder = tmp_path_factory.mktemp("previous-release")
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", PREVIOUS_RELEASE, "outbox_monitor"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(
            f"CANNOT TEST UPGRADES: the previous release {PREVIOUS_RELEASE[:7]} is not in this "
            f"checkout's history (a shallow clone? fetch with --unshallow): {error}"
        )
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def previous_init_db(previous_release: Path, dsn: str) -> None:
    """The previous release's ``init-db`` on ``dsn``: schema version 12."""
    done = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "init-db"],
        cwd=previous_release,
        env=subprocess_env(dsn, PYTHONPATH=str(previous_release)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute(UPGRADED).fetchone()[0] == PREVIOUS_VERSION


def upgrade(dsn: str) -> list[str]:
    """This release's init-db on ``dsn``; the migrations it applied."""
    with Database(load_settings(dsn=dsn)) as db:
        return init_db(db).applied_migrations


class Worker(threading.Thread):
    """Claims and settles rows through the Python API until told to stop: acks each row,
    dead-letters every tenth (``fail(permanent=True)``). Records each settled id with its
    time, and any error."""

    def __init__(self, dsn: str, name: str, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.dsn = dsn
        self.stop = stop
        self.settled: list[tuple[int, float]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    claimed = outbox.claim(conn, self.name, limit=CLAIM_BATCH)
                    if not claimed:
                        time.sleep(0.005)
                    for row in claimed:
                        if row["id"] % 10 == 0:
                            held = outbox.fail(conn, row["id"], self.name, "no", permanent=True)
                        else:
                            held = outbox.ack(conn, row["id"], self.name)
                        if not held:
                            self.errors.append(f"row {row['id']}: the claim was lost")
                        self.settled.append((row["id"], time.monotonic()))
        except Exception as error:  # the assertion names it
            self.errors.append(repr(error))


def publish_until(dsn: str, stop: threading.Event, errors: list[str]) -> None:
    """Insert ``PUBLISH_BATCH`` pending rows every 10 ms until ``stop``."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                conn.execute(
                    "INSERT INTO public.integration_outbox"
                    " (event_type, aggregate_type, aggregate_id, event_key, payload)"
                    " SELECT 'order.paid', 'order', g::text, gen_random_uuid()::text, '{}'"
                    " FROM generate_series(1, %s) g",
                    (PUBLISH_BATCH,),
                )
                time.sleep(0.01)
    except Exception as error:
        errors.append(repr(error))


def test_a_previous_release_database_is_upgraded_while_workers_claim(empty_dsn, previous_release):
    previous_init_db(previous_release, empty_dsn)
    stop_publishing, stop_working, publish_errors = threading.Event(), threading.Event(), []
    publisher = threading.Thread(
        target=publish_until, args=(empty_dsn, stop_publishing, publish_errors), daemon=True
    )
    workers = [Worker(empty_dsn, f"worker-{n}", stop_working) for n in range(WORKERS)]
    publisher.start()
    for worker in workers:
        worker.start()
    settled = lambda: sum(len(w.settled) for w in workers)  # noqa: E731
    assert wait_for(lambda: settled() >= 200, timeout=60), [w.errors for w in workers]
    began = time.monotonic()
    applied = upgrade(empty_dsn)
    ended = time.monotonic()
    during = sum(began <= at <= ended for w in workers for _, at in w.settled)
    after = settled()
    assert wait_for(lambda: settled() >= after + 200, timeout=60)
    stop_publishing.set()
    publisher.join(10)
    with psycopg.connect(empty_dsn) as conn:
        published = conn.execute("SELECT count(*) FROM public.integration_outbox").fetchone()[0]
        assert wait_for(lambda: settled() >= published, timeout=60)
        stop_working.set()
        for worker in workers:
            worker.join(10)
        statuses = dict(
            conn.execute("SELECT status, count(*) FROM public.integration_outbox GROUP BY 1")
        )
        version = conn.execute(UPGRADED).fetchone()[0]
    ids = [row_id for w in workers for row_id, _ in w.settled]
    print(
        f"\nupgrade 012 -> {version} took {ended - began:.3f} s under {WORKERS} workers; "
        f"{during} row(s) settled during it, {published} in all"
    )
    assert applied == since(PREVIOUS_VERSION + 1)
    assert [w.errors for w in workers] == [[]] * WORKERS and publish_errors == []
    assert len(ids) == len(set(ids)) == published, "a row lost or settled twice"
    dead = sum(1 for row_id in ids if row_id % 10 == 0)
    assert statuses == {"done": published - dead, "failed": dead}
    assert during > 0, "no worker settled a row while the migrations ran"


def test_the_previous_and_this_scheduler_side_by_side_send_each_transition_once(
    empty_dsn, previous_release, tmp_path, slack_sink
):
    previous_init_db(previous_release, empty_dsn)
    rules = rules_file(tmp_path, stuck_lock_rules("0.3s"))
    env = subprocess_env(empty_dsn, SLACK_WEBHOOK_URL=slack_sink.webhook_url)
    old = Scheduler(
        {**env, "PYTHONPATH": str(previous_release)},
        rules,
        tmp_path / "previous.log",
        cwd=previous_release,
    )
    new = None
    try:
        assert wait_for(lambda: old.leads, timeout=30), old.output
        assert upgrade(empty_dsn) == since(PREVIOUS_VERSION + 1)  # under the old scheduler
        new = Scheduler(env, rules, tmp_path / "current.log")
        assert wait_for(lambda: "scheduler started" in new.output, timeout=30), new.output
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO public.integration_outbox (event_type, aggregate_type,"
                " aggregate_id, event_key, payload, status, locked_at, locked_by)"
                " VALUES ('order.paid', 'order', '1', 'k-1', '{}', 'processing',"
                " now() - interval '1 hour', 'gone-worker')"
            )
            assert wait_for(lambda: slack_sink.messages(), timeout=30), old.output + new.output
            time.sleep(2)  # both evaluate many times over
            assert len(slack_sink.messages()) == 1
            old.stop()  # the rolling upgrade goes on: the new one takes over
            conn.execute(
                "UPDATE public.integration_outbox SET status = 'done',"
                " locked_at = NULL, locked_by = NULL, processed_at = now()"
            )
            assert wait_for(lambda: len(slack_sink.messages()) >= 2, timeout=60), new.output
            time.sleep(2)
        firing, resolved = slack_sink.messages()
        assert "stuck-lock" in firing["text"] and "RESOLVED" in resolved["text"].upper()
        assert new.leads and "Traceback" not in old.output + new.output
    finally:
        old.stop()
        if new is not None:
            new.stop()
