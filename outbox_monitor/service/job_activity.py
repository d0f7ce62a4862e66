"""What one outbox's jobs are doing now, for the hang watch (``hang_watch``): since when each
of its jobs runs (``RunningJobs``, filled by ``TimedJobs``, the scheduler as the jobs see it)
and when the database last answered one of them (``RunningJobs.answered``, from
``jobs.JobRuntime``)."""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Hang:
    """An outbox whose database gives no answer: its ``job`` has run ``seconds`` and no job
    was answered since ``silent_since`` (``time.monotonic()`` seconds)."""

    job: str
    seconds: float
    silent_since: float


class RunningJobs:
    """Since when each job of one outbox runs, and its database's last answer (thread-safe,
    a dict and a float behind one lock: the jobs note their start and end, the hang watch
    reads).

    Args:
        clock: monotonic seconds (tests may pass their own).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        self._answered = clock()

    def run(self, job_id: str, job: Callable[..., Any]) -> Callable[..., Any]:
        """``job`` noting its start and end under ``job_id`` (one instance a job id, as
        every job of the scheduler has ``max_instances=1``)."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self._started[job_id] = self.clock()
            try:
                return job(*args, **kwargs)
            finally:
                with self._lock:
                    self._started.pop(job_id, None)

        timed.__name__ = getattr(job, "__name__", "job")
        return timed

    def answered(self) -> None:
        """A job reached the database and finished (``jobs.JobRuntime``'s success path)."""
        with self._lock:
            self._answered = self.clock()

    def hang(self, after: float) -> Hang | None:
        """The longest-running job when it has run more than ``after`` seconds AND no job
        was answered for more than ``after`` seconds; else ``None`` (a slow job while others
        are answered is no hang)."""
        with self._lock:
            now = self.clock()
            if not self._started or now - self._answered <= after:
                return None
            job, started = min(self._started.items(), key=lambda item: item[1])
            if now - started <= after:
                return None
            return Hang(job, now - started, self._answered)


class TimedJobs:
    """A scheduler (or ``fleet_scheduler.OutboxJobs``) whose ``add_job`` runs each job
    through ``RunningJobs.run`` under its id; everything else is the scheduler's."""

    def __init__(self, scheduler: Any, running: RunningJobs) -> None:
        self.scheduler, self.running = scheduler, running

    def add_job(self, func: Any, trigger: Any = None, *, id: str, **kwargs: Any) -> Any:
        return self.scheduler.add_job(self.running.run(id, func), trigger, id=id, **kwargs)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.scheduler, attribute)
