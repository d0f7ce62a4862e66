"""The scheduler samples on its interval and survives a database outage."""

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from outbox_monitor.config.settings import ENV_PREFIX, load_settings
from outbox_monitor.errors import TableMissing
from outbox_monitor.service.jobs import SAMPLER_JOB_ID
from outbox_monitor.service.scheduler import build_scheduler, run_scheduler
from outbox_monitor.store.db import Database
from tests.alerting import LOADED_DEADLINE, free_port, wait_for

REPO = Path(__file__).resolve().parents[2]


def count_samples(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM outbox_monitor.samples").fetchone()[0]


@pytest.fixture
def running(dsn):
    """A started BackgroundScheduler sampling every second on a fresh database."""
    with Database(load_settings(dsn=dsn, sample_interval=1)) as db:
        scheduler = build_scheduler(db, blocking=False)
        scheduler.start()
        try:
            yield scheduler
        finally:
            scheduler.shutdown(wait=True)


def test_background_scheduler_records_a_sample_every_interval(running, dsn, rows):
    rows.add(status="pending", created_ago=5)
    job = running.get_job(SAMPLER_JOB_ID)
    assert job.max_instances == 1 and job.coalesce
    assert wait_for(lambda: count_samples(dsn) >= 2, timeout=5)
    with psycopg.connect(dsn) as conn:
        depths = [r[0] for r in conn.execute("SELECT queue_depth FROM outbox_monitor.samples")]
    assert set(depths) == {1}


def test_sampler_keeps_running_through_a_database_outage(running, dsn, pg_cluster, caplog):
    caplog.set_level(logging.WARNING, logger="outbox_monitor.scheduler")
    dbname = conninfo_to_dict(dsn)["dbname"]
    assert wait_for(lambda: count_samples(dsn) >= 1, timeout=5)

    with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS false")
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (dbname,),
        )
        warned = wait_for(
            lambda: [
                r
                for r in caplog.records
                if "retrying at the next interval" in r.message and SAMPLER_JOB_ID in r.message
            ],
            timeout=10,
        )
        assert warned, "the outage was not logged"
        assert warned[0].levelno == logging.WARNING
        assert SAMPLER_JOB_ID in warned[0].message and dbname in warned[0].message
        admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS true")

    before = count_samples(dsn)
    assert wait_for(lambda: count_samples(dsn) >= before + 2, timeout=15), "no sample after"
    assert running.get_job(SAMPLER_JOB_ID) is not None


def test_run_scheduler_checks_the_table_before_starting(dsn):
    with pytest.raises(TableMissing, match=r"public\.nope does not exist"):
        run_scheduler(load_settings(dsn=dsn, table="public.nope"))


def test_run_scheduler_samples_until_sigterm(dsn):
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(
        OUTBOX_MONITOR_DSN=dsn,
        OUTBOX_MONITOR_SAMPLE_INTERVAL="1",
        # its own port: the default 9108 may be held by another process on the machine
        OUTBOX_MONITOR_METRICS_PORT=str(free_port()),
    )
    code = (
        "from outbox_monitor.config.settings import load_settings; "
        "from outbox_monitor.service.scheduler import run_scheduler; run_scheduler(load_settings())"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        sampled = wait_for(
            lambda: process.poll() is not None or count_samples(dsn) >= 2,
            timeout=LOADED_DEADLINE,
        )
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=LOADED_DEADLINE)
    finally:
        if process.poll() is None:  # never left running: it would sample on for the session
            process.kill()
            process.communicate()
    assert sampled and count_samples(dsn) >= 2, stderr
    assert process.returncode == 0, stderr
