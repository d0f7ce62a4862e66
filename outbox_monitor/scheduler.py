"""The background process: APScheduler jobs (the sampler; alert evaluation joins later).

Every job is wrapped by ``guarded``: an error is logged with the job's name and target and
the job runs again at its next interval — a background loop never dies on one error.
"""

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.schedulers.blocking import BlockingScheduler

from outbox_monitor.config import Settings
from outbox_monitor.db import Database, describe_target
from outbox_monitor.errors import DatabaseUnavailable, OutboxMonitorError
from outbox_monitor.sampler import record_sample
from outbox_monitor.schema import check_outbox_table

log = logging.getLogger(__name__)

SAMPLER_JOB_ID = "sampler"


def guarded(name: str, job: Callable[[], Any], *, target: str) -> Callable[[], None]:
    """Wrap a job so that no exception escapes it; each one is logged with context.

    Args:
        name: the job's name for the log (``"sampler"``).
        job: the callable to run.
        target: what it works on, for the log (``public.integration_outbox at host/db``).

    Returns:
        A callable for APScheduler: ``DatabaseUnavailable`` is logged as a warning (the
        next interval retries), other ``OutboxMonitorError`` as an error with its hint,
        anything else with its traceback.
    """

    def run() -> None:
        try:
            job()
        except DatabaseUnavailable as error:
            message = str(error).splitlines()[0]
            log.warning("%s on %s: %s; retrying at the next interval", name, target, message)
        except OutboxMonitorError as error:
            log.error("%s on %s failed: %s", name, target, error)
        except Exception:
            log.exception("%s on %s failed unexpectedly; it runs again next interval", name, target)

    run.__name__ = f"guarded_{name}"
    return run


def add_sampler_job(scheduler: BaseScheduler, db: Database) -> None:
    """Add the sampler (``sampler.record_sample``) every ``settings.sample_interval`` s.

    One instance at a time, missed runs coalesced, first run immediately.
    """
    target = f"{db.table_name} at {describe_target(db.settings.dsn)}"
    scheduler.add_job(
        guarded(SAMPLER_JOB_ID, lambda: record_sample(db), target=target),
        "interval",
        seconds=db.settings.sample_interval,
        id=SAMPLER_JOB_ID,
        name="record headline sample",
        max_instances=1,
        coalesce=True,
        next_run_time=datetime.now(UTC),
        misfire_grace_time=max(1, int(db.settings.sample_interval)),
        replace_existing=True,
    )


def build_scheduler(db: Database, *, blocking: bool) -> BaseScheduler:
    """Assemble the scheduler with every background job of the product.

    Jobs today: the sampler (``add_sampler_job``). The alerting issue adds rule
    evaluation and notification jobs here, each through ``guarded``.

    Args:
        db: the connector the jobs use (one pool for the process).
        blocking: ``True`` for a ``BlockingScheduler`` (``outbox-monitor scheduler``),
            ``False`` for a ``BackgroundScheduler`` running in threads beside other work
            (dashboard ``--with-scheduler``, demo, tests).

    Returns:
        The scheduler, not started: call ``start()`` (and ``shutdown()`` when done).
    """
    # APScheduler logs every run at INFO ("Running job …"); keep errors and skips only,
    # unless the application configured that logger itself.
    executor_log = logging.getLogger("apscheduler.executors.default")
    if executor_log.level == logging.NOTSET:
        executor_log.setLevel(logging.WARNING)
    scheduler_class = BlockingScheduler if blocking else BackgroundScheduler
    scheduler = scheduler_class(timezone=UTC)
    add_sampler_job(scheduler, db)
    return scheduler


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Inside the block, SIGTERM raises ``KeyboardInterrupt`` like Ctrl-C does.

    Only in the main thread (elsewhere signals cannot be handled); the previous handler
    is restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_scheduler(settings: Settings) -> None:
    """``outbox-monitor scheduler``: run every background job until SIGINT or SIGTERM.

    Checks the outbox table first, then blocks; a database outage later is logged and
    retried at each interval, never fatal.

    Args:
        settings: connection, table and the sample interval/retention.

    Raises:
        DatabaseUnavailable, TableMissing, ColumnsMissing, SchemaNotInitialised: from
            the start-up check, with the fix in the message.
    """
    with Database(settings) as db:
        check_outbox_table(db)
        scheduler = build_scheduler(db, blocking=True)
        log.info(
            "scheduler started: sampling %s every %g s (retention %g s); Ctrl-C to stop",
            db.table_name,
            settings.sample_interval,
            settings.sample_retention,
        )
        with interrupt_on_sigterm():
            try:
                scheduler.start()
            except KeyboardInterrupt:
                log.info("scheduler stopping")
            finally:
                if scheduler.running:
                    scheduler.shutdown(wait=True)
