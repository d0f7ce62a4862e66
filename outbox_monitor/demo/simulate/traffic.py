"""The simulated traffic: event mix, event stream, per-attempt faults, handler timings."""

import hashlib
import itertools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from outbox_monitor.errors import clean_error
from outbox_monitor.outbox import PermanentError

PERMANENT_EVENT_TYPE = "crm.upsert"  # the CRM rejects the API key: every attempt dead-letters
SLOW_EVENT_TYPE = "invoice.sent"  # renders a PDF and uploads it: 0.5–2 s per row
# Per attempt, every type but the permanent one. At 5 % the retried rows (≥ 30 s latency)
# would be exactly the slowest 5 % and P95 would flip between ~2 s and ~31 s from one
# minute to the next; at 4 % P95 shows the handlers and P99 the retries.
TRANSIENT_ERROR_RATE = 0.04
# A notification's transient fault (SMTP 421 "too many connections", a reset connection) hits
# its first two attempts at most: the third gets through. Its two backoffs (30 s + 2 min,
# SPEC §1's backoff_base, + at most 10 % jitter) keep it under notifications-late's 5 min, so
# that rule stays quiet until a downstream is broken (a third failure would wait 5 more min).
NOTIFICATION_TRANSIENT_ATTEMPTS = 2
BOUNCE_RATE = 0.015  # notification.email rows whose recipient does not exist (permanent)
FAST_HANDLER_SECONDS = (0.005, 0.05)  # a typical HTTP call
SLOW_HANDLER_SECONDS = (0.5, 2.0)
RATE_WAVE = (0.25, 1200.0)  # the traffic rate swings ±25 % over 20 minutes


class HTTPError(Exception):
    """A simulated HTTP error response from a downstream API."""


class SMTPError(Exception):
    """A simulated temporary SMTP failure."""


@dataclass(frozen=True)
class EventKind:
    """One event type of the mix and its share of traffic."""

    event_type: str
    weight: float


EVENT_MIX: tuple[EventKind, ...] = (
    EventKind("order.paid", 0.25),
    EventKind("payment.captured", 0.15),
    EventKind("notification.email", 0.28),
    EventKind("shipment.created", 0.12),
    EventKind("notification.slack", 0.09),
    EventKind(SLOW_EVENT_TYPE, 0.06),
    EventKind(PERMANENT_EVENT_TYPE, 0.05),
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
    aggregate's timeline shows several events. ``event_types``: publish only these types of
    ``EVENT_MIX``, in their relative weights (``None``: all; one of a demo fleet's outboxes
    publishes its own few).

    Raises:
        ValueError: ``event_types`` names no type of the mix.
    """

    def __init__(self, seed: int, event_types: tuple[str, ...] | None = None) -> None:
        kinds = [k for k in EVENT_MIX if event_types is None or k.event_type in event_types]
        if not kinds:
            raise ValueError(f"no event type of the mix in {event_types!r}")
        self.rng = random.Random(f"{seed}:events")
        # a run-specific start, so two runs on one database do not reuse event keys
        self.sequence = self.rng.randrange(1_000_000, 9_000_000)
        self.next_order = self.rng.randrange(100_000, 900_000)
        self.recent: deque[tuple[int, str, float, str]] = deque(maxlen=300)
        self.published: deque[Event] = deque(maxlen=500)
        self._kinds = [kind.event_type for kind in kinds]
        self._cum_weights = list(itertools.accumulate(kind.weight for kind in kinds))

    def _customer(self) -> str:
        return f"cus_{self.rng.randrange(1, 40_000):05d}"

    def _new_order(self) -> tuple[int, str, float, str]:
        self.next_order += 1
        currency = self.rng.choice(("EUR", "EUR", "USD", "GBP"))
        order = (self.next_order, self._customer(), round(self.rng.uniform(9, 480), 2), currency)
        self.recent.append(order)
        return order

    def next_event(self) -> Event:
        """The next event of the mix (weights of ``EVENT_MIX``, among ``event_types``).

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
    event_type: str, *, attempts: int, transient: float, bounce: float, request: str
) -> Exception | None:
    """The fault of one attempt, given its random draws (the one definition of the faults).

    Args:
        event_type: the row's event type.
        attempts: the row's failed attempts before this one (its ``attempts`` column).
        transient: a uniform draw in [0, 1) for this attempt.
        bounce: a uniform draw in [0, 1) for this event (the same on every attempt).
        request: hex digits for the request id in the error text.

    Returns:
        ``PermanentError`` for every ``crm.upsert`` (HTTP 401, invalid API key) and for
        bounced e-mails; a transient exception for ``TRANSIENT_ERROR_RATE`` of the other
        attempts, but none from a ``notification.*`` row's third attempt on
        (``NOTIFICATION_TRANSIENT_ATTEMPTS``); ``None`` (success) otherwise.
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
    if event_type.startswith("notification.") and attempts >= NOTIFICATION_TRANSIENT_ATTEMPTS:
        return None
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
    return fault_for(
        event_type, attempts=attempts, transient=_unit(digest), bounce=bounce, request=digest[16:24]
    )


def recorded_error(error: Exception) -> str:
    """``last_error`` as ``outbox.process_batch`` records this handler exception."""
    if isinstance(error, PermanentError):
        return clean_error(str(error) or "permanent error")
    return clean_error(f"{type(error).__name__}: {error}")


def handler_seconds(rng: random.Random, event_type: str) -> float:
    """How long the handler of one row takes: 0.5–2 s for the slow type, else 5–50 ms."""
    low, high = SLOW_HANDLER_SECONDS if event_type == SLOW_EVENT_TYPE else FAST_HANDLER_SECONDS
    return rng.uniform(low, high)
