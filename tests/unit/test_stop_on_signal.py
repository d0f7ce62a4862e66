"""A scheduler asked to stop by SIGTERM stops, whenever the signal comes (CI saw one keep
running: the signal came while APScheduler called a listener, which catches BaseException,
so the KeyboardInterrupt it used to raise was swallowed)."""

import os
import signal
import threading
import time

from apscheduler.events import EVENT_JOB_ADDED

from outbox_monitor.service.outbox_schedule import new_scheduler
from outbox_monitor.service.scheduler import serve_until_stopped


def test_sigterm_during_a_listener_call_at_start_stops_the_scheduler():
    scheduler = new_scheduler(blocking=True)
    in_listener = threading.Event()

    def slow_listener(event) -> None:  # the signal lands while APScheduler calls it
        in_listener.set()
        time.sleep(1.0)

    scheduler.add_listener(slow_listener, EVENT_JOB_ADDED)
    scheduler.add_job(lambda: None, "interval", seconds=60, id="idle")

    def terminate() -> None:
        assert in_listener.wait(10)
        os.kill(os.getpid(), signal.SIGTERM)

    def give_up() -> None:  # a scheduler that ignored the signal: fail, never hang the run
        if scheduler.running:
            scheduler.shutdown(wait=False)

    threading.Thread(target=terminate, daemon=True).start()
    guard = threading.Timer(20, give_up)
    guard.start()
    started = time.monotonic()
    try:
        serve_until_stopped(scheduler, None)
    finally:
        guard.cancel()
    took = time.monotonic() - started
    assert not scheduler.running
    assert took < 10, f"stopped only by the 20 s guard after {took:.1f} s: the signal was lost"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is restored
