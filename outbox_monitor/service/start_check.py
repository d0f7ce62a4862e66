"""The start-up check of one outbox's scheduler (issue 29 item 13): run at start and, when the
database cannot be reached then, again by the job ``start_check`` until it passes.

A scheduler restarted during an outage (a node lost, a deploy) must start, serve ``/healthz``,
post ``database-unreachable`` after its threshold (``alerts.outage``), keep retrying and
resolve when the database answers — as the fleet's scheduler does for an unreachable outbox
(``fleet_scheduler.open_members``). Only a configuration that cannot work stops it: at start
(the error raised, exit non-zero), or, when the database was unreachable at start, as soon as
the check can run (the scheduler is shut down and ``StartCheck.failure`` holds the error
``scheduler.run_scheduler`` raises then).
"""

import logging
from collections.abc import Callable

from apscheduler.schedulers.base import BaseScheduler

from outbox_monitor.errors import DatabaseUnavailable, OutboxMonitorError
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.service.jobs import add_interval_job, guarded
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import describe_target
from outbox_monitor.store.schema import check_outbox_table
from outbox_monitor.store.standby import check_write_target

log = logging.getLogger("outbox_monitor.scheduler")

START_CHECK_JOB_ID = "start_check"


class StartCheck:
    """The checks a scheduler of one outbox runs before it may work: its writes do not reach
    a hot standby (``check_write_target``) and its table matches SPEC §1 with the schema's
    version (``check_outbox_table``).

    Args:
        db: the Database of the figures (``OUTBOX_MONITOR_DSN``).
        primary: the Database of the writes (``db`` when there is no primary DSN).
        outbox: a fleet's outbox name: its errors' messages start with ``outbox "<name>":``.
    """

    def __init__(self, db: Database, primary: Database, *, outbox: str | None = None) -> None:
        self.db, self.primary, self.outbox = db, primary, outbox
        self.passed = False
        self.failure: OutboxMonitorError | None = None
        """The configuration error the deferred check found (the scheduler was shut down)."""

    def run(self) -> None:
        """Run both checks once; ``passed`` is ``True`` after.

        Raises:
            DatabaseUnavailable: the database cannot be reached (retry later).
            ConfigError, TableMissing, ColumnsMissing, SchemaNotInitialised,
            PermissionDenied: a configuration that cannot work (naming the outbox of a
                fleet).
        """
        try:
            found = check_write_target(self.db, self.primary)
            if found.in_recovery:
                log.info(
                    "figures come from the %s; the scheduler writes to %s",
                    found.describe(),
                    describe_target(self.primary.settings.dsn),
                )
            check_outbox_table(self.db)
        except DatabaseUnavailable:
            raise
        except OutboxMonitorError as error:
            if self.outbox is not None:
                error.args = (f'outbox "{self.outbox}": {error.args[0]}', *error.args[1:])
            raise
        self.passed = True

    def at_start(self, status: SchedulerStatus) -> None:
        """The check at start: an unreachable database is logged and recorded in ``status``
        (``/healthz`` says it), never raised; the job of ``add_start_check_job`` retries.

        Raises:
            As ``run``, but ``DatabaseUnavailable``.
        """
        try:
            self.run()
        except DatabaseUnavailable as error:
            status.database_failed(error)
            log.warning(
                "%s at %s is unreachable at start: %s; the scheduler starts, serves /healthz, "
                "retries with backoff and alerts database-unreachable after its threshold",
                self.db.table_name,
                describe_target(self.db.settings.dsn),
                str(error).splitlines()[0],
            )

    def raise_failure(self) -> None:
        """Raise the configuration error the deferred check found, if any (after the
        scheduler stopped)."""
        if self.failure is not None:
            raise self.failure


def add_start_check_job(
    scheduler: BaseScheduler,
    check: StartCheck,
    wrap: Callable[[Callable[[], None]], Callable[[], None]],
    *,
    tick: float,
    target: str,
) -> None:
    """Retry ``check`` every ``tick`` seconds until it passes, then remove the job. ``wrap``
    (``JobRuntime.in_every_process``) reports the database's health and backs off while it
    is unreachable. A configuration error found is logged, kept in ``check.failure`` and
    shuts the scheduler down: the process stops as it would have at start."""

    def retry() -> None:
        try:
            check.run()
        except DatabaseUnavailable:
            raise
        except OutboxMonitorError as error:
            check.failure = error
            log.error("the scheduler stops: %s", error)
            scheduler.shutdown(wait=False)
            return
        log.info("%s is reachable: the start-up check passed", target)
        scheduler.remove_job(START_CHECK_JOB_ID)

    add_interval_job(
        scheduler,
        START_CHECK_JOB_ID,
        guarded(START_CHECK_JOB_ID, wrap(retry), target=target),
        seconds=tick,
        name="start-up check, retried until the database answers",
    )
