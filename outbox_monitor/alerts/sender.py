"""Drain the notification outbox to the receivers: one message per evaluation and Slack route
(one per row to PagerDuty and webhooks), order kept per route; on a route with ``group_by``
one message per group of instances (``alerts.grouping``).

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
(at least once, the usual outbox trade-off): both posts carry the same key
(``message_key``), by which a receiver drops the repeat. Sending one message and
recording its outcome is ``message_delivery``'s; the test message of a route is
``route_check``'s.
"""

import logging
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import psycopg

from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.grouping import deliver_groups
from outbox_monitor.alerts.message import dashboard_base_url, episode_key
from outbox_monitor.alerts.message_delivery import (
    Pack,
    RouteTransports,
    SenderPass,
    deliver_pack,
    mark,
)
from outbox_monitor.alerts.receivers import Receiver
from outbox_monitor.store.db import Database

log = logging.getLogger(__name__)

SEND_INTERVAL_SECONDS = 2.0
"""Seconds between sender passes (the scheduler's sender job); a message that failed
transiently is tried again at the next pass, so this is also the longest retry delay."""
PENDING_BATCH = 1000
"""Pending rows read per pass (rows beyond wait for the next pass)."""
MAX_MESSAGES_PER_PASS = 200
THREAD_KINDS = ("resolved", "error")


def deliver_due(
    db: Database,
    ruleset: Any,
    *,
    clock: Clock = system_clock,
    transports: Mapping[str, Receiver] | None = None,
    env: Mapping[str, str] | None = None,
    retry_interval: float = SEND_INTERVAL_SECONDS,
    max_messages: int = MAX_MESSAGES_PER_PASS,
    rule: str | None = None,
    fence: Callable[[psycopg.Connection], None] | None = None,
    on_refused: Callable[[str, str], None] | None = None,
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
        on_refused: called with (route, Slack's answer) for each message Slack refused for
            good (``PermanentError``: failed at once, the route goes on), e.g.
            ``SchedulerStatus.refused`` for ``/metrics``.

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
    run = SenderPass(
        db=db,
        ruleset=ruleset,
        clock=clock,
        transports=transports
        if transports is not None
        else RouteTransports(ruleset, environment, db.settings.slack_timeout),
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
        db.fetch_all(
            "sender_pending_notifications", {"outbox": db.alert_outbox, "limit": PENDING_BATCH}
        )
        if rule is None
        else db.fetch_all(
            "sender_pending_notifications_of_rule",
            {"outbox": db.alert_outbox, "limit": PENDING_BATCH, "rule": rule},
        )
    )
    for row in pending:
        by_route.setdefault(row["route"], []).append(row)
    for route_name, rows in by_route.items():
        if run.counts["attempts"] >= max_messages:
            run.counts["waiting"] += len(rows)
            continue
        _deliver_route(run, route_name, rows, now, max_messages)
    if on_refused is not None:
        for (route_name, answer), count in run.refused.items():
            for _ in range(count):
                on_refused(route_name, answer)
    return dict(run.counts)


def _deliver_route(
    run: SenderPass, route_name: str, rows: list[dict[str, Any]], now: datetime, budget: int
) -> None:
    route = run.ruleset.routes.get(route_name)
    transport = run.transports.get(route_name)
    if route is None or transport is None:
        due = [row for row in rows if row["available_at"] <= now]
        if route is None and due:
            reason = f'route "{route_name}" is not in the rules file'
            mark(run, "sender_mark_failed", due, status=None, error=reason)
            run.counts["failed"] += len(due)
            log.error("notifications %s not sent: %s", [r["id"] for r in due], reason)
        run.counts["waiting"] += len(rows) - (len(due) if route is None else 0)
        return
    queue = list(rows)
    if not route.send_resolved and not route.group_by:  # a group closes on its resolves
        resolves = [r for r in queue if r["kind"] == "resolved" and r["available_at"] <= now]
        if resolves:
            reason = f'route "{route_name}" has send_resolved: false'
            mark(run, "sender_mark_suppressed", resolves, reason=reason)
            run.counts["suppressed"] += len(resolves)
            queue = [r for r in queue if r not in resolves]
    if route.group_by:  # one message per group (alerts.grouping); own alerts as below
        queue, go_on = deliver_groups(run, route_name, route, transport, queue, now, budget)
        if not go_on:
            run.counts["waiting"] += len(queue)
            return
    while queue:
        head = queue[0]
        if head["available_at"] > now or run.counts["attempts"] >= budget:
            run.counts["waiting"] += len(queue)
            return
        pack = _take_pack(run, route_name, transport, queue, now)
        if not deliver_pack(run, route, transport, pack, now):
            run.counts["waiting"] += len(queue)
            return


def _action(
    run: SenderPass, route_name: str, transport: Receiver, row: dict[str, Any]
) -> tuple[str, str] | None:
    """(channel, ts) of the episode's posted message when ``row`` belongs in its thread."""
    if row["kind"] not in THREAD_KINDS or not transport.supports_threads:
        return None
    original = run.db.fetch_one(
        "sender_episode_original",
        {
            "outbox": run.db.alert_outbox,
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
    run: SenderPass,
    route_name: str,
    transport: Receiver,
    queue: list[dict[str, Any]],
    now: datetime,
) -> Pack:
    """Remove the head's message from ``queue``: the due rows of its evaluation that go
    the same way (a new post, or the same thread); the head alone for a receiver that
    takes one row per request."""
    head = queue[0]
    target = _action(run, route_name, transport, head)
    rows = [head]
    if head["evaluation_id"] is not None and transport.packs:
        for row in queue[1:]:
            if (
                row["evaluation_id"] == head["evaluation_id"]
                and row["available_at"] <= now
                and _action(run, route_name, transport, row) == target
            ):
                rows.append(row)
    chosen = {row["id"] for row in rows}
    queue[:] = [row for row in queue if row["id"] not in chosen]
    return Pack(route_name, rows, target)
