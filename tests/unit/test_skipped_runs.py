"""APScheduler's skipped-run WARNING, once per job per interval (a hostile pass of issue 29: a
database that never answers made every job's runs skip, ≈ 5 lines a second)."""

import logging
import threading
import time

from outbox_monitor.service.outbox_schedule import new_scheduler
from outbox_monitor.service.skipped_runs import SkippedRunsFilter

SKIPPED = "maximum number of running instances reached"


def test_a_hung_job_logs_its_skipped_runs_once_not_at_every_tick(caplog):
    release = threading.Event()
    started = threading.Event()

    def hung() -> None:  # as a job waiting on a database that never answers
        started.set()
        release.wait(10)

    scheduler = new_scheduler(blocking=False)
    scheduler.add_job(hung, "interval", seconds=0.05, id="sampler", name="sampler")
    with caplog.at_level(logging.WARNING, logger="apscheduler.scheduler"):
        scheduler.start()
        try:
            assert started.wait(10)
            deadline = time.monotonic() + 1.5  # ≈ 30 due ticks while the first run hangs
            while time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            release.set()
            scheduler.shutdown(wait=True)
    skipped = [r for r in caplog.records if SKIPPED in r.getMessage()]
    assert len(skipped) == 1, [r.getMessage() for r in skipped]
    assert 'Execution of job "sampler' in skipped[0].getMessage()


def test_the_next_line_after_the_interval_counts_what_was_skipped():
    now = [0.0]
    kept = SkippedRunsFilter(interval=60, clock=lambda: now[0])

    def record(job: str) -> logging.LogRecord:
        return logging.LogRecord(
            "apscheduler.scheduler",
            logging.WARNING,
            __file__,
            1,
            'Execution of job "%s" skipped: maximum number of running instances reached (%d)',
            (job, 1),
            None,
        )

    assert kept.filter(record("a"))  # the first line of a job
    now[0] = 0.2
    assert not kept.filter(record("a")) and not kept.filter(record("a"))
    assert kept.filter(record("b"))  # another job's first line
    now[0] = 60.5
    line = record("a")
    assert kept.filter(line)
    assert line.getMessage() == (
        'Execution of job "a" skipped: maximum number of running instances reached (1); '
        "2 more run(s) skipped since the last such line"
    )
    other = logging.LogRecord("apscheduler.scheduler", logging.INFO, __file__, 1, "x", (), None)
    assert kept.filter(other)
