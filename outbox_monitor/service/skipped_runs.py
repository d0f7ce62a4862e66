"""APScheduler's "skipped: maximum number of running instances reached" WARNING, once a minute.

APScheduler logs that line every time a job is due while its previous run still goes on.
With a database that accepts connections and never answers, every job of a scheduler waits
out its connect timeout, and the line came ≈ 5 times a second (a hostile pass of issue 29)
— burying the lines that say what is wrong (the hang watch's, the outage's). The filter keeps
a job's first such line, then at most one per ``SKIPPED_LOG_INTERVAL_S`` seconds, saying how
many runs were skipped since the last line.
"""

import logging
import threading
import time

SKIPPED_LOG_INTERVAL_S = 60.0
"""A job's skipped-run WARNING is logged at most once in this many seconds."""
_SKIPPED = 'Execution of job "%s" skipped: maximum number of running instances reached (%d)'
"""APScheduler 3's message (``schedulers/base.py``), matched exactly: any other line passes."""


class SkippedRunsFilter(logging.Filter):
    """The filter of ``apscheduler.scheduler``'s records: per job, the first skipped-run line,
    then one per ``interval`` seconds with the count skipped since; every other record
    passes unchanged.

    Args:
        interval: seconds between two lines of one job (``SKIPPED_LOG_INTERVAL_S``).
        clock: monotonic seconds (``time.monotonic``; tests pass their own).
    """

    def __init__(self, interval: float = SKIPPED_LOG_INTERVAL_S, clock=time.monotonic) -> None:
        super().__init__()
        self.interval, self.clock = interval, clock
        self._last: dict[str, tuple[float, int]] = {}  # job → (last line, skipped since)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != _SKIPPED or not isinstance(record.args, tuple) or not record.args:
            return True
        job = str(getattr(record.args[0], "id", record.args[0]))  # its text holds the next run
        now = self.clock()
        with self._lock:
            last, skipped = self._last.get(job, (None, 0))
            if last is not None and now - last < self.interval:
                self._last[job] = (last, skipped + 1)
                return False
            self._last[job] = (now, 0)
        if skipped:
            record.msg = (
                f"{record.getMessage()}; {skipped} more run(s) skipped since the last such line"
            )
            record.args = None
        return True


def quiet_skipped_runs(logger: logging.Logger) -> None:
    """Put one ``SkippedRunsFilter`` on ``logger`` (``apscheduler.scheduler``); a no-op when it
    has one already (each scheduler this process builds calls it)."""
    if not any(isinstance(f, SkippedRunsFilter) for f in logger.filters):
        logger.addFilter(SkippedRunsFilter())
