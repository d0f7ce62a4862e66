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
"""

import hashlib
import itertools
import logging
import math
import random
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg
import psycopg.errors
from psycopg import sql

from outbox_monitor import outbox
from outbox_monitor.config import DEFAULT_CLAIM_BATCH, Settings
from outbox_monitor.db import Database
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.outbox import PermanentError
from outbox_monitor.queries import compose
from outbox_monitor.scheduler import interrupt_on_sigterm
from outbox_monitor.schema import check_outbox_table

log = logging.getLogger(__name__)

PERMANENT_EVENT_TYPE = "crm.upsert"  # the CRM rejects the API key: every attempt dead-letters
SLOW_EVENT_TYPE = "invoice.sent"  # renders a PDF and uploads it: 0.5–2 s per row
# Per attempt, every type but the permanent one. At 5 % the retried rows (≥ 30 s latency)
# would be exactly the slowest 5 % and P95 would flip between ~2 s and ~31 s from one
# minute to the next; at 4 % P95 shows the handlers and P99 the retries.
TRANSIENT_ERROR_RATE = 0.04
BOUNCE_RATE = 0.015  # notification.email rows whose recipient does not exist (permanent)
DUPLICATE_RATE = 0.01  # the app re-publishes an event (ON CONFLICT DO NOTHING)
DEFAULT_CRASH_EVERY = 600.0  # mean seconds between crashes of one worker
POLL_INTERVAL = 1.0  # seconds between polls of an idle worker
RESTART_DELAY = 2.0  # seconds a crashed worker takes to come back
FAST_HANDLER_SECONDS = (0.005, 0.05)  # a typical HTTP call
SLOW_HANDLER_SECONDS = (0.5, 2.0)
RATE_WAVE = (0.25, 1200.0)  # the traffic rate swings ±25 % over 20 minutes
BACKFILL_GAP = 3.0  # seconds before live traffic where the history ends
MIN_BACKFILL_SAMPLE_INTERVAL = 15.0  # seconds between backfilled samples, at least
PROGRESS_EVERY = 30.0  # seconds between progress log lines
MAX_RECONNECT_DELAY = 30.0  # seconds between reconnect attempts during an outage, at most

HOST = socket.gethostname().split(".")[0] or "localhost"


class HTTPError(Exception):
    """A simulated HTTP error response from a downstream API."""


class SMTPError(Exception):
    """A simulated temporary SMTP failure."""


@dataclass(frozen=True)
class EventKind:
    """One event type of the mix: its share of traffic and the entity it is about."""

    event_type: str
    weight: float
    aggregate_type: str


EVENT_MIX: tuple[EventKind, ...] = (
    EventKind("order.paid", 0.25, "order"),
    EventKind("payment.captured", 0.15, "order"),
    EventKind("notification.email", 0.28, "customer"),
    EventKind("shipment.created", 0.12, "order"),
    EventKind("notification.slack", 0.09, "order"),
    EventKind(SLOW_EVENT_TYPE, 0.06, "order"),
    EventKind(PERMANENT_EVENT_TYPE, 0.05, "customer"),
)

_TRANSIENT: dict[str, Callable[[str], Exception]] = {
    "order.paid": lambda req: HTTPError(
        f"HTTP 503 from api.erp.example: upstream timeout req_{req}"
    ),
    "payment.captured": lambda req: HTTPError(
        f"HTTP 429 from api.stripe.example: rate limit exceeded (request req_{req})"
    ),
    "notification.email": lambda req: SMTPError(
        "SMTP 421 4.7.0 smtp.mail.example: too many connections, try again later"
    ),
    "shipment.created": lambda req: HTTPError(
        f"HTTP 502 from api.carrier.example: bad gateway (trace {req})"
    ),
    "notification.slack": lambda req: ConnectionResetError(
        "[Errno 104] Connection reset by peer: hooks.slack.example"
    ),
    SLOW_EVENT_TYPE: lambda req: TimeoutError(
        "read timed out after 10 s: POST https://api.billing.example/v1/invoices/send"
    ),
}


@dataclass(frozen=True)
class Event:
    """One event the simulated app publishes (the arguments of ``outbox.publish``)."""

    event_type: str
    aggregate_type: str
    aggregate_id: str
    event_key: str
    payload: dict[str, Any]


def rate_at(rate: float, t: float) -> float:
    """Events per second at ``t`` seconds from the start of live traffic (negative in the
    backfill): ``rate`` swinging ±25 % over 20 minutes, so charts show a living system."""
    amplitude, period = RATE_WAVE
    return rate * (1 + amplitude * math.sin(2 * math.pi * t / period))


class TrafficGenerator:
    """Deterministic event stream: the same seed gives the same events in the same order.

    Event keys are unique per generator (they embed a sequence number) and follow the
    SPEC style ``order.paid:<order>:pay_<n>``; orders and customers recur, so an
    aggregate's timeline shows several events.
    """

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"{seed}:events")
        # a run-specific start, so two runs on one database do not reuse event keys
        self.sequence = self.rng.randrange(1_000_000, 9_000_000)
        self.next_order = self.rng.randrange(100_000, 900_000)
        self.recent: deque[tuple[int, str, float, str]] = deque(maxlen=300)
        self.published: deque[Event] = deque(maxlen=500)
        self._kinds = [kind.event_type for kind in EVENT_MIX]
        self._cum_weights = list(itertools.accumulate(kind.weight for kind in EVENT_MIX))

    def _customer(self) -> str:
        return f"cus_{self.rng.randrange(1, 40_000):05d}"

    def _new_order(self) -> tuple[int, str, float, str]:
        self.next_order += 1
        currency = self.rng.choice(("EUR", "EUR", "USD", "GBP"))
        order = (self.next_order, self._customer(), round(self.rng.uniform(9, 480), 2), currency)
        self.recent.append(order)
        return order

    def next_event(self) -> Event:
        """The next event of the mix (weights of ``EVENT_MIX``).

        ``order.paid`` opens a new order; the other events follow one of the 300 most
        recent orders (its shipment, invoice, notifications, CRM update).
        """
        self.sequence += 1
        n = self.sequence
        event_type = self.rng.choices(self._kinds, cum_weights=self._cum_weights)[0]
        if event_type == "order.paid" or not self.recent:
            order, customer, amount, currency = self._new_order()
        else:
            order, customer, amount, currency = self.rng.choice(self.recent)
        money = {"value": amount, "currency": currency}
        if event_type == "order.paid":
            payment = f"pay_{n}"
            key = f"order.paid:{order}:{payment}"
            items = [
                {"sku": f"SKU-{self.rng.randrange(1000, 9999)}", "qty": self.rng.randint(1, 3)}
                for _ in range(self.rng.randint(1, 4))
            ]
            payload = {
                "order_id": order,
                "customer_id": customer,
                "amount": money,
                "payment_id": payment,
                "items": items,
                "channel": self.rng.choice(("web", "web", "ios", "android")),
            }
        elif event_type == "payment.captured":
            key = f"payment.captured:{order}:ch_{n}"
            payload = {
                "order_id": order,
                "charge_id": f"ch_{n}",
                "amount": money,
                "provider": "stripe",
                "captured": True,
            }
        elif event_type == "notification.email":
            template = self.rng.choice(
                ("order_confirmation", "payment_receipt", "shipping_update", "review_request")
            )
            key = f"notification.email:{template}:{customer}:{n}"
            payload = {
                "to": f"{customer.replace('_', '.')}@example.com",
                "template": template,
                "order_id": order,
                "locale": self.rng.choice(("en", "de", "fr")),
            }
            return self._remember(Event(event_type, "customer", customer, key, payload))
        elif event_type == "shipment.created":
            carrier = self.rng.choice(("DHL", "UPS", "DPD"))
            key = f"shipment.created:{order}:shp_{n}"
            payload = {
                "order_id": order,
                "carrier": carrier,
                "shipment_id": f"shp_{n}",
                "tracking_number": f"{carrier}{self.rng.randrange(10**9, 10**10)}",
            }
        elif event_type == "notification.slack":
            key = f"notification.slack:{order}:{n}"
            payload = {"channel": "#sales", "text": f"Order {order} paid: {amount:.2f} {currency}"}
        elif event_type == SLOW_EVENT_TYPE:
            invoice = f"INV-{n}"
            key = f"invoice.sent:{order}:{invoice}"
            payload = {
                "order_id": order,
                "invoice_number": invoice,
                "amount": money,
                "pdf_pages": self.rng.randint(1, 4),
            }
        else:  # crm.upsert
            key = f"crm.upsert:{customer}:v{n}"
            payload = {
                "customer_id": customer,
                "email": f"{customer.replace('_', '.')}@example.com",
                "lifetime_value": round(amount * self.rng.uniform(1, 12), 2),
                "tags": self.rng.sample(("vip", "newsletter", "b2b", "returning"), 2),
            }
            return self._remember(Event(event_type, "customer", customer, key, payload))
        return self._remember(Event(event_type, "order", str(order), key, payload))

    def _remember(self, event: Event) -> Event:
        self.published.append(event)
        return event

    def duplicate(self) -> Event | None:
        """A recently published event again (the app retried its transaction)."""
        return self.rng.choice(self.published) if self.published else None


def _digest(seed: int, *parts: object) -> str:
    text = "|".join(str(part) for part in (seed, *parts))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _unit(digest: str) -> float:
    return int(digest[:13], 16) / 16**13


def _request_id(hex_text: str) -> str:
    """A hex request id that mixes digits and letters, like real ones (and so that the
    error fingerprint of SPEC §2 always replaces it by the same placeholder)."""
    if hex_text.isdigit():
        return "f" + hex_text[1:]
    if not any(char.isdigit() for char in hex_text):
        return "7" + hex_text[1:]
    return hex_text


def fault_for(
    event_type: str, *, transient: float, bounce: float, request: str
) -> Exception | None:
    """The fault of one attempt, given its random draws (the one definition of the faults).

    Args:
        event_type: the row's event type.
        transient: a uniform draw in [0, 1) for this attempt.
        bounce: a uniform draw in [0, 1) for this event (the same on every attempt).
        request: hex digits for the request id in the error text.

    Returns:
        ``PermanentError`` for every ``crm.upsert`` (HTTP 401, invalid API key) and for
        bounced e-mails; a transient exception for ``TRANSIENT_ERROR_RATE`` of the other
        attempts; ``None`` (success) otherwise.
    """
    request = _request_id(request)
    if event_type == PERMANENT_EVENT_TYPE:
        return PermanentError(
            f"HTTP 401 from api.crm.example: invalid API key (request req_{request})"
        )
    if event_type == "notification.email" and bounce < BOUNCE_RATE:
        return PermanentError(
            f"SMTP 550 5.1.1 recipient address rejected: user unknown (queue id {request.upper()})"
        )
    if transient < TRANSIENT_ERROR_RATE and event_type in _TRANSIENT:
        return _TRANSIENT[event_type](request)
    return None


def attempt_fault(seed: int, event_type: str, event_key: str, attempts: int) -> Exception | None:
    """The fault a live handler meets on this attempt of this row (see ``fault_for``).

    The draws are hashes of ``(seed, event_key, attempts)``: the same row fails the same
    way whichever worker claims it, and a bounced address bounces again after a replay.
    """
    digest = _digest(seed, event_key, attempts)
    bounce = _unit(_digest(seed, event_key, "bounce")) if event_type == "notification.email" else 1
    return fault_for(event_type, transient=_unit(digest), bounce=bounce, request=digest[16:24])


def recorded_error(error: Exception) -> str:
    """``last_error`` as ``outbox.process_batch`` records this handler exception."""
    if isinstance(error, PermanentError):
        return str(error) or "permanent error"
    return f"{type(error).__name__}: {error}"[: outbox.MAX_ERROR_CHARS]


def handler_seconds(rng: random.Random, event_type: str) -> float:
    """How long the handler of one row takes: 0.5–2 s for the slow type, else 5–50 ms."""
    low, high = SLOW_HANDLER_SECONDS if event_type == SLOW_EVENT_TYPE else FAST_HANDLER_SECONDS
    return rng.uniform(low, high)


def claim_wait(rng: random.Random) -> float:
    """Seconds from a row becoming due to its claim: the poll interval, sometimes a queue."""
    wait = rng.uniform(0.02, POLL_INTERVAL)
    if rng.random() < 0.03:  # the batch waited behind a slow row
        wait += rng.uniform(*SLOW_HANDLER_SECONDS) * 1.5
    return wait


def worker_id(index: int) -> str:
    """``locked_by`` of simulated worker ``index``: ``sim-worker-<index>@<host>``."""
    return f"sim-worker-{index}@{HOST}"


# --------------------------------------------------------------------------- backfill

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
        fault = fault_for(event.event_type, transient=rng.random(), bounce=bounce, request=request)
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
    samples: bool = True,
    traffic: TrafficGenerator | None = None,
) -> dict[str, Any]:
    """Insert ``seconds`` of history that looks like what live traffic produces.

    The rows are played through the same faults (``fault_for``), backoff schedule (read
    from the shared SQL function) and timings as the live workers: done rows with
    realistic latencies, dead letters with their time of failure, retries still
    waiting, rows abandoned by crashed workers. They are streamed into the outbox by one
    binary COPY (a bulk load, ≈ 70,000 rows in a few seconds, not row by row); with
    ``samples``, the figures the sampler would have recorded (every
    ``max(sample_interval, 15 s)``) are inserted by one ``INSERT … SELECT FROM unnest``.
    One transaction: all or nothing.

    Args:
        settings: DSN, table, max attempts, window, lock timeout, sample interval.
        seconds: how far back the history starts; it ends 3 s before now.
        rate: mean events per second (swinging ±25 % like live traffic).
        workers: simulated workers (crash frequency and ``locked_by`` ids).
        seed: the random seed.
        crash_every: mean seconds between crashes of one worker (``None``: never).
        samples: also insert samples into ``outbox_monitor.samples``.
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
            if samples and seconds > interval:
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


# --------------------------------------------------------------------------- live traffic


class _Stats:
    """Counters shared by the publisher and the worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter = Counter()

    def add(self, counts: dict[str, int]) -> None:
        with self._lock:
            self.counts.update(counts)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


class _Worker(threading.Thread):
    """One simulated n8n worker: poll, process_batch, sometimes crash and restart."""

    def __init__(
        self,
        index: int,
        settings: Settings,
        *,
        seed: int,
        stop: threading.Event,
        stats: _Stats,
        crash_every: float | None,
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

    def handle(self, row: dict[str, Any]) -> None:
        """The handler: takes its time, then fails as ``attempt_fault`` says, or succeeds."""
        self.stop.wait(handler_seconds(self.rng, row["event_type"]))
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


def _publish_until(
    settings: Settings,
    traffic: TrafficGenerator,
    *,
    seed: int,
    rate: float,
    duration: float | None,
    stop: threading.Event,
    stats: _Stats,
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
                log.info("simulation: %s", stats.snapshot())
            stop.wait(min(max(next_at - (time.monotonic() - started), 0.0), 0.25))
    finally:
        if conn is not None:
            conn.close()


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
) -> dict[str, Any]:
    """Run realistic outbox traffic against ``settings.dsn`` until stopped.

    First checks the table and inserts ``backfill`` seconds of history (``backfill_history``),
    then publishes ≈ ``rate`` events per second from the calling thread while ``workers``
    threads each loop ``outbox.process_batch`` on their own connection (``locked_by`` =
    ``sim-worker-<n>@<host>``, polling every ~1 s). Faults: see the module docstring.
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

    Returns:
        Counts: ``{"seed", "backfill": {...}, "published", "duplicates", "claimed",
        "acked", "retried", "dead_lettered", "lost", "crashes", "abandoned", "seconds"}``.

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
    traffic = TrafficGenerator(seed)
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
    stats = _Stats()
    threads = [
        _Worker(index, settings, seed=seed, stop=stop, stats=stats, crash_every=crash_every)
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
            _publish_until(
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
