"""The simulation run: the start-up check, the backfill, then live traffic until stopped."""

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from outbox_monitor.config.settings import Settings
from outbox_monitor.demo.outage import DownstreamOutage
from outbox_monitor.demo.simulate.backfill import backfill_history
from outbox_monitor.demo.simulate.traffic import TrafficGenerator
from outbox_monitor.demo.simulate.workers import DEFAULT_CRASH_EVERY, Stats, Worker, publish_until
from outbox_monitor.service.scheduler import interrupt_on_sigterm
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import check_outbox_table

log = logging.getLogger(__name__)


def run_simulation(
    settings: Settings,
    *,
    rate: float = 20.0,
    workers: int = 4,
    duration: float | None = None,
    backfill: float = 3600.0,
    stop_event: threading.Event | None = None,
    seed: int | None = None,
    crash_every: float | None = DEFAULT_CRASH_EVERY,
    on_ready: Callable[[dict[str, Any]], None] | None = None,
    downstream_outage: DownstreamOutage | None = None,
    event_types: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Run realistic outbox traffic against ``settings.dsn`` until stopped.

    First checks the table and inserts ``backfill`` seconds of history (``backfill_history``),
    then publishes ≈ ``rate`` events per second from the calling thread while ``workers``
    threads each loop ``outbox.process_batch`` on their own connection (``locked_by`` =
    ``sim-worker-<n>@<host>``, polling every ~1 s). Faults: see the package docstring.
    Workers never reap: stuck locks stay for a human (``outbox-monitor reap``).

    Args:
        settings: DSN, table, max attempts; window/lock timeout/sample interval for the
            backfilled samples.
        rate: mean events per second (the live rate swings ±25 % over 20 minutes).
        workers: worker threads.
        duration: seconds of live traffic, or ``None`` to run until ``stop_event`` or Ctrl-C.
        backfill: seconds of history to insert first (0 for none).
        stop_event: set it (from another thread) to stop; workers finish their batch.
        seed: random seed; ``None`` picks one (logged and returned).
        crash_every: mean seconds between crashes of one worker; ``None`` disables them.
        on_ready: called with the backfill counts (``backfill_history``'s result, ``{}``
            without backfill) once the history is in and live traffic starts.
        downstream_outage: the demo's switch of broken downstreams (``Worker``).
        event_types: publish only these types of the mix (``TrafficGenerator``); ``None``:
            all of them.

    Returns:
        Counts: ``{"seed", "backfill": {...}, "published", "duplicates", "claimed",
        "acked", "retried", "dead_lettered", "lost", "unrecorded", "crashes", "abandoned",
        "seconds"}``.

    Ctrl-C (and SIGTERM, in the main thread) stops live traffic cleanly: the workers
    finish their batch and the counts are returned.

    Raises:
        TableMissing, ColumnsMissing, SchemaNotInitialised, DatabaseUnavailable: from the
            start-up check. Errors during live traffic are logged and retried instead.
    """
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    with Database(settings) as db:
        check_outbox_table(db)
    stop = stop_event or threading.Event()
    traffic = TrafficGenerator(seed, event_types)
    backfilled = (
        backfill_history(
            settings,
            seconds=backfill,
            rate=rate,
            workers=workers,
            seed=seed,
            crash_every=crash_every,
            traffic=traffic,
        )
        if backfill > 0
        else {}
    )
    stats = Stats()
    threads = [
        Worker(
            index,
            settings,
            seed=seed,
            stop=stop,
            stats=stats,
            crash_every=crash_every,
            downstream_outage=downstream_outage,
        )
        for index in range(1, workers + 1)
    ]
    log.info(
        "simulation (seed %d): %g events/s, %d workers on %s", seed, rate, workers, settings.table
    )
    started = time.monotonic()
    for thread in threads:
        thread.start()
    if on_ready is not None:
        on_ready(backfilled)
    try:
        with interrupt_on_sigterm():
            publish_until(
                settings, traffic, seed=seed, rate=rate, duration=duration, stop=stop, stats=stats
            )
    except KeyboardInterrupt:
        log.info("simulation interrupted; stopping the workers")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    counts = dict.fromkeys(
        (
            "published",
            "duplicates",
            "claimed",
            "acked",
            "retried",
            "dead_lettered",
            "lost",
            "unrecorded",
            "crashes",
            "abandoned",
        ),
        0,
    )
    counts.update(stats.snapshot())
    return {
        "seed": seed,
        "backfill": backfilled,
        **counts,
        "seconds": round(time.monotonic() - started, 3),
    }
