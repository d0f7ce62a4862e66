"""Drain the notification outbox to Slack: one message per evaluation and route, order kept.

``deliver_due`` is the sender job of the scheduler (issue 3 §3). It owns every retry:

- due rows: ``status='pending'``, not silenced, ``available_at <= clock()`` — the
  injected clock, never the database's ``now()``, so tests fast-forward backoffs;
- per route, in id order: the rows of the head's ``evaluation_id`` are packed into one
  message; when the head message cannot be delivered now (429, 5xx, timeout, Slack
  down), the rest of that route waits for the next pass, so order is kept;
- HTTP 429 → ``available_at = clock() + Retry-After``, exactly (Slack says when it takes
  messages again; a 429 is not a failure of Slack and grows no backoff); a transient
  failure (5xx, timeout, Slack unreachable) → due again by the next pass
  (``retry_interval``, the send interval). The retry is capped at one pass so delivery
  resumes within one send interval of Slack recovering (plus the last Retry-After) —
  head-of-line order means a blocked route costs one request per pass, below Slack's one
  message per second and channel, and any longer wait is Slack's own Retry-After;
  a permanent failure → ``status='failed'``; success → ``status='sent'``, ``sent_at``,
  and (bot) ``slack_channel``/``slack_ts``;
- a ``resolved`` (or ``error``) row of an episode whose first message was posted with the
  bot token updates that message (``chat.update``) and replies in its thread; the row
  stores the thread's channel and ts. With a webhook it is posted as a new message;
- ``send_resolved: false`` routes mark resolves ``suppressed``;
- every outcome records ``attempts``, ``last_status`` and a redacted ``last_error``.

A message's rows are locked (``FOR UPDATE SKIP LOCKED``) while it is sent, so two senders
never post the same row; a crash between Slack's answer and the commit re-sends it once
(at-least-once, the usual outbox trade-off).
"""

import logging
import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.message import (
    SlackMessage,
    dashboard_base_url,
    episode_key,
    render_notifications,
    render_test,
    render_thread_update,
    test_row,
)
from outbox_monitor.alerts.slack import (
    Delivery,
    DeliveryError,
    PermanentError,
    RateLimited,
    Transport,
    TransportConfigError,
    redact,
    transport_for_route,
)
from outbox_monitor.db import Database
from outbox_monitor.errors import OutboxMonitorError, clean_error

log = logging.getLogger(__name__)

SEND_INTERVAL_SECONDS = 2.0
"""Seconds between sender passes (the scheduler's sender job); a message that failed
transiently is tried again at the next pass, so this is also the longest retry delay."""
RETRY_MARGIN = 0.25
"""A message that failed transiently is due again ``(1 - RETRY_MARGIN) · retry_interval``
after its pass started: due by the next pass, which the scheduler starts one interval
later, give or take its own few milliseconds."""
PENDING_BATCH = 1000
"""Pending rows read per pass (rows beyond wait for the next pass)."""
MAX_MESSAGES_PER_PASS = 200
MAX_ERROR_CHARS = 1000
LOG_EVERY_ATTEMPTS = 30
"""While a message keeps failing, one warning per this many attempts (a minute of passes)."""
THREAD_KINDS = ("resolved", "error")


@dataclass
class _Pack:
    """The rows of one Slack message: a new post, or an update + reply in a thread."""

    route: str
    rows: list[dict[str, Any]]
    thread: tuple[str, str] | None = None  # (channel, ts) of the episode's message

    @property
    def ids(self) -> list[int]:
        return [row["id"] for row in self.rows]


class _RouteTransports:
    """Transports built on first use per route; a route whose Slack variable is missing
    is logged (naming the variable) and its rows wait, while other routes deliver."""

    def __init__(self, ruleset: Any, env: Mapping[str, str], timeout: float) -> None:
        self._ruleset = ruleset
        self._env = env
        self._timeout = timeout
        self._built: dict[str, Transport | None] = {}

    def get(self, name: str) -> Transport | None:
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

    def values(self) -> list[Transport]:
        return [t for t in self._built.values() if t is not None]


@dataclass
class _Pass:
    db: Database
    ruleset: Any
    clock: Clock
    transports: Mapping[str, Transport] | _RouteTransports
    retry_interval: float
    dashboard_url: str
    fence: Callable[[psycopg.Connection], None] | None = None
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every transport's secrets: no error text may carry any of them."""
        return tuple(s for t in self.transports.values() for s in getattr(t, "secrets", ()))


def deliver_due(
    db: Database,
    ruleset: Any,
    *,
    clock: Clock = system_clock,
    transports: Mapping[str, Transport] | None = None,
    env: Mapping[str, str] | None = None,
    retry_interval: float = SEND_INTERVAL_SECONDS,
    max_messages: int = MAX_MESSAGES_PER_PASS,
    rule: str | None = None,
    fence: Callable[[psycopg.Connection], None] | None = None,
) -> dict[str, int]:
    """Deliver the due notifications, one pass (issue 3 §3; the scheduler's sender job).

    Args:
        db: the connector of the database holding ``outbox_monitor.notifications``.
        ruleset: the ``rules.RuleSet`` (routes: ``mention``, ``send_resolved``).
        clock: the injectable clock; due-ness, ``available_at`` and ``sent_at`` use it.
        transports: ``{route: transport}``; default: built per route on first use from
            ``env`` (``transport_for_route``); a route whose variable is missing is
            logged as an error naming it, and its rows wait (counted in ``waiting``).
        env: environment for transports and ``OUTBOX_MONITOR_DASHBOARD_URL``
            (default ``os.environ``).
        retry_interval: the send interval (seconds between passes): a message that failed
            transiently (5xx, timeout, unreachable) is due again by the next pass
            (``RETRY_MARGIN``). A 429 waits its Retry-After instead.
        max_messages: at most this many Slack messages per pass.
        rule: deliver only this rule's rows (``alerts.stall`` posts its alert directly,
            from any process); ``None``: every row.
        fence: called first in each delivery transaction (``Leadership.fence``: raises
            ``LeadershipLost`` once the lease was taken over, so the old leader stops).

    Returns:
        Counts: ``sent``, ``failed``, ``suppressed``, ``rate_limited`` and ``retrying``
        (rows put back), ``waiting`` (rows held behind their route's head), ``messages``
        (Slack messages posted, replies included), ``updates`` (``chat.update`` calls),
        ``attempts`` (delivery attempts made).

    Raises:
        DatabaseUnavailable and the connector's errors: the pass stops; rows stay pending.
        LeadershipLost: from ``fence``; the message's rows stay pending.
    """
    environment = os.environ if env is None else env
    run = _Pass(
        db=db,
        ruleset=ruleset,
        clock=clock,
        transports=transports
        if transports is not None
        else _RouteTransports(ruleset, environment, db.settings.slack_timeout),
        retry_interval=retry_interval,
        dashboard_url=dashboard_base_url(environment),
        fence=fence,
    )
    for key in ("sent", "failed", "suppressed", "rate_limited", "retrying", "waiting"):
        run.counts[key] = 0
    run.counts.update(messages=0, updates=0, attempts=0)
    now = clock()
    by_route: dict[str, list[dict[str, Any]]] = {}
    pending = (
        db.fetch_all("sender_pending_notifications", {"limit": PENDING_BATCH})
        if rule is None
        else db.fetch_all(
            "sender_pending_notifications_of_rule", {"limit": PENDING_BATCH, "rule": rule}
        )
    )
    for row in pending:
        by_route.setdefault(row["route"], []).append(row)
    for route_name, rows in by_route.items():
        if run.counts["attempts"] >= max_messages:
            run.counts["waiting"] += len(rows)
            continue
        _deliver_route(run, route_name, rows, now, max_messages)
    return dict(run.counts)


def _deliver_route(
    run: _Pass, route_name: str, rows: list[dict[str, Any]], now: datetime, budget: int
) -> None:
    route = run.ruleset.routes.get(route_name)
    transport = run.transports.get(route_name)
    if route is None or transport is None:
        due = [row for row in rows if row["available_at"] <= now]
        if route is None and due:
            reason = f'route "{route_name}" is not in the rules file'
            _mark(run, "sender_mark_failed", due, status=None, error=reason)
            run.counts["failed"] += len(due)
            log.error("notifications %s not sent: %s", [r["id"] for r in due], reason)
        run.counts["waiting"] += len(rows) - (len(due) if route is None else 0)
        return
    queue = list(rows)
    if not route.send_resolved:
        resolves = [r for r in queue if r["kind"] == "resolved" and r["available_at"] <= now]
        if resolves:
            reason = f'route "{route_name}" has send_resolved: false'
            _mark(run, "sender_mark_suppressed", resolves, reason=reason)
            run.counts["suppressed"] += len(resolves)
            queue = [r for r in queue if r not in resolves]
    while queue:
        head = queue[0]
        if head["available_at"] > now or run.counts["attempts"] >= budget:
            run.counts["waiting"] += len(queue)
            return
        pack = _take_pack(run, route_name, transport, queue, now)
        if not _deliver_pack(run, route, transport, pack, now):
            run.counts["waiting"] += len(queue)
            return


def _action(
    run: _Pass, route_name: str, transport: Transport, row: dict[str, Any]
) -> tuple[str, str] | None:
    """(channel, ts) of the episode's posted message when ``row`` belongs in its thread."""
    if row["kind"] not in THREAD_KINDS or not transport.supports_threads:
        return None
    original = run.db.fetch_one(
        "sender_episode_original",
        {
            "route": route_name,
            "rule": row["rule"],
            "instance": row["instance"],
            "id": row["id"],
            "episode": episode_key(row["dedupe_key"]),
        },
    )
    if original is None:
        return None
    return original["slack_channel"], original["slack_ts"]


def _take_pack(
    run: _Pass, route_name: str, transport: Transport, queue: list[dict[str, Any]], now: datetime
) -> _Pack:
    """Remove the head's message from ``queue``: the due rows of its evaluation that go
    the same way (a new post, or the same thread)."""
    head = queue[0]
    target = _action(run, route_name, transport, head)
    rows = [head]
    if head["evaluation_id"] is not None:
        for row in queue[1:]:
            if (
                row["evaluation_id"] == head["evaluation_id"]
                and row["available_at"] <= now
                and _action(run, route_name, transport, row) == target
            ):
                rows.append(row)
    chosen = {row["id"] for row in rows}
    queue[:] = [row for row in queue if row["id"] not in chosen]
    return _Pack(route_name, rows, target)


def _deliver_pack(run: _Pass, route: Any, transport: Transport, pack: _Pack, now: datetime) -> bool:
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
        run.counts["attempts"] += 1
        attempts = max(row["attempts"] for row in pack.rows) + 1
        try:
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
            _log_failure(run, pack, error, "failed for good")
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
    run: _Pass, conn: psycopg.Connection, route: Any, transport: Transport, pack: _Pack
) -> tuple[Delivery, str | None]:
    """Post the pack's message, or update its thread's message and reply there.

    Returns:
        The ``Delivery`` to store on the rows (a thread reply stores the thread's channel
        and ts) and a note for ``last_error`` (a failed ``chat.update`` whose reply went).
    """
    now = run.clock()
    message = render_notifications(
        pack.rows,
        mention=getattr(route, "mention", None),
        dashboard_url=run.dashboard_url,
        now=now,
        route=pack.route,
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
        updated = _thread_update(run, [*thread_rows, *pack.rows], pack.route, now)
        try:
            transport.update(channel, ts, updated)
            run.counts["updates"] += 1
        except PermanentError as error:
            note = _error_text(error, "chat.update failed (reply sent): ", run.secrets)
    transport.reply(channel, ts, message)
    run.counts["messages"] += 1
    return Delivery(channel, ts), note


def _thread_update(
    run: _Pass, rows: list[Mapping[str, Any]], route: str, now: datetime
) -> SlackMessage:
    return render_thread_update(
        sorted(rows, key=lambda r: r["id"]), dashboard_url=run.dashboard_url, now=now, route=route
    )


def _error_text(error: BaseException, prefix: str = "", secrets: tuple[str, ...] = ()) -> str:
    """A delivery error as stored in ``last_error``: one line, secrets redacted, U+0000 and
    lone surrogates replaced (``clean_error``: a Slack error body may carry them), at
    most ``MAX_ERROR_CHARS`` characters."""
    return clean_error(redact(prefix + " ".join(str(error).split()), secrets), MAX_ERROR_CHARS)


def _record(
    run: _Pass,
    conn: psycopg.Connection,
    query: str,
    pack: _Pack,
    error: DeliveryError,
    **params: Any,
) -> None:
    conn.execute(
        run.db.compose(query),
        {
            "ids": pack.ids,
            "status": error.status,
            "error": _error_text(error, secrets=run.secrets),
            **params,
        },
    )


def _mark(run: _Pass, query: str, rows: list[dict[str, Any]], **params: Any) -> None:
    with run.db.connection() as conn:
        conn.execute(run.db.compose(query), {"ids": [r["id"] for r in rows], **params})


def _log_failure(
    run: _Pass, pack: _Pack, error: DeliveryError, what: str, *, attempts: int = 1
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
        _error_text(error, secrets=run.secrets),
    )


def send_test(
    db: Database,
    ruleset: Any,
    route_name: str | None = None,
    *,
    requested_by: str,
    transports: Mapping[str, Transport] | None = None,
    env: Mapping[str, str] | None = None,
    clock: Clock = system_clock,
) -> dict[str, dict[str, Any]]:
    """Post a test message now (``outbox-monitor alerts test``, the Alerts page button) and
    record it in the notification table, so the Alerts page lists it with its outcome.

    The row (kind and rule ``test``, ``requested_by`` in its payload) is written after the
    post as ``sent`` or ``failed`` — never ``pending``, so the sender never posts it again;
    it has no alert instance, transition or episode, so alert state and dedupe are untouched.
    It is written by the SQL function ``outbox_monitor.record_test_notification`` (migration
    005), which makes its dedupe key (``test|<uuid>``, never an alert's) and stamps it with
    the database's ``now()``: no role needs INSERT on the notification table for it.

    Args:
        db: where the row is written (a login with EXECUTE on
            ``outbox_monitor.record_test_notification``: the operator role).
        ruleset: the ``rules.RuleSet``.
        route_name: one route, or ``None`` for every route.
        requested_by: who asked (an e-mail, the CLI actor), stored in the row's payload.
        transports: ``{route: transport}``; default built from ``env`` with the client
            timeout of ``db.settings.slack_timeout``.
        env: the environment (default ``os.environ``).
        clock: for the message's footer (the row's times are the database's).

    Returns:
        ``{route: {"ok": True, "destination", "channel", "ts"}}`` or, per failed route,
        ``{"ok": False, "destination", "error" (redacted), "status"}``; each also has
        ``notification_id`` (the row written) or, when the row could not be written,
        ``record_error`` (why; the message was posted or refused all the same).

    Raises:
        TransportConfigError: the route is unknown or its Slack variable is missing.
    """
    environment = os.environ if env is None else env
    names = list(ruleset.routes) if route_name is None else [route_name]
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        route = ruleset.routes.get(name)
        if route is None:
            known = ", ".join(sorted(ruleset.routes)) or "none"
            raise TransportConfigError(f'no route "{name}" in the rules file (routes: {known})')
        transport = (
            transports[name]
            if transports is not None and name in transports
            else transport_for_route(name, route, environment, timeout=db.settings.slack_timeout)
        )
        row = test_row(name)
        message = render_test(
            name,
            mention=getattr(route, "mention", None),
            dashboard_url=dashboard_base_url(environment),
            now=clock(),
        )
        try:
            delivery = transport.post(message)
        except DeliveryError as error:
            text = _error_text(error, secrets=tuple(getattr(transport, "secrets", ())))
            results[name] = {
                "ok": False,
                "destination": transport.describe(),
                "error": text,
                "status": error.status,
            }
            log.warning("test message on route %s failed: %s", name, text)
        else:
            results[name] = {
                "ok": True,
                "destination": transport.describe(),
                "channel": delivery.channel,
                "ts": delivery.ts,
            }
        results[name].update(
            _record_test(db, name, {**row["payload"], "requested_by": requested_by}, results[name])
        )
    return results


def _record_test(
    db: Database, route: str, payload: dict[str, Any], outcome: Mapping[str, Any]
) -> dict[str, Any]:
    """Write one test message's row through ``outbox_monitor.record_test_notification``
    (it sets kind, dedupe key and times); ``{"notification_id"}`` or ``{"record_error"}``."""
    try:
        row = db.fetch_one(
            "notification_record_test",
            {
                "route": route,
                "payload": Jsonb(payload),
                "status": "sent" if outcome["ok"] else "failed",
                "last_status": 200 if outcome["ok"] else outcome.get("status"),
                "last_error": None if outcome["ok"] else outcome.get("error"),
                "slack_channel": outcome.get("channel"),
                "slack_ts": outcome.get("ts"),
            },
        )
    except OutboxMonitorError as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        log.error(
            "test message on route %s was not recorded in the notifications: %s", route, reason
        )
        return {"record_error": reason}
    assert row is not None  # INSERT … RETURNING
    return {"notification_id": row["id"]}
