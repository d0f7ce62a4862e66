"""The hang watch: a database that accepts connections but answers nothing is never silent.

A server that hangs (frozen, SIGSTOP; a host that keeps the TCP connection but stops the
process) raises nothing: no ``statement_timeout`` fires (it is the server's), the jobs of its
outbox just wait, and so would the database-unreachable alert (``alerts.outage``) and the
stall watch (``alerts.stall``) that those jobs drive. The hang watch runs apart from them —
one job of the scheduler, ``hang_watch``, on an executor of its own (``HANG_WATCH_EXECUTOR``,
one thread) that no job of an outbox can occupy — and each tick, for each outbox:

- a job of the outbox has run longer than the threshold (``hang_after``) while none of its
  jobs was answered by the database for longer than that (``service.job_activity.RunningJobs``: a
  slow job while others are answered is no hang): the outbox's ``DatabaseHealth`` fails with
  ``DatabaseUnavailable("no answer from <target> within N s: the database hangs")``, its
  outage starting at the last answer (so the leader posts at once, the threshold being at
  least the alert's delay), ``/healthz`` and ``outbox_monitor_up`` show it
  (``SchedulerStatus.database_failed``) and the stall watch counts from the database's
  return (``StallWatch.lost_database``: no second, "alerting is stalled", message) — once
  per hang;
- while it hangs, the watch ticks the outbox's ``DatabaseHealth`` itself (its sender, which
  would, waits too): one database-unreachable message per route, Slack directly, naming the
  outbox;
- the hang ends when a job is answered again: that job reports the success
  (``DatabaseHealth.succeeded``), which records the outage and queues its resolve, sent by
  the leader's sender as after any outage.
"""

import logging
from collections.abc import Sequence
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor

from outbox_monitor.alerts.stall import StallWatch
from outbox_monitor.config.settings import Settings
from outbox_monitor.errors import DatabaseUnavailable
from outbox_monitor.service.jobs import JobRuntime, guarded

log = logging.getLogger("outbox_monitor.scheduler")

HANG_WATCH_JOB_ID = "hang_watch"
HANG_WATCH_EXECUTOR = "hang_watch"
HANG_STATEMENT_TIMEOUTS = 3
HANG_INTERVALS = 2
HANG_FLOOR_SECONDS = 5.0


def hang_after(settings: Settings, interval: float) -> float:
    """Seconds without an answer after which an outbox's database is said to hang: the
    largest of ``HANG_STATEMENT_TIMEOUTS`` (3) statement timeouts (a job's statements each
    end within one, or fail), ``HANG_INTERVALS`` (2) evaluation intervals (a pass and the
    next one's start) and ``HANG_FLOOR_SECONDS`` (5 s). Defaults (5 s timeout, 30 s
    interval): 60 s."""
    return max(
        HANG_STATEMENT_TIMEOUTS * settings.statement_timeout,
        HANG_INTERVALS * interval,
        HANG_FLOOR_SECONDS,
    )


class HangWatch:
    """The hang watch of one outbox (see the module docstring); ``check`` runs each tick, in
    the ``hang_watch`` job only.

    Args:
        runtime: the outbox's jobs (``running``, ``health``, ``status``, ``leadership``).
        stall: its stall watch (``None``: no rules).
        after: the threshold in seconds (``hang_after``).
        target: the database, for the message (``<table> at <host/db>``).
        tick: seconds between checks wanted (the outbox's watchdog tick).
    """

    def __init__(
        self,
        runtime: JobRuntime,
        stall: StallWatch | None,
        *,
        after: float,
        target: str,
        tick: float,
    ) -> None:
        self.runtime, self.stall, self.after, self.target = runtime, stall, after, target
        self.tick = tick
        self.hanging = False

    def check(self) -> bool:
        """Fail the outbox's database health once per hang and tick its alert while it
        hangs; never touches the database. Returns whether it hangs."""
        runtime = self.runtime
        hang = runtime.running.hang(self.after)
        if hang is None:
            if self.hanging:
                log.info("%s answers again", self.target)
            self.hanging = False
            return False
        if not self.hanging:
            self.hanging = True
            error = DatabaseUnavailable(
                f"no answer from {self.target} within {self.after:g} s: the database hangs"
            )
            log.error("%s (its %s job has waited %.0f s)", error.args[0], hang.job, hang.seconds)
            runtime.status.database_failed(error)
            if self.stall is not None:
                self.stall.lost_database()
            runtime.health.failed(
                error, was_leader=runtime.leadership.held, since=hang.silent_since
            )
        runtime.health.tick()
        return True


def add_hang_watch_job(scheduler: Any, watches: Sequence[HangWatch]) -> None:
    """Add the ``hang_watch`` job on its own one-thread executor (``HANG_WATCH_EXECUTOR``)
    every shortest ``HangWatch.tick``: ``HangWatch.check`` of each outbox in turn."""
    tick = min(each.tick for each in watches)
    executor_log = logging.getLogger(f"apscheduler.executors.{HANG_WATCH_EXECUTOR}")
    if executor_log.level == logging.NOTSET:  # its "Running job …" line every tick
        executor_log.setLevel(logging.WARNING)
    scheduler.add_executor(ThreadPoolExecutor(1), alias=HANG_WATCH_EXECUTOR)

    def watch() -> None:
        for each in watches:
            each.check()

    scheduler.add_job(
        guarded(HANG_WATCH_JOB_ID, watch, target=f"{len(watches)} outbox(es)"),
        "interval",
        seconds=tick,
        id=HANG_WATCH_JOB_ID,
        name="watch for databases that give no answer",
        executor=HANG_WATCH_EXECUTOR,
        max_instances=1,
        coalesce=True,
        misfire_grace_time=max(1, int(tick)),
        replace_existing=True,
    )
