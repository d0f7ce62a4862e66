"""Deliver one message of the sender: post it, or update its thread's message and reply
there, with its rows locked; record the outcome on the rows (sent, retry at, failed) and
log it, secrets redacted. ``sender.deliver_due`` packs the messages and runs the pass.
"""

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from outbox_monitor.alerts.clock import Clock
from outbox_monitor.alerts.message import SlackMessage, render_notifications, render_thread_update
from outbox_monitor.alerts.receivers import Receiver, transport_for_route
from outbox_monitor.alerts.slack import TransportConfigError
from outbox_monitor.alerts.slack_outcomes import (
    Delivery,
    DeliveryError,
    PermanentError,
    RateLimited,
    answer_label,
    redact,
)
from outbox_monitor.errors import clean_error
from outbox_monitor.store.db import Database

# Logged as the sender, as before this module was split from it (log lines unchanged).
log = logging.getLogger("outbox_monitor.alerts.sender")

RETRY_MARGIN = 0.25
"""A message that failed transiently is due again ``(1 - RETRY_MARGIN) · retry_interval``
after its pass started: due by the next pass, which the scheduler starts one interval
later, give or take its own few milliseconds."""
MAX_ERROR_CHARS = 1000
LOG_EVERY_ATTEMPTS = 30
"""While a message keeps failing, one warning per this many attempts (a minute of passes)."""


@dataclass
class Pack:
    """The rows of one Slack message: a new post, or an update + reply in a thread."""

    route: str
    rows: list[dict[str, Any]]
    thread: tuple[str, str] | None = None  # (channel, ts) of the episode's message
    group: Any = None
    """A group's message (``grouping.GroupPlan``): ``prepare`` it under the rows' lock,
    ``send`` it instead of the rows, ``record`` it with them."""

    @property
    def ids(self) -> list[int]:
        return [row["id"] for row in self.rows]


class RouteTransports:
    """Transports built on first use per route; a route whose Slack variable is missing
    is logged (naming the variable) and its rows wait, while other routes deliver."""

    def __init__(self, ruleset: Any, env: Mapping[str, str], timeout: float) -> None:
        self._ruleset = ruleset
        self._env = env
        self._timeout = timeout
        self._built: dict[str, Receiver | None] = {}

    def get(self, name: str) -> Receiver | None:
        if name not in self._built:
            route = self._ruleset.routes.get(name)
            try:
                self._built[name] = (
                    None
                    if route is None
                    else transport_for_route(name, route, self._env, timeout=self._timeout)
                )
            except TransportConfigError as error:
                log.error("notifications of route %s wait: %s", name, error)
                self._built[name] = None
        return self._built[name]

    def values(self) -> list[Receiver]:
        return [t for t in self._built.values() if t is not None]


@dataclass
class SenderPass:
    """One pass of the sender: what it works with (database, rules, clock, transports,
    retry interval, dashboard URL, fence) and the outcome counts it returns."""

    db: Database
    ruleset: Any
    clock: Clock
    transports: Mapping[str, Receiver] | RouteTransports
    retry_interval: float
    dashboard_url: str
    fence: Callable[[psycopg.Connection], None] | None = None
    counts: Counter[str] = field(default_factory=Counter)
    refused: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Messages failed for good this pass, by (route, Slack's answer: ``answer_label``)."""

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every transport's secrets: no error text may carry any of them."""
        return tuple(s for t in self.transports.values() for s in getattr(t, "secrets", ()))


def deliver_pack(
    run: SenderPass, route: Any, transport: Receiver, pack: Pack, now: datetime
) -> bool:
    """Send one message with its rows locked; record the outcome (``now``: the pass's start).

    Returns:
        ``True`` when the route may go on (sent, or failed for good), ``False`` when it
        must wait (429, transient failure, rows held by another sender).
    """
    with run.db.transaction() as conn:
        if run.fence is not None:
            run.fence(conn)
        locked = conn.execute(
            run.db.compose("sender_lock_notifications"), {"ids": pack.ids}
        ).fetchall()
        if sorted(r["id"] for r in locked if r["status"] == "pending") != sorted(pack.ids):
            log.info("notifications %s are being sent by another sender; skipping", pack.ids)
            return False
        if pack.group is not None and not pack.group.prepare(run, conn, now):
            return True  # nothing to send (not due after all, or suppressed): the route goes on
        run.counts["attempts"] += 1
        attempts = max(row["attempts"] for row in pack.rows) + 1
        try:
            if pack.group is not None:
                delivery, note = pack.group.send(run, conn, route, transport)
            else:
                delivery, note = _send(run, conn, route, transport, pack)
        except RateLimited as error:
            until = run.clock() + timedelta(seconds=error.retry_after_seconds)
            _record(run, conn, "sender_mark_retry", pack, error, available_at=until)
            run.counts["rate_limited"] += len(pack.rows)
            _log_failure(run, pack, error, f"rate limited; next try at {until:%H:%M:%S}")
            return False
        except PermanentError as error:
            _record(run, conn, "sender_mark_failed", pack, error)
            run.counts["failed"] += len(pack.rows)
            run.refused[(pack.route, answer_label(error.code))] += 1
            log.error(
                "notifications %s on route %s failed for good: the receiver answered %s; the route "
                "goes on with its next message (%s)",
                pack.ids,
                pack.route,
                answer_label(error.code) if error.code else "no code",
                error_text(error, secrets=run.secrets),
            )
            return True
        except DeliveryError as error:
            until = now + timedelta(seconds=run.retry_interval * (1 - RETRY_MARGIN))
            _record(run, conn, "sender_mark_retry", pack, error, available_at=until)
            run.counts["retrying"] += len(pack.rows)
            _log_failure(
                run,
                pack,
                error,
                f"attempt {attempts}; next try at {until:%H:%M:%S}",
                attempts=attempts,
            )
            return False
        conn.execute(
            run.db.compose("sender_mark_sent"),
            {
                "ids": pack.ids,
                "now": run.clock(),
                "status": 200,
                "error": note,
                "channel": delivery.channel,
                "ts": delivery.ts,
            },
        )
        if pack.group is not None:
            pack.group.record(run, conn, delivery)
    run.counts["sent"] += len(pack.rows)
    log.info(
        "sent %s notification(s) %s on route %s%s",
        "/".join(dict.fromkeys(r["kind"] for r in pack.rows)),
        pack.ids,
        pack.route,
        " (thread reply)" if pack.thread else "",
    )
    return True


def _send(
    run: SenderPass, conn: psycopg.Connection, route: Any, transport: Receiver, pack: Pack
) -> tuple[Delivery, str | None]:
    """Post the pack's message, or update its thread's message and reply there; to a
    receiver that takes one row per request, send its one row.

    Returns:
        The ``Delivery`` to store on the rows (a thread reply stores the thread's channel
        and ts) and a note for ``last_error`` (a failed ``chat.update`` whose reply went).
    """
    if not transport.packs:  # a receiver of one row per request (PagerDuty, webhook)
        delivery = transport.deliver(pack.rows[0], dashboard_url=run.dashboard_url)
        run.counts["messages"] += 1
        return delivery, None
    now = run.clock()
    message = render_notifications(
        pack.rows,
        mention=getattr(route, "mention", None),
        dashboard_url=run.dashboard_url,
        now=now,
        route=pack.route,
        actions=bool(run.db.settings.slack_actions_port),
    )
    if pack.thread is None:
        delivery = transport.post(message)
        run.counts["messages"] += 1
        return delivery, None
    channel, ts = pack.thread
    thread_rows = conn.execute(
        run.db.compose("sender_thread_notifications"), {"channel": channel, "ts": ts}
    ).fetchall()
    note = None
    if thread_rows:
        updated = thread_update(run, [*thread_rows, *pack.rows], pack.route, now)
        try:
            transport.update(channel, ts, updated)
            run.counts["updates"] += 1
        except PermanentError as error:
            note = error_text(error, "chat.update failed (reply sent): ", run.secrets)
    transport.reply(channel, ts, message)
    run.counts["messages"] += 1
    return Delivery(channel, ts), note


def thread_update(
    run: SenderPass, rows: list[Mapping[str, Any]], route: str, now: datetime, **extra: Any
) -> SlackMessage:
    """A posted card re-rendered from its rows in id order (``render_thread_update``;
    ``extra``: its keyword arguments, e.g. a group's ``group`` and ``keys``)."""
    return render_thread_update(
        sorted(rows, key=lambda r: r["id"]),
        dashboard_url=run.dashboard_url,
        now=now,
        route=route,
        **extra,
    )


def error_text(error: BaseException, prefix: str = "", secrets: tuple[str, ...] = ()) -> str:
    """A delivery error as stored in ``last_error``: one line, secrets redacted, U+0000 and
    lone surrogates replaced (``clean_error``: a Slack error body may carry them), at
    most ``MAX_ERROR_CHARS`` characters."""
    return clean_error(redact(prefix + " ".join(str(error).split()), secrets), MAX_ERROR_CHARS)


def _record(
    run: SenderPass,
    conn: psycopg.Connection,
    query: str,
    pack: Pack,
    error: DeliveryError,
    **params: Any,
) -> None:
    conn.execute(
        run.db.compose(query),
        {
            "ids": pack.ids,
            "status": error.status,
            "error": error_text(error, secrets=run.secrets),
            **params,
        },
    )


def mark(run: SenderPass, query: str, rows: list[dict[str, Any]], **params: Any) -> None:
    """Run ``query`` on ``rows`` (ids) outside a message's transaction (failed, suppressed)."""
    with run.db.connection() as conn:
        conn.execute(run.db.compose(query), {"ids": [r["id"] for r in rows], **params})


def _log_failure(
    run: SenderPass, pack: Pack, error: DeliveryError, what: str, *, attempts: int = 1
) -> None:
    """A warning at a message's first failure and then every ``LOG_EVERY_ATTEMPTS``
    attempts (a long outage retries every pass: one line a minute, not one a pass);
    the other retries go to the debug log."""
    level = (
        logging.WARNING if attempts == 1 or attempts % LOG_EVERY_ATTEMPTS == 0 else logging.DEBUG
    )
    log.log(
        level,
        "notifications %s on route %s not delivered (%s): %s",
        pack.ids,
        pack.route,
        what,
        error_text(error, secrets=run.secrets),
    )
