"""The backfill: history rows played through the faults, their samples, one binary COPY."""

import logging
import math
import random
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg
import psycopg.errors
from psycopg import sql

from outbox_monitor.config.settings import Settings
from outbox_monitor.demo.simulate.traffic import (
    SLOW_HANDLER_SECONDS,
    Event,
    TrafficGenerator,
    fault_for,
    handler_seconds,
    rate_at,
    recorded_error,
)
from outbox_monitor.demo.simulate.workers import DEFAULT_CRASH_EVERY, POLL_INTERVAL, worker_id
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.outbox import PermanentError
from outbox_monitor.store.queries import compose

log = logging.getLogger(__name__)

BACKFILL_GAP = 3.0  # seconds before live traffic where the history ends
MIN_BACKFILL_SAMPLE_INTERVAL = 15.0  # seconds between backfilled samples, at least


def claim_wait(rng: random.Random) -> float:
    """Seconds from a row becoming due to its claim: the poll interval, sometimes a queue."""
    wait = rng.uniform(0.02, POLL_INTERVAL)
    if rng.random() < 0.03:  # the batch waited behind a slow row
        wait += rng.uniform(*SLOW_HANDLER_SECONDS) * 1.5
    return wait


# Column types of the binary COPY (``simulate_backfill_copy``), and which columns are times:
# the simulation works in seconds relative to the database's now() (negative: the past).
_COPY_TYPES = ["text"] * 4 + ["jsonb", "text", "int4", "timestamptz", "timestamptz", "text"]
_COPY_TYPES += ["text", "timestamptz", "timestamptz"]
_TIME_COLUMNS = (7, 8, 11, 12)


@dataclass
class _Timelines:
    """The state intervals of the simulated rows, from which the samples are computed."""

    due: list[tuple[float, float, float]] = field(default_factory=list)  # start, end, created
    scheduled: list[tuple[float, float, float]] = field(default_factory=list)
    processing: list[tuple[float, float]] = field(default_factory=list)
    abandoned_at: list[float] = field(default_factory=list)
    failed_at: list[float] = field(default_factory=list)
    done: list[tuple[float, float]] = field(default_factory=list)  # processed_at, latency
    statuses: Counter = field(default_factory=Counter)


def _row(
    event: Event,
    status: str,
    attempts: int,
    available: float,
    created: float,
    *,
    locked: float | None = None,
    locked_by: str | None = None,
    last_error: str | None = None,
    processed: float | None = None,
) -> tuple:
    return (
        event.event_type,
        event.aggregate_type,
        event.aggregate_id,
        event.event_key,
        event.payload,
        status,
        attempts,
        available,
        locked,
        locked_by,
        last_error,
        created,
        processed,
    )


def _play_row(
    event: Event,
    created: float,
    *,
    rng: random.Random,
    schedule: list[float],
    max_attempts: int,
    timelines: _Timelines,
) -> tuple:
    """Play one row through the worker state machine from ``created`` up to time 0."""
    attempts, last_error, available = 0, None, created
    bounce = rng.random()
    t = created + claim_wait(rng)
    while t < 0:
        end = t + handler_seconds(rng, event.event_type)
        if end >= 0:  # in flight at the start: the live workers take it from here
            break
        timelines.due.append((available, t, created))
        timelines.processing.append((t, end))
        request = f"{rng.getrandbits(32):08x}"
        fault = fault_for(
            event.event_type,
            attempts=attempts,
            transient=rng.random(),
            bounce=bounce,
            request=request,
        )
        if fault is None:
            timelines.done.append((end, end - created))
            timelines.statuses["done"] += 1
            return _row(event, "done", attempts, available, created, processed=end)
        attempts += 1
        last_error = recorded_error(fault)
        if isinstance(fault, PermanentError) or attempts >= max_attempts:
            timelines.failed_at.append(end)
            timelines.statuses["failed"] += 1
            return _row(
                event, "failed", attempts, available, created, processed=end, last_error=last_error
            )
        base = schedule[min(attempts, len(schedule)) - 1]
        available = end + base * (1 + rng.random() * 0.1)
        timelines.scheduled.append((end, available, created))
        t = available + claim_wait(rng)
    # still pending when live traffic starts: due now, or waiting in backoff
    timelines.due.append((available, math.inf, created))
    timelines.statuses["pending"] += 1
    return _row(event, "pending", attempts, available, created, last_error=last_error)


def _abandoned_row(
    event: Event, created: float, crashed_at: float, worker: str, timelines: _Timelines
) -> tuple:
    """A row claimed by a worker that crashed at ``crashed_at``: processing until reaped."""
    timelines.due.append((created, crashed_at, created))
    timelines.processing.append((crashed_at, math.inf))
    timelines.abandoned_at.append(crashed_at)
    timelines.statuses["processing"] += 1
    return _row(event, "processing", 0, created, created, locked=crashed_at, locked_by=worker)


def _crashes(
    rng: random.Random, seconds: float, workers: int, crash_every: float | None, rate: float
) -> list[list]:
    """[time, worker, rows abandoned] of the crashes during the history, oldest first."""
    if not crash_every or workers < 1:
        return []
    crashes, t = [], -seconds
    while True:
        t += rng.expovariate(workers / crash_every)
        if t >= -BACKFILL_GAP:
            return crashes
        batch = max(1, round(rate_at(rate, t) * POLL_INTERVAL / workers * rng.uniform(0.5, 1.5)))
        crashes.append([t, worker_id(rng.randrange(1, workers + 1)), batch])


def _history_rows(
    traffic: TrafficGenerator,
    *,
    seed: int,
    seconds: float,
    rate: float,
    workers: int,
    crash_every: float | None,
    schedule: list[float],
    max_attempts: int,
    timelines: _Timelines,
) -> Iterator[tuple]:
    """The rows of ``seconds`` of history ending ``BACKFILL_GAP`` s before now, oldest first.

    Arrivals follow ``rate_at``; a crash abandons the rows created in the poll interval
    before it (the batch the worker had claimed).
    """
    rng = random.Random(f"{seed}:backfill")
    crashes = deque(_crashes(rng, seconds, workers, crash_every, rate))
    t = -seconds
    while True:
        t += rng.expovariate(max(rate_at(rate, t), 1e-6))
        if t >= -BACKFILL_GAP:
            return
        event = traffic.next_event()
        while crashes and crashes[0][0] <= t:
            crashes.popleft()
        if crashes and crashes[0][0] - t < POLL_INTERVAL and crashes[0][2] > 0:
            crashes[0][2] -= 1
            yield _abandoned_row(event, t, crashes[0][0], crashes[0][1], timelines)
        else:
            yield _play_row(
                event, t, rng=rng, schedule=schedule, max_attempts=max_attempts, timelines=timelines
            )


def _active(intervals: list, times: np.ndarray) -> np.ndarray:
    """How many ``[start, end)`` intervals contain each time."""
    if not intervals:
        return np.zeros(len(times), dtype=np.int64)
    bounds = np.array(intervals)
    starts, ends = np.sort(bounds[:, 0]), np.sort(bounds[:, 1])
    return np.searchsorted(starts, times, "right") - np.searchsorted(ends, times, "right")


def _history_samples(
    timelines: _Timelines, times: np.ndarray, *, window: float, lock_timeout: float
) -> dict[str, list[Any]]:
    """The figures the sampler would have recorded at each of ``times`` (SPEC §2)."""
    due = _active(timelines.due, times)
    scheduled = _active(timelines.scheduled, times)
    stuck = np.searchsorted(np.sort(np.array(timelines.abandoned_at) + lock_timeout), times)
    failed = np.sort(np.array(timelines.failed_at))
    failed_in_window = np.searchsorted(failed, times, "right") - np.searchsorted(
        failed, times - window, "right"
    )
    pending = np.array(timelines.due + timelines.scheduled).reshape(-1, 3)
    done = np.array(sorted(timelines.done)).reshape(-1, 2)
    oldest, p50, p95 = [], [], []
    for now in times:
        mask = (pending[:, 0] <= now) & (pending[:, 1] > now)
        oldest.append(float(now - pending[mask, 2].min()) if mask.any() else None)
        low, high = np.searchsorted(done[:, 0], [now - window, now], "right")
        quantiles = np.percentile(done[low:high, 1], [50, 95]) if high > low else (None, None)
        p50.append(None if quantiles[0] is None else float(quantiles[0]))
        p95.append(None if quantiles[1] is None else float(quantiles[1]))
    return {
        "queue_depth": due.tolist(),
        "pending_total": (due + scheduled).tolist(),
        "scheduled_retries": scheduled.tolist(),
        "processing": _active(timelines.processing, times).tolist(),
        "stuck_locks": stuck.tolist(),
        "failed_in_window": failed_in_window.tolist(),
        "oldest_pending_age_seconds": oldest,
        "latency_p50_seconds": p50,
        "latency_p95_seconds": p95,
    }


def backfill_history(
    settings: Settings,
    *,
    seconds: float,
    rate: float,
    workers: int,
    seed: int,
    crash_every: float | None = DEFAULT_CRASH_EVERY,
    traffic: TrafficGenerator | None = None,
) -> dict[str, Any]:
    """Insert ``seconds`` of history that looks like what live traffic produces.

    The rows are played through the same faults (``fault_for``), backoff schedule (read
    from the shared SQL function) and timings as the live workers: done rows with
    realistic latencies, dead letters with their time of failure, retries still
    waiting, rows abandoned by crashed workers. They are streamed into the outbox by one
    binary COPY (a bulk load, ≈ 70,000 rows in a few seconds, not row by row); the
    figures the sampler would have recorded (every ``max(sample_interval, 15 s)``) are
    inserted into ``outbox_monitor.samples`` by one ``INSERT … SELECT FROM unnest``.
    One transaction: all or nothing.

    Args:
        settings: DSN, table, max attempts, window, lock timeout, sample interval.
        seconds: how far back the history starts; it ends 3 s before now.
        rate: mean events per second (swinging ±25 % like live traffic).
        workers: simulated workers (crash frequency and ``locked_by`` ids).
        seed: the random seed.
        crash_every: mean seconds between crashes of one worker (``None``: never).
        traffic: the event stream to draw from (live traffic then continues it).

    Returns:
        ``{"rows" (inserted), "samples", "done", "failed", "pending", "processing",
        "seconds_taken"}``.

    Raises:
        OutboxMonitorError: an event key of the history already exists (same seed twice).
        psycopg.Error: other database errors. Nothing is inserted then.
    """
    started = time.monotonic()
    traffic = traffic or TrafficGenerator(seed)
    timelines = _Timelines()
    with psycopg.connect(
        settings.dsn or "", autocommit=True, application_name="outbox-sim-backfill"
    ) as conn:
        schedule = [
            row[1]
            for row in conn.execute(
                compose("simulate_backoff_schedule"), {"max_attempts": settings.max_attempts}
            )
        ]
        table = sql.Identifier(*settings.table_parts)
        with conn.transaction():
            now = conn.execute(compose("db_now")).fetchone()[0]
            rows = _history_rows(
                traffic,
                seed=seed,
                seconds=seconds,
                rate=rate,
                workers=workers,
                crash_every=crash_every,
                schedule=schedule,
                max_attempts=settings.max_attempts,
                timelines=timelines,
            )
            try:
                with (
                    conn.cursor() as cursor,
                    cursor.copy(compose("simulate_backfill_copy", table=table)) as copy,
                ):
                    copy.set_types(_COPY_TYPES)
                    for row in rows:
                        values = list(row)
                        for column in _TIME_COLUMNS:
                            if values[column] is not None:
                                values[column] = now + timedelta(seconds=values[column])
                        copy.write_row(values)
            except psycopg.errors.UniqueViolation as error:
                raise OutboxMonitorError(
                    f"the simulated history collides with existing event keys: "
                    f"{error.diag.message_detail}",
                    hint="Run again (another seed) or without backfill (--backfill 0).",
                ) from error
            inserted = sum(timelines.statuses.values())  # COPY writes every row or fails
            recorded = 0
            interval = max(settings.sample_interval, MIN_BACKFILL_SAMPLE_INTERVAL)
            if seconds > interval:
                times = np.arange(-seconds + interval, -BACKFILL_GAP, interval)
                figures = _history_samples(
                    timelines, times, window=settings.window, lock_timeout=settings.lock_timeout
                )
                recorded = conn.execute(
                    compose("simulate_backfill_samples"),
                    {
                        "table_name": ".".join(settings.table_parts),
                        "sampled_in": times.tolist(),
                        **figures,
                    },
                ).rowcount
    result = {
        "rows": inserted,
        "samples": recorded,
        **{
            status: timelines.statuses[status]
            for status in ("done", "failed", "pending", "processing")
        },
        "seconds_taken": round(time.monotonic() - started, 3),
    }
    log.info("backfilled %g s of history: %s", seconds, result)
    return result
