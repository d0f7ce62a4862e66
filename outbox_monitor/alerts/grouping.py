"""Alert grouping (issue 31 item 3): a route with ``group_by`` sends one message per group
of instances, with Alertmanager's timing.

The evaluator queues one notification row per instance and route as without grouping; the
sender (``sender.deliver_due``) reads a grouped route's pending rows by group — the values
of the route's ``group_by`` labels in each row's payload (a label an instance lacks is
``""``) — and sends one message per group:

- a group's first message (kind ``firing``) ``group_wait`` after its oldest pending row was
  queued, listing every instance that fired meanwhile (an instance that fired and resolved
  within ``group_wait`` is listed resolved; a group whose instances all resolved before its
  first message sends nothing: the rows are ``suppressed``);
- then at most one message every ``group_interval`` while instances come and go
  (``update-<n>``), listing the firing instances and those resolved since the last one;
  ``resolved`` when every instance resolved: the group's episode ends, and the next
  instance starts a new one (a new key, a new PagerDuty incident);
- a still-firing group again after ``repeat_interval`` (``repeat-<n>``) once the evaluator
  queues an instance's repeat (it queues none of an acknowledged episode).

The group's state (episode, whether its first message went, the messages sent, the
instances as told, its Slack card) is ``outbox_monitor.alert_groups`` (migration 029),
locked and written in the transaction that marks the message's rows sent: a leader that
dies before committing leaves the rows pending and the state unchanged, so the next leader
sends the same message again under the same key (``group_key``: at least once, dropped by
the receiver) and never loses a resolve.

Each message's key is ``<group alert key>:<kind>``; the group alert key
(``message_key.alert_key`` of the outbox, ``group:<route>``, the group's labels and its
episode) is PagerDuty's ``dedup_key`` (one incident per group episode) and the webhook
body's ``alert_key``. The scheduler's own alerts (rows without an evaluation) are never
grouped. A Slack bot card (``channel``) is posted once per group episode and edited
(``chat.update``) at each later message, which also replies in its thread; with an
incoming webhook each message is a new post listing the group.
"""

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from outbox_monitor.alerts.message import render_notifications
from outbox_monitor.alerts.message_delivery import (
    Pack,
    SenderPass,
    deliver_pack,
    error_text,
    thread_update,
)
from outbox_monitor.alerts.message_key import alert_key
from outbox_monitor.alerts.notification_text import row_payload
from outbox_monitor.alerts.slack_outcomes import Delivery, PermanentError

log = logging.getLogger("outbox_monitor.alerts.sender")

CHANGES = ("firing", "error", "resolved")
"""Kinds that change a group (its next message after ``group_interval``); a ``repeat``
waits ``repeat_interval``."""
FIRST = "firing"
RESOLVED = "resolved"


def group_labels(group_by: Sequence[str], labels: object) -> dict[str, str]:
    """The group of an instance: ``{label: value}`` for each ``group_by`` label, ``""``
    for one its ``labels`` lack."""
    found = labels if isinstance(labels, Mapping) else {}
    return {name: str(found.get(name) or "") for name in group_by}


def group_hash(labels: Mapping[str, str]) -> str:
    """The stored key of a group: the SHA-256 hex digest of its labels (any length)."""
    return hashlib.sha256(_canonical(labels).encode("utf-8", "surrogatepass")).hexdigest()


def group_alert_key(outbox: str, route: str, labels: Mapping[str, str], episode: int) -> str:
    """The key of one episode of a group (68 characters, ``message_key.alert_key``): the
    PagerDuty ``dedup_key`` of its messages and the prefix of their message keys."""
    return alert_key(outbox, f"group:{route}", _canonical(labels), episode)


def _canonical(labels: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(labels.items())), ensure_ascii=False)


def due_at(
    route: Any, state: Mapping[str, Any] | None, rows: Sequence[Mapping[str, Any]]
) -> datetime:
    """When a group's next message is due: ``group_wait`` after its oldest pending row for
    a group with no open episode; else ``group_interval`` (a change) or ``repeat_interval``
    (only repeats) after its last message."""
    if state is None or not state["open"]:
        return min(row["created_at"] for row in rows) + timedelta(seconds=route.group_wait)
    changes = any(row["kind"] in CHANGES for row in rows)
    wait = route.group_interval if changes else route.repeat_interval
    return state["last_sent_at"] + timedelta(seconds=wait)


def _stored_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a member keeps of a notification row (JSON)."""
    return {
        "id": row["id"],
        "kind": row["kind"],
        "rule": row["rule"],
        "instance": row["instance"],
        "dedupe_key": row["dedupe_key"],
        "payload": row_payload(row),
    }


def merge_members(
    members: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """A group's instances after ``rows`` (in id order): a firing or error row sets its
    instance (``status`` firing or error), a repeat refreshes it, a resolve marks it
    ``resolved`` (keeping the line it fired with). Each member: ``rule``, ``instance``,
    ``status``, ``row`` (its firing, error or repeat row), ``resolve`` (its resolve row or
    ``None``), ``changed`` (whether ``rows`` touched it)."""
    found: dict[tuple[str, str], dict[str, Any]] = {
        (m["rule"], m["instance"]): {**m, "changed": False} for m in members
    }
    for row in rows:
        key = (row["rule"], row["instance"])
        member = found.get(key)
        stored = _stored_row(row)
        if row["kind"] == RESOLVED:
            if member is None:
                found[key] = member = {"rule": key[0], "instance": key[1], "row": stored}
            member.update(status=RESOLVED, resolve=stored, changed=True)
        elif row["kind"] == "repeat" and member is not None and member["status"] != RESOLVED:
            member["row"] = stored
        else:
            status = "error" if row["kind"] == "error" else "firing"
            found[key] = {
                "rule": key[0],
                "instance": key[1],
                "status": status,
                "row": stored,
                "resolve": None,
                "changed": True,
            }
    return list(found.values())


def member_rows(members: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows a card is rendered from (``render_thread_update``): each member's line,
    then its resolve."""
    rows = []
    for member in members:
        if member["row"] is not member.get("resolve"):
            rows.append(member["row"])
        if member.get("resolve"):
            rows.append(member["resolve"])
    return sorted(rows, key=lambda r: r["id"])


def _kept(members: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The members a group keeps after a message: those not resolved (as stored)."""
    return [
        {k: v for k, v in m.items() if k != "changed"} for m in members if m["status"] != RESOLVED
    ]


@dataclass
class GroupMessage:
    """One message of a group: what every receiver is sent."""

    route: str
    outbox: str
    labels: dict[str, str]
    episode: int
    kind: str
    """``firing`` (the first), ``update-<n>``, ``repeat-<n>`` or ``resolved``."""
    members: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    """The notifications it sends (the group's pending rows)."""

    @property
    def alert_key(self) -> str:
        """The group episode's key (PagerDuty's ``dedup_key``)."""
        return group_alert_key(self.outbox, self.route, self.labels, self.episode)

    @property
    def message_key(self) -> str:
        """``<alert_key>:<kind>``: the same for a re-send, another for the next message."""
        return f"{self.alert_key}:{self.kind}"

    @property
    def status(self) -> str:
        """``resolved`` when every instance resolved, else ``firing``."""
        return RESOLVED if self.kind == RESOLVED else "firing"

    def instances(self) -> list[dict[str, Any]]:
        """Each instance listed: ``rule``, ``instance``, ``status`` (firing, error,
        resolved), ``changed`` (new or resolved in this message), its ``summary``,
        ``severity``, ``value``, ``unit``, ``since``, ``resolved_at``, ``labels`` and
        ``episode`` (the instance's own)."""
        listed = []
        for member in self.members:
            payload = member["row"]["payload"]
            resolve = (member.get("resolve") or {}).get("payload") or {}
            listed.append(
                {
                    "rule": member["rule"],
                    "instance": member["instance"],
                    "status": member["status"],
                    "changed": bool(member.get("changed")),
                    "summary": resolve.get("summary") or payload.get("summary"),
                    "severity": payload.get("severity"),
                    "value": resolve.get("value", payload.get("value")),
                    "unit": payload.get("unit"),
                    "since": payload.get("since"),
                    "resolved_at": resolve.get("resolved_at"),
                    "labels": payload.get("labels") or {},
                    "episode": payload.get("episode"),
                    "dashboard_path": payload.get("dashboard_path"),
                }
            )
        return listed


@dataclass
class GroupPlan:
    """A group's message under way (``message_delivery.Pack.group``): ``prepare`` locks the
    group's state and builds its message, ``send`` sends it, ``record`` stores the state."""

    route_name: str
    route: Any
    labels: dict[str, str]
    key: str
    rows: list[dict[str, Any]]
    state: dict[str, Any] = field(default_factory=dict)
    message: GroupMessage | None = None

    def _params(self, run: SenderPass) -> dict[str, Any]:
        return {"outbox": run.db.alert_outbox, "route": self.route_name, "group_key": self.key}

    def prepare(self, run: SenderPass, conn: psycopg.Connection, now: datetime) -> bool:
        """Lock the group's state and build its message; ``False`` when there is nothing to
        send now (another sender sent it meanwhile, or a new group's instances all resolved
        before its first message: those rows are marked ``suppressed``)."""
        params = self._params(run)
        conn.execute(run.db.compose("alert_group_ensure"), {**params, "labels": Jsonb(self.labels)})
        self.state = dict(conn.execute(run.db.compose("alert_group_lock"), params).fetchone())
        if due_at(self.route, self.state, self.rows) > now:
            return False
        is_open = self.state["open"]
        members = merge_members(self.state["members"] if is_open else [], self.rows)
        firing = [m for m in members if m["status"] != RESOLVED]
        if not is_open and not firing:
            conn.execute(
                run.db.compose("sender_mark_suppressed"),
                {
                    "ids": [row["id"] for row in self.rows],
                    "reason": "every instance of the group resolved before its first message "
                    f"(group_wait {self.route.group_wait:g}s)",
                },
            )
            run.counts["suppressed"] += len(self.rows)
            return False
        if (
            is_open
            and not self.route.send_resolved
            and all(r["kind"] == RESOLVED for r in self.rows)
        ):
            self._record_quietly(run, conn, members)
            return False
        seq = self.state["seq"] if is_open else 0
        if not is_open:
            kind = FIRST
        elif not firing:
            kind = RESOLVED
        elif all(row["kind"] == "repeat" for row in self.rows):
            kind = f"repeat-{seq}"
        else:
            kind = f"update-{seq}"
        self.message = GroupMessage(
            route=self.route_name,
            outbox=run.db.alert_outbox,
            labels=self.labels,
            episode=self.state["episode"] + (0 if is_open else 1),
            kind=kind,
            members=members,
            rows=self.rows,
        )
        return True

    def _record_quietly(
        self, run: SenderPass, conn: psycopg.Connection, members: list[dict[str, Any]]
    ) -> None:
        """``send_resolved: false``: resolves leave the group without a message (suppressed);
        the group's episode ends when none fires."""
        conn.execute(
            run.db.compose("sender_mark_suppressed"),
            {
                "ids": [row["id"] for row in self.rows],
                "reason": f'route "{self.route_name}" has send_resolved: false',
            },
        )
        run.counts["suppressed"] += len(self.rows)
        still = _kept(members)
        conn.execute(
            run.db.compose("alert_group_record"),
            {
                **self._params(run),
                "episode": self.state["episode"],
                "open": bool(still),
                "seq": self.state["seq"],
                "members": Jsonb(still),
                "first_sent_at": None,
                "now": self.state["last_sent_at"],
                "slack_channel": self.state["slack_channel"],
                "slack_ts": self.state["slack_ts"],
            },
        )

    def send(
        self, run: SenderPass, conn: psycopg.Connection, route: Any, transport: Any
    ) -> tuple[Delivery, str | None]:
        """Send the message: a Slack card (posted, or with the bot token edited and replied
        to in its thread after the first), or the receiver's group request."""
        message = self.message
        assert message is not None
        if not transport.packs:
            transport.deliver_group(message, dashboard_url=run.dashboard_url)
            run.counts["messages"] += 1
            return Delivery(None, None), None
        now = run.clock()
        first = message.kind == FIRST
        channel, ts = self.state.get("slack_channel"), self.state.get("slack_ts")
        card = {
            "group": self.labels,
            "keys": [message.message_key],
            "actions": bool(run.db.settings.slack_actions_port),
        }
        if first or not transport.supports_threads or not ts:
            posted = transport.post(
                thread_update(
                    run,
                    member_rows(message.members),
                    self.route_name,
                    now,
                    mention=getattr(route, "mention", None),
                    updated=False,
                    **card,
                )
            )
            run.counts["messages"] += 1
            return posted, None
        lines = conn.execute(
            run.db.compose("sender_thread_notifications"), {"channel": channel, "ts": ts}
        ).fetchall()
        note = None
        try:
            transport.update(
                channel, ts, thread_update(run, [*lines, *self.rows], self.route_name, now, **card)
            )
            run.counts["updates"] += 1
        except PermanentError as error:
            note = error_text(error, "chat.update failed (reply sent): ", run.secrets)
        transport.reply(
            channel,
            ts,
            render_notifications(
                self.rows,
                mention=getattr(route, "mention", None),
                dashboard_url=run.dashboard_url,
                now=now,
                route=self.route_name,
            ),
        )
        run.counts["messages"] += 1
        return Delivery(channel, ts), note

    def record(self, run: SenderPass, conn: psycopg.Connection, delivery: Delivery) -> None:
        """Store the group's state after its message (same transaction as its rows)."""
        message = self.message
        assert message is not None
        still = _kept(message.members)
        first = message.kind == FIRST
        conn.execute(
            run.db.compose("alert_group_record"),
            {
                **self._params(run),
                "episode": message.episode,
                "open": bool(still),
                "seq": (0 if first else self.state["seq"]) + 1,
                "members": Jsonb(still),
                "first_sent_at": run.clock() if first else None,
                "now": run.clock(),
                "slack_channel": delivery.channel if first else self.state["slack_channel"],
                "slack_ts": delivery.ts if first else self.state["slack_ts"],
            },
        )
        log.info(
            "group %s of route %s: %s message (%d instance(s), %d firing)",
            _canonical(self.labels),
            self.route_name,
            message.kind,
            len(message.members),
            len(still),
        )


def _told_before(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of a closed group's pending rows, the resolves (and errors' resolves) of instances
    that have no firing or error row among them: their firing was told outside the group
    (before the route had ``group_by``), so they are resolved as they were told."""
    fired = {(r["rule"], r["instance"]) for r in rows if r["kind"] in ("firing", "error")}
    return [r for r in rows if r["kind"] == RESOLVED and (r["rule"], r["instance"]) not in fired]


def open_group_key(db: Any, route_name: str, route: Any, labels: object) -> str | None:
    """The key of the open episode of the group an instance of ``labels`` is in on a
    grouped route (PagerDuty's ``dedup_key`` of its incident: a Slack Acknowledge
    acknowledges it); ``None`` when its group has no open episode.

    Args:
        db: the connector (its outbox).
        route_name, route: the route with ``group_by``.
        labels: the instance's labels.
    """
    group = group_labels(route.group_by, labels)
    state = db.fetch_one(
        "alert_group_open",
        {"outbox": db.alert_outbox, "route": route_name, "group_key": group_hash(group)},
    )
    if state is None:
        return None
    return group_alert_key(db.alert_outbox, route_name, group, state["episode"])


def deliver_groups(
    run: SenderPass,
    route_name: str,
    route: Any,
    transport: Any,
    rows: list[dict[str, Any]],
    now: datetime,
    budget: int,
) -> tuple[list[dict[str, Any]], bool]:
    """Send the due messages of a grouped route's groups (one per group), in the order of
    their oldest rows; a group not due yet waits without holding up the others.

    Args:
        run: the sender's pass.
        route_name, route: the route (with ``group_by``) and its name.
        transport: its receiver.
        rows: its pending rows in id order.
        now: the pass's start (the sender's clock).
        budget: at most this many delivery attempts in the pass.

    Returns:
        The rows that are not grouped (the scheduler's own alerts: no evaluation; the
        resolves of instances told outside any open group, e.g. before ``group_by`` was
        added: their incident is the instance's), for the sender's usual delivery, and
        whether the route may go on (``False`` after a
        message that must be retried: the route keeps its order).
    """
    groups: dict[str, tuple[dict[str, str], list[dict[str, Any]]]] = {}
    ungrouped = []
    for row in rows:
        if row["evaluation_id"] is None:
            ungrouped.append(row)
            continue
        labels = group_labels(route.group_by, row_payload(row).get("labels"))
        groups.setdefault(group_hash(labels), (labels, []))[1].append(row)
    if not groups:
        return ungrouped, True
    states = {
        s["group_key"]: s
        for s in run.db.fetch_all(
            "alert_groups_of_route",
            {"outbox": run.db.alert_outbox, "route": route_name, "keys": list(groups)},
        )
    }
    for key, (_, members) in groups.items():
        state = states.get(key)
        if state is None or not state["open"]:
            told = _told_before(members)
            ungrouped += told
            members[:] = [row for row in members if row not in told]
    ungrouped.sort(key=lambda row: row["id"])
    pending = [(key, group) for key, group in groups.items() if group[1]]
    for index, (key, (labels, members)) in enumerate(pending):
        if (
            run.counts["attempts"] >= budget
            or due_at(route, states.get(key), members) > now
            or any(row["available_at"] > now for row in members)
        ):
            run.counts["waiting"] += len(members)
            continue
        plan = GroupPlan(route_name, route, labels, key, members)
        if not deliver_pack(run, route, transport, Pack(route_name, members, group=plan), now):
            run.counts["waiting"] += sum(len(m) for _, (_, m) in pending[index:])
            return ungrouped, False
    return ungrouped, True
