"""Realistic outbox traffic: an app publishing events and workers with real-world faults.

Used by ``outbox-monitor demo`` and ``outbox-monitor simulate``. The "app" publishes a mix
of event types through ``outbox.publish``; worker threads loop ``outbox.process_batch``
(SPEC §1 claim/ack/retry/dead-letter) with handlers that inject the faults operators meet:
transient upstream errors (~4 % of attempts), one event type failing permanently (the CRM
rejects its API key), a slow handler, e-mail bounces, and rare worker crashes that leave
their claimed batch locked (stuck locks, for a human to reap). Before live traffic, a
backfill inserts the same kind of history in bulk so charts are not empty at start.

Every random choice flows from one seed. Faults have one definition (``fault_for``); a live
attempt draws from a hash of ``(seed, event_key, attempts)``, so whichever worker claims a
row meets the same fault, and the backfill plays its rows through the same definition.

Modules: ``traffic`` (event mix, event stream, faults, handler timings), ``backfill``
(history rows, their samples, the COPY), ``workers`` (the app publisher, the worker
threads, reconnect backoff), ``run`` (``run_simulation``).
"""

from outbox_monitor.demo.simulate.backfill import backfill_history
from outbox_monitor.demo.simulate.run import run_simulation
from outbox_monitor.demo.simulate.traffic import (
    EVENT_MIX,
    PERMANENT_EVENT_TYPE,
    SLOW_EVENT_TYPE,
    TRANSIENT_ERROR_RATE,
    TrafficGenerator,
    attempt_fault,
    recorded_error,
)
from outbox_monitor.demo.simulate.workers import DEFAULT_CRASH_EVERY

__all__ = [
    "DEFAULT_CRASH_EVERY",
    "EVENT_MIX",
    "PERMANENT_EVENT_TYPE",
    "SLOW_EVENT_TYPE",
    "TRANSIENT_ERROR_RATE",
    "TrafficGenerator",
    "attempt_fault",
    "backfill_history",
    "recorded_error",
    "run_simulation",
]
