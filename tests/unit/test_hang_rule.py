"""The hang watch's threshold and its reading of the running jobs (``hang_watch``,
``service.job_activity``), on a clock of the test's own: values by hand."""

import threading

import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.service.hang_watch import hang_after
from outbox_monitor.service.job_activity import Hang, RunningJobs


@pytest.mark.parametrize(
    ("statement_timeout", "interval", "expected"),
    [
        (5.0, 30.0, 60.0),  # the defaults: 2 intervals
        (30.0, 10.0, 90.0),  # 3 statement timeouts
        (1.0, 1.0, 5.0),  # the floor
    ],
)
def test_the_threshold_is_the_largest_of_timeouts_intervals_and_floor(
    statement_timeout, interval, expected
):
    settings = load_settings(dsn="postgresql://x@h/db", statement_timeout=statement_timeout)
    assert hang_after(settings, interval) == expected


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_job_waiting_past_the_threshold_without_any_answer_is_a_hang():
    clock = Clock()
    running = RunningJobs(clock=clock)
    entered, release = threading.Event(), threading.Event()

    def job() -> None:
        entered.set()
        release.wait(5)

    worker = threading.Thread(target=running.run("evaluator", job))
    worker.start()
    entered.wait(5)
    try:
        clock.now = 105.0  # 5 s: not more than the threshold
        assert running.hang(5.0) is None
        clock.now = 105.5
        assert running.hang(5.0) == Hang("evaluator", 5.5, 100.0)
        running.answered()  # another job was answered now: slow, not hung
        assert running.hang(5.0) is None
        clock.now = 111.0  # 5.5 s after that answer, the evaluator still waits: 11 s
        assert running.hang(5.0) == Hang("evaluator", 11.0, 105.5)
    finally:
        release.set()
        worker.join(5)
    assert running.hang(5.0) is None  # it finished: nothing runs


def test_no_running_job_is_no_hang_however_long_the_silence():
    clock = Clock()
    running = RunningJobs(clock=clock)
    running.run("sampler", lambda: None)()
    clock.now = 1000.0
    assert running.hang(5.0) is None
