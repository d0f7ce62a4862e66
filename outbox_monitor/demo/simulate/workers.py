"""The live simulation threads: the app publisher, the workers, their reconnect backoff."""

import logging
import math
import random
import socket
import threading
import time
from collections import Counter
from typing import Any

import psycopg

from outbox_monitor import outbox
from outbox_monitor.config.settings import DEFAULT_CLAIM_BATCH, Settings
from outbox_monitor.demo.outage import OUTAGE_ERROR, DownstreamError, DownstreamOutage
from outbox_monitor.demo.simulate.traffic import (
    Event,
    TrafficGenerator,
    attempt_fault,
    handler_seconds,
    rate_at,
)

log = logging.getLogger(__name__)

DUPLICATE_RATE = 0.01  # the app re-publishes an event (ON CONFLICT DO NOTHING)
DEFAULT_CRASH_EVERY = 600.0  # mean seconds between crashes of one worker
POLL_INTERVAL = 1.0  # seconds between polls of an idle worker
RESTART_DELAY = 2.0  # seconds a crashed worker takes to come back
PROGRESS_EVERY = 30.0  # seconds between progress log lines
MAX_RECONNECT_DELAY = 30.0  # seconds between reconnect attempts during an outage, at most

HOST = socket.gethostname().split(".")[0] or "localhost"


def worker_id(index: int) -> str:
    """``locked_by`` of simulated worker ``index``: ``sim-worker-<index>@<host>``."""
    return f"sim-worker-{index}@{HOST}"


class Stats:
    """Counters shared by the publisher and the worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter = Counter()

    def add(self, counts: dict[str, int]) -> None:
        """Add ``counts`` (name → increment) to the totals."""
        with self._lock:
            self.counts.update(counts)

    def snapshot(self) -> dict[str, int]:
        """The totals so far, as a plain dict."""
        with self._lock:
            return dict(self.counts)


class Worker(threading.Thread):
    """One simulated n8n worker: poll, process_batch, sometimes crash and restart.

    ``downstream_outage``: the demo's switch; a row whose event type it breaks fails with
    the broken downstream's transient error (HTTP 503) instead of its own fault.
    """

    def __init__(
        self,
        index: int,
        settings: Settings,
        *,
        seed: int,
        stop: threading.Event,
        stats: Stats,
        crash_every: float | None,
        downstream_outage: DownstreamOutage | None = None,
    ) -> None:
        super().__init__(name=f"sim-worker-{index}", daemon=True)
        self.id = worker_id(index)
        self.settings = settings
        self.seed = seed
        self.stop = stop
        self.stats = stats
        self.crash_every = crash_every
        self.rng = random.Random(f"{seed}:worker:{index}")
        self.outage = _Outage(self.id)
        self.downstream_outage = downstream_outage

    def handle(self, row: dict[str, Any]) -> None:
        """The handler: takes its time, then fails as ``attempt_fault`` says, or succeeds."""
        self.stop.wait(handler_seconds(self.rng, row["event_type"]))
        if self.downstream_outage is not None and self.downstream_outage.broken(row["event_type"]):
            raise DownstreamError(OUTAGE_ERROR)
        fault = attempt_fault(self.seed, row["event_type"], row["event_key"], row["attempts"])
        if fault is not None:
            raise fault

    def _next_crash(self) -> float:
        if not self.crash_every:
            return math.inf
        return time.monotonic() + self.rng.expovariate(1 / self.crash_every)

    def run(self) -> None:
        conn: psycopg.Connection | None = None
        next_crash = self._next_crash()
        while not self.stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self.settings.dsn or "",
                        autocommit=True,
                        application_name="outbox-sim-worker",
                    )
                if time.monotonic() >= next_crash:
                    abandoned = outbox.claim(conn, self.id, table=self.settings.table)
                    if abandoned:
                        self.stats.add({"crashes": 1, "abandoned": len(abandoned)})
                        log.info(
                            "%s crashed holding %d claimed rows (stuck until reaped)",
                            self.id,
                            len(abandoned),
                        )
                        conn.close()
                        next_crash = self._next_crash()
                        self.stop.wait(RESTART_DELAY)
                        continue
                counts = outbox.process_batch(
                    conn,
                    self.id,
                    self.handle,
                    limit=DEFAULT_CLAIM_BATCH,
                    max_attempts=self.settings.max_attempts,
                    table=self.settings.table,
                )
                self.stats.add(counts)
                if counts["claimed"] < DEFAULT_CLAIM_BATCH:
                    self.stop.wait(POLL_INTERVAL * self.rng.uniform(0.8, 1.2))
            except psycopg.Error as error:
                if conn is not None:
                    conn.close()
                conn = None
                self.stop.wait(self.outage.failed(error))
            except Exception:
                log.exception("%s: unexpected error; continuing", self.id)
                self.stop.wait(POLL_INTERVAL)
            else:
                self.outage.recovered()
        if conn is not None:
            conn.close()


class _Outage:
    """Reconnect backoff for one simulated client: 1 s doubling up to 30 s, one warning
    when the database goes away and one line when it is back (not one per attempt)."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.delay = 0.0

    def failed(self, error: Exception) -> float:
        """Record a failed attempt; returns the seconds to wait before the next one."""
        if self.delay == 0:
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            log.warning("%s: database error, reconnecting with backoff: %s", self.who, first_line)
        self.delay = min(max(self.delay * 2, POLL_INTERVAL), MAX_RECONNECT_DELAY)
        return self.delay

    def recovered(self) -> None:
        """Record a successful attempt (logs once after an outage)."""
        if self.delay:
            log.warning("%s: database reachable again", self.who)
            self.delay = 0.0


def _publish(conn: psycopg.Connection, event: Event, table: str) -> bool:
    with conn.transaction():  # the app's business transaction
        row_id = outbox.publish(
            conn,
            event_type=event.event_type,
            aggregate_type=event.aggregate_type,
            aggregate_id=event.aggregate_id,
            event_key=event.event_key,
            payload=event.payload,
            table=table,
        )
    return row_id is not None


def publish_until(
    settings: Settings,
    traffic: TrafficGenerator,
    *,
    seed: int,
    rate: float,
    duration: float | None,
    stop: threading.Event,
    stats: Stats,
) -> None:
    """The simulated app: publish events with exponential gaps at ``rate_at(rate, t)``."""
    rng = random.Random(f"{seed}:arrivals")
    outage = _Outage("simulated app")
    conn: psycopg.Connection | None = None
    started = last_log = time.monotonic()
    next_at = 0.0
    try:
        while not stop.is_set():
            elapsed = time.monotonic() - started
            if duration is not None and elapsed >= duration:
                return
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        settings.dsn or "", autocommit=True, application_name="outbox-sim-app"
                    )
                while next_at <= elapsed and not stop.is_set():
                    if rng.random() < DUPLICATE_RATE and (event := traffic.duplicate()):
                        inserted = _publish(conn, event, settings.table)
                    else:
                        inserted = _publish(conn, traffic.next_event(), settings.table)
                    stats.add({"published": 1} if inserted else {"duplicates": 1})
                    next_at += rng.expovariate(max(rate_at(rate, next_at), 1e-6))
            except psycopg.Error as error:
                if conn is not None:
                    conn.close()
                conn = None
                stop.wait(outage.failed(error))
            else:
                outage.recovered()
            if time.monotonic() - last_log >= PROGRESS_EVERY:
                last_log = time.monotonic()
                log.info("simulation of %s: %s", settings.table, stats.snapshot())
            stop.wait(min(max(next_at - (time.monotonic() - started), 0.0), 0.25))
    finally:
        if conn is not None:
            conn.close()
